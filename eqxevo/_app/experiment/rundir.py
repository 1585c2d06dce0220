"""THE run directory: the files a run (alone or in a study) keeps, written whole
or not at all, and read back checked. The layout: docs/operations.md.
"""

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import equinox as eqx

from eqxevo._src._types import Genome
from eqxevo._src.qd.archive import Archive, ArchiveState

from .. import config as config_module
from ..checkpoint import Checkpointer
from ..config import Experiment, method_name
from ..figures import archive_figure, plot_fitness, save_figure
from ..lock import WriterLock
from ..metrics import MetricsLog


class RunDirError(RuntimeError):
    """The run directory cannot be used: it holds another run, no run, or a
    missing or damaged file."""


GENOME_FILES = {"best": "best_genome.eqx", "mean": "mean_genome.eqx"}
"""The saved genomes: the best seen and (algorithms with one) the final mean."""

_RUN_FILES = (
    "metrics.jsonl",
    "summary.json",
    "fitness.png",
    "trajectory.png",
    *GENOME_FILES.values(),
)
_RUN_DIRS = ("checkpoints", "damaged-checkpoints", "tensorboard", "wandb")


def _name(err: BaseException, path: Path) -> None:
    """Let an `OSError` without a file name (a failed write or flush) name the
    file it was writing, so its one-line message says where."""
    if isinstance(err, OSError) and err.filename is None:
        err.filename = str(path)


@contextlib.contextmanager
def atomic_file(path: Path, mode: str) -> Iterator[IO[Any]]:
    """A file that becomes `path` whole or not at all: written under a temporary
    name in the same folder, synced, renamed over `path` (atomic: readers see the
    old file or the new one), the folder synced so the rename survives a crash.
    On any failure (a full disk, a kill) the old file stays and the temporary
    one goes."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open(mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        _name(err, path)
        raise


def write_atomic(path: Path, text: str) -> None:
    """Write a file whole or not at all (a kill never leaves half of it)."""
    with atomic_file(path, "w") as f:
        f.write(text)


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from `path`; {} when there is no such file.

    Raises:
        RunDirError: the file is cut short (a crash mid-write on a file system
            without atomic rename), unreadable or not a JSON object; names it.
    """
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise RunDirError(
            f"{path} is cut short or damaged ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:80]})"
        ) from None
    if not isinstance(data, dict):
        raise RunDirError(f"{path} is damaged: not a JSON object")
    return data


def sha256(path: Path) -> str:
    """The file's SHA-256, in hex (summary.json records those of the genomes)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _totals(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary with its totals over every segment (run and resumes)."""
    segments = summary.get("segments", [])
    running = sum(s.get("run_time_s", 0.0) for s in segments)
    steps = sum(s.get("agent_steps", 0) for s in segments)
    summary["wall_time_s"] = round(sum(s.get("wall_time_s", 0.0) for s in segments), 3)
    summary["agent_steps"] = steps
    summary["agent_steps_per_s"] = steps / running if running > 0 else 0.0
    summary["num_segments"] = len(segments)
    return summary


class RunDir:
    """A run directory and its files:

    config.toml      the effective experiment (`eqxevo run` on it repeats the run)
    metrics.jsonl    one record per generation (and seed)
    summary.json     totals over every segment, held-out record, status
    checkpoints/     verified orbax checkpoints (`eqxevo._app.checkpoint`)
    best_genome.eqx, mean_genome.eqx, fitness.png
    tensorboard/, wandb/   with `[sinks]` switched on
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.metrics = MetricsLog(self.path / "metrics.jsonl")

    @property
    def config_path(self) -> Path:
        return self.path / "config.toml"

    def exists(self) -> bool:
        """Whether a run was started here (it has a config.toml)."""
        return self.config_path.exists()

    def require(self, *, writer: bool = False) -> None:
        """Raise `RunDirError` unless a run was started here.

        A `writer` (a resume) is told first of a live process that is starting
        a run there (`LockedError`): it holds the lock before config.toml exists.
        """
        if not self.exists():
            if writer and self.path.is_dir():
                WriterLock(self.path, "run directory").acquire().release()
            raise RunDirError(f"{self.path} holds no run (no config.toml)")

    def newest_checkpoint(self) -> int | None:
        """The newest checkpoint folder's generation (by name; not verified)."""
        folder = self.path / "checkpoints"
        steps = [int(p.name) for p in folder.glob("*") if p.name.isdigit()]
        return max(steps) if steps else None

    def prepare_new(self) -> bool:
        """Make the directory ready for a new run; True if an earlier attempt that
        saved no checkpoint was cleared away. A run with a checkpoint is never
        touched.

        Raises:
            RunDirError: the directory holds a run with checkpoints.
        """
        if not self.exists():
            self.path.mkdir(parents=True, exist_ok=True)
            return False
        # A run with a checkpoint holds work that `eqxevo resume` would lose.
        if self.newest_checkpoint() is not None:
            raise RunDirError(
                f"{self.path} already holds a run; continue it with `eqxevo resume "
                f"{self.path}` or choose another --out/--name"
            )
        for name in _RUN_FILES:
            (self.path / name).unlink(missing_ok=True)
        for name in _RUN_DIRS:
            shutil.rmtree(self.path / name, ignore_errors=True)
        return True

    def lock(self, *, resume: bool) -> WriterLock:
        """Become the directory's one writer (`eqxevo._app.lock`): a new run's directory
        is made first; a resumed run's must hold a run.

        Raises:
            RunDirError: a resumed run without a directory.
            LockedError: another live process writes the directory; names it.
        """
        if resume:
            self.require()
        else:
            self.path.mkdir(parents=True, exist_ok=True)
        return WriterLock(self.path, "run directory").acquire()

    def open(self, experiment: Experiment, *, resume: bool) -> list[str]:
        """Make the directory hold `experiment`'s run: a new one (`prepare_new`) or
        the same run continued (`changed_keys`); config.toml then holds
        `experiment`. Returns the notes the user must see.

        Raises:
            RunDirError: see `prepare_new` and `changed_keys`; a resumed run with
                no directory.
        """
        notes = []
        if resume:
            self.changed_keys(experiment)
        elif self.prepare_new():
            notes.append(
                f"{self.path} held a run that saved no checkpoint; starting afresh "
                "there"
            )
        self.write_config(experiment)
        return notes

    def checkpointer(self, keep: int) -> Checkpointer:
        return Checkpointer(self.path / "checkpoints", keep=keep)

    def read_config(self, overrides: Iterable[str] = ()) -> Experiment:
        """The run's experiment, with `--set` overrides applied."""
        self.require()
        return config_module.load(self.config_path, overrides)

    def write_config(self, experiment: Experiment) -> None:
        write_atomic(self.config_path, config_module.dumps(experiment))

    def changed_keys(self, experiment: Experiment) -> list[str]:
        """The config keys in which `experiment` differs from the saved one.

        Raises:
            RunDirError: they include keys a resumed run may not change (they
                would change its trajectory); names them.
        """
        # Keys that only change bookkeeping (more generations, chunking, held-out
        # settings) may differ; any other would make the run a different one.
        changed = config_module.differences(self.read_config(), experiment)
        fixed = [k for k in changed if not config_module.resumable(k)]
        if fixed:
            raise RunDirError(
                f"{self.path} holds a run of another experiment (it differs in "
                f"{', '.join(fixed)}); a resumed run can only change "
                f"{', '.join(config_module.RESUMABLE_CHANGES)}"
            )
        return changed

    def read_summary(self) -> dict[str, Any]:
        """summary.json ({} when there is none).

        Raises:
            RunDirError: it is cut short or damaged (`eqxevo resume` rebuilds it).
        """
        return read_json(self.path / "summary.json")

    def write_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Write summary.json with its totals over every segment; returns it."""
        summary = _totals(summary)
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")
        return summary

    def save_genome(self, which: str, genome: Genome) -> None:
        """Write genome `which` ("best" or "mean") with Equinox serialisation."""
        with atomic_file(self.path / GENOME_FILES[which], "wb") as f:
            eqx.tree_serialise_leaves(f, genome)

    def load_genome(self, which: str, like: Genome) -> Genome:
        """Read genome `which` ("best" or "mean") into the structure of `like`.

        Raises:
            RunDirError: the file is missing, damaged, or not the file written
                (its checksum in summary.json differs).
        """
        path = self.path / GENOME_FILES[which]
        if not path.exists():
            raise RunDirError(
                f"{self.path} holds no {path.name}: the run has not finished a segment"
            )
        expected = self.read_summary().get("checksums", {}).get(path.name)
        if expected is not None and sha256(path) != expected:
            raise RunDirError(
                f"{path} is damaged: its SHA-256 differs from the one summary.json "
                "recorded when it was written"
            )
        try:
            return eqx.tree_deserialise_leaves(path, like)
        except Exception as err:  # any damage: a short, wrong-sized or foreign file
            raise RunDirError(
                f"{path} is damaged ({type(err).__name__}: "
                f"{' '.join(str(err).split())[:120]})"
            ) from None

    def title(self, experiment: Experiment) -> str:
        """A figure title naming the run: directory, environment, network,
        strategy, P, T and seeds."""
        e = experiment
        seeds = f", {e.run.num_seeds} seeds" if e.run.num_seeds > 1 else ""
        return (
            f"{self.path.name}: {e.env.name}, {e.net.name}, {method_name(e)} "
            f"(P={e.strategy.population_size}, T={e.run.lifetime}{seeds})"
        )

    def plot(
        self, experiment: Experiment | None = None, bands: Sequence[Any] = ()
    ) -> Path:
        """Draw fitness.png from metrics.jsonl, with reference `bands`
        (`eqxevo._app.figures.ReferenceBand`) across it.

        Raises:
            RunDirError: there are no records to draw.
        """
        records = self.metrics.read()
        if not records:
            raise RunDirError(f"{self.path} has no metrics.jsonl records to plot")
        title = self.path.name if experiment is None else self.title(experiment)
        return plot_fitness(
            records, self.path / "fitness.png", title=title, bands=bands
        )

    def plot_archive(
        self, experiment: Experiment, archive: Archive, contents: ArchiveState
    ) -> dict[str, float]:
        """A MAP-Elites run's archive: archive.png (its heatmap, over 2 or more
        descriptor dimensions) and its QD metrics, for summary.json."""
        metrics = {k: float(v) for k, v in archive.metrics(contents).items()}
        if archive.descriptor_size >= 2:
            figure = archive_figure(
                archive,
                contents,
                labels=experiment.qd.descriptor,
                title=self.title(experiment),
            )
            save_figure(figure, self.path / "archive.png")
        return metrics


__all__ = [
    "GENOME_FILES",
    "RunDir",
    "RunDirError",
    "atomic_file",
    "read_json",
    "sha256",
    "write_atomic",
]
