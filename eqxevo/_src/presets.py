"""Strategy presets: one TOML file per strategy (the algorithm, its constructor
arguments, `Params` overrides and paper), shipped in the wheel.
"""

import dataclasses
import inspect
from importlib import resources
from pathlib import Path
from typing import Any

import optax

from ._checks import did_you_mean
from .tomlfile import ConfigError, read_toml

SHAPING_NAMES = ("identity", "centered_rank", "weights", "standardize", "normalize")
"""Fitness-shaping functions a preset may name (evosax.core.fitness_shaping)."""

_PRESET_KEYS = {"algorithm", "description", "paper", "kwargs", "params"}


class PresetError(ValueError):
    """A preset TOML file is malformed; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class Preset:
    """A preset file, read and checked.

    Attributes:
        name: the file's stem (what `[strategy] name` says).
        path: the file.
        cls: the evosax algorithm class.
        kwargs: constructor keyword arguments (optimizers and shaping built).
        raw_kwargs: the same as written (plain TOML values).
        params: `Params` field overrides.
        paper, description: the method's citation and a one-line description.
    """

    name: str
    path: Path
    cls: type
    kwargs: dict[str, Any]
    raw_kwargs: dict[str, Any]
    params: dict[str, Any]
    paper: str
    description: str


def fitness_shaping_fn(name: str) -> Any:
    """The evosax fitness-shaping function called `name` (see `SHAPING_NAMES`)."""
    from evosax.core import fitness_shaping

    return getattr(fitness_shaping, f"{name}_fitness_shaping_fn")


def preset_dir() -> Path:
    """Folder holding the shipped presets (inside the wheel, or the source tree)."""
    shipped = Path(str(resources.files("eqxevo"))) / "_presets"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parents[2] / "strategies"


def preset_names() -> list[str]:
    """Names of the shipped presets (file stems, lower case)."""
    folder = preset_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _fail(path: Path, msg: str) -> PresetError:
    return PresetError(f"preset {path}: {msg}")


def kwarg_value(path: Path, key: str, value: Any) -> Any:
    """A constructor argument from its TOML value: optax/evosax optimizer tables
    and fitness-shaping names are built; other values pass as they are.

    Raises:
        PresetError: naming `path` (a preset file, or the config table) and `key`.
    """
    if key == "fitness_shaping_fn":
        spec = {"name": value} if isinstance(value, str) else value
        if not isinstance(spec, dict) or set(spec) - {"name", "weight_decay"}:
            raise _fail(
                path,
                f"kwargs.fitness_shaping_fn must be a name or "
                f"{{name = ..., weight_decay = ...}}; got {value!r}",
            )
        name = spec.get("name")
        if name not in SHAPING_NAMES:
            raise _fail(
                path,
                f"kwargs.fitness_shaping_fn name {name!r} is not one of "
                f"{sorted(SHAPING_NAMES)}",
            )
        fn = fitness_shaping_fn(name)
        if "weight_decay" in spec:
            from evosax.core import fitness_shaping

            fn = fitness_shaping.add_weight_decay(fn, float(spec["weight_decay"]))
        return fn
    from evosax.core import optimizer as evosax_optimizer

    # An optimizer is a table naming its factory: { optax = "adam", ... } or
    # { evosax = "clipup", ... }; the other keys are the factory's arguments.
    for namespace, module in (("optax", optax), ("evosax", evosax_optimizer)):
        if isinstance(value, dict) and namespace in value:
            args = {k: v for k, v in value.items() if k != namespace}
            name = value[namespace]
            factory = getattr(module, name, None) if isinstance(name, str) else None
            if factory is None or not callable(factory) or name.startswith("_"):
                raise _fail(
                    path,
                    f"kwargs.{key}: {module.__name__} has no public function {name!r}",
                )
            try:
                return factory(**args)
            except TypeError as err:
                raise _fail(
                    path, f"kwargs.{key}: {namespace}.{name}(**{args}) failed: {err}"
                ) from err
    if isinstance(value, dict):
        raise _fail(
            path,
            f"kwargs.{key}: a table must name an optax or evosax optimizer factory, "
            f"e.g. {{optax = 'adam', learning_rate = 0.01}} or "
            f"{{evosax = 'clipup', learning_rate = 0.15, max_velocity = 0.3}}; "
            f"got {value!r}",
        )
    return value


def load_preset(path: str | Path) -> Preset:
    """Read and validate one preset TOML file.

    Raises:
        PresetError: the file is not valid TOML, names an unknown algorithm or key,
            or gives a value of the wrong kind; the message names the file and key.
    """
    path = Path(path)
    try:
        data = read_toml(path, "preset")
    except ConfigError as err:
        raise PresetError(str(err)) from None
    unknown = set(data) - _PRESET_KEYS
    if unknown:
        raise _fail(
            path, f"unknown keys {sorted(unknown)}; allowed {sorted(_PRESET_KEYS)}"
        )
    name = data.get("algorithm")
    from evosax.algorithms import algorithms

    if not isinstance(name, str) or name not in algorithms:
        raise _fail(
            path,
            f"algorithm = {name!r} is not an evosax algorithm"
            + did_you_mean(str(name), algorithms, n=3),
        )
    cls = algorithms[name]
    for table in ("kwargs", "params"):
        if not isinstance(data.get(table, {}), dict):
            raise _fail(path, f"[{table}] must be a table")
    raw_kwargs = data.get("kwargs", {})
    # A typo in [kwargs] would otherwise reach evosax as a TypeError at build time,
    # naming neither the file nor the key.
    accepted = set(inspect.signature(cls.__init__).parameters) - {
        "self",
        "population_size",
        "solution",
    }
    bad = set(raw_kwargs) - accepted
    if bad:
        raise _fail(
            path,
            f"[kwargs] {sorted(bad)} are not arguments of {name}; it accepts "
            f"{sorted(accepted)}",
        )
    kwargs = {k: kwarg_value(path, k, v) for k, v in raw_kwargs.items()}
    params = dict(data.get("params", {}))
    for key, value in params.items():
        if not isinstance(value, int | float | bool):
            raise _fail(path, f"params.{key} must be a number; got {value!r}")
    return Preset(
        name=path.stem,
        path=path,
        cls=cls,
        kwargs=kwargs,
        raw_kwargs=dict(raw_kwargs),
        params=params,
        paper=str(data.get("paper", "")),
        description=str(data.get("description", "")),
    )


__all__ = [
    "SHAPING_NAMES",
    "Preset",
    "PresetError",
    "fitness_shaping_fn",
    "kwarg_value",
    "load_preset",
    "preset_dir",
    "preset_names",
]
