"""Reading a TOML file (a config, a study file, a strategy preset) with one line for
every fault: `read_toml` and the error every config fault raises, `ConfigError`."""

import tomllib
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config key is unknown, of the wrong type, or out of range."""


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The TOML file `path` (a `what`: "config", "study file" ...) as a dict.

    Raises:
        ConfigError: it cannot be read, is not UTF-8 or is not valid TOML; one
            line naming it.
    """
    try:
        return tomllib.loads(Path(path).read_text())
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err}") from err
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte {err.start}: "
            f"{err.object[err.start : err.start + 1]!r}); TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{what} {path} is not valid TOML: {err}") from err
