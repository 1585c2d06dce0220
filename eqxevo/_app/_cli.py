"""What every `eqxevo` command shares: help layout and one-line errors."""

import contextlib
import errno
import re
import shutil
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from ._disk import disk_full

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
"""Context settings of every command: `-h` and `--help`, 100 columns."""


def _run_dir(path: Path) -> Path | None:
    """The run directory holding `path` (a folder with config.toml and
    checkpoints/), or None."""
    for folder in (path, *path.parents):
        if (folder / "config.toml").is_file() and (folder / "checkpoints").is_dir():
            return folder
    return None


def disk_full_message(err: OSError) -> str:
    """One line for a full disk: the path written, the space left there, and what
    to do (`eqxevo resume RUN_DIR` when the path is in a run directory)."""
    from eqxevo._src.memory import format_bytes

    what = "disk quota exceeded" if err.errno == errno.EDQUOT else "no space left"
    filename = err.filename
    if filename is None:
        return f"{what} on device; free some space and try again"
    path = Path(filename).absolute()
    free = "free space unknown"
    for folder in (path, *path.parents):
        try:
            free = f"{format_bytes(shutil.disk_usage(folder).free)} free"
            break
        except OSError:  # not there (yet): the folder above says
            continue
    run_dir = _run_dir(path)
    then = f"`eqxevo resume {run_dir}`" if run_dir is not None else "try again"
    return f"{what} on device writing {path} ({free}); free some space and {then}"


DEVICES = click.option(
    "--devices",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Devices to split each generation's population over (on a CPU: cores, "
    "each made a JAX device; at most the machine's). Results do not depend on it.",
)
"""`--devices N` of `eqxevo run`, `resume` and `study run` (`devices_mesh`)."""


def check_split(devices: int, population_sizes: Iterable[tuple[str, int]]) -> None:
    """Raise `click.BadParameter` unless every population splits over `--devices`
    (each given as (where, size): `where` prefixes the message)."""
    for where, size in population_sizes:
        if size % devices:
            raise click.BadParameter(
                f"{where}strategy.population_size = {size} does not split over "
                f"{devices} devices; use a multiple of {devices}",
                param_hint="--devices",
            )


def devices_mesh(devices: int) -> Any:
    """`--devices N` as a population mesh (None for one); call it before JAX
    starts, so that on a CPU each core becomes a device (`sharding.device_mesh`)."""
    if devices == 1:
        return None
    from eqxevo._src.sharding import device_mesh

    try:
        return device_mesh(devices)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--devices") from None


def fail(err: Exception) -> NoReturn:
    """Stop the command with `err`'s message as one line (`Error: ...`, exit 1);
    a full disk says where and how much space is left."""
    full = disk_full(err)
    raise click.ClickException(
        disk_full_message(full) if full is not None else str(err)
    ) from err


_CACHE_WARNING = re.compile(r"Error (writing|reading) persistent compilation cache")


@contextlib.contextmanager
def _cache_warnings_in_one_line() -> Iterator[None]:
    """JAX warns (and compiles on) for each program its persistent compilation
    cache cannot store or load (a full disk): say so once, in one line."""
    shown = warnings.showwarning
    said = False

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal said
        text = " ".join(str(message).split())
        if not _CACHE_WARNING.match(text):
            return shown(message, category, *args, **kwargs)
        if not said:
            said = True
            why = text.split(": ", 1)[-1][:200]
            click.echo(
                f"note: XLA's compilation cache cannot be used ({why}); compiling "
                "without it (results are the same)",
                err=True,
            )

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


class Group(click.Group):
    """A command group whose commands end a full disk (anywhere: a checkpoint, a
    genome, metrics.jsonl) with one line instead of a traceback, and say in one
    line when XLA's compilation cache cannot be written."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with _cache_warnings_in_one_line():
                return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as err:  # an OSError, or one raised from it
            if disk_full(err) is None:
                raise
            fail(err)


__all__ = ["CONTEXT", "Group", "disk_full_message", "fail"]
