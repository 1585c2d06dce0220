"""Metric records, their sinks (JSONL, TensorBoard, W&B) and the progress display.

See docs/internals.md ("Metrics") for what a record holds and why it is deterministic.
"""

import json
import math
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress as RichProgress,
    TextColumn,
    TimeElapsedColumn,
)


def _clean(value: Any) -> Any:
    # JSON has no NaN or inf (allow_nan=False below): they are written as null.
    value = value.item() if isinstance(value, np.generic | np.ndarray) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def history_records(history: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One record per generation (and seed) from an `evolve` history chunk.

    Arrays shaped `(n,)` give records without a seed field; `(K, n)` give one
    record per seed with `seed` = 0..K-1. Scalar leaves of `aux` become
    `aux.<path>` fields.
    """
    fields: dict[str, np.ndarray] = {
        k: np.asarray(v) for k, v in history.items() if k != "aux"
    }
    # aux is a user pytree: its leaves become flat dotted fields for every sink.
    aux = history.get("aux")
    if aux is not None:
        for path, leaf in jax.tree_util.tree_flatten_with_path(aux)[0]:
            name = "aux" + "".join(
                f".{getattr(p, 'key', getattr(p, 'name', getattr(p, 'idx', p)))}"
                for p in path
            )
            fields[name] = np.asarray(leaf)
    generation = fields["generation"]
    batched = generation.ndim == 2
    num_seeds, count = generation.shape if batched else (1, generation.shape[0])
    records = []
    for step in range(count):
        for seed in range(num_seeds):
            record: dict[str, Any] = {}
            for name, array in fields.items():
                value = array[seed, step] if batched else array[step]
                if np.ndim(value) == 0:
                    record[name] = _clean(value)
            if batched:
                # generation and seed first: the record reads as its own key.
                record = {
                    "generation": record.pop("generation"),
                    "seed": seed,
                    **record,
                }
            records.append(record)
    return records


class MetricsLog:
    """`metrics.jsonl`: one JSON record per generation and seed, appended per chunk."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def append(self, records: Iterable[Mapping[str, Any]]) -> None:
        try:
            with self.path.open("a") as f:
                for record in records:
                    f.write(json.dumps(record, allow_nan=False) + "\n")
                f.flush()  # a crash loses at most the chunk being written
        except OSError as err:
            # A line cut short by a full disk is dropped when the run resumes.
            if err.filename is None:
                err.filename = str(self.path)
            raise

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open() as f:
            return [json.loads(line) for line in f if line.strip()]

    def truncate(self, generation: int) -> None:
        """Drop records of generation >= `generation` (work lost after a checkpoint).

        A final line cut short by a crash is dropped too.
        """
        self._rewrite(
            lambda record, line: line if record["generation"] < generation else None
        )

    def drop_fields(self, prefix: str, where: Callable[[dict[str, Any]], bool]) -> None:
        """Remove the fields starting with `prefix` from the records `where` picks
        (other lines are kept byte for byte)."""

        def edit(record: dict[str, Any], line: str) -> str:
            if where(record) and any(k.startswith(prefix) for k in record):
                kept = {k: v for k, v in record.items() if not k.startswith(prefix)}
                return json.dumps(kept, allow_nan=False)
            return line

        self._rewrite(edit)

    def _rewrite(self, edit: Callable[[dict[str, Any], str], str | None]) -> None:
        """Replace the file by `edit(record, line)` of each line (None drops it);
        a line that is not JSON (cut short by a crash) is dropped."""
        if not self.path.exists():
            return
        lines = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            edited = edit(record, line)
            if edited is not None:
                lines.append(edited)
        # Written aside and renamed: a crash leaves the old file or the new one.
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text("".join(line + "\n" for line in lines))
            tmp.replace(self.path)
        except BaseException as err:
            # A full disk keeps the old file and leaves no metrics.tmp behind.
            tmp.unlink(missing_ok=True)
            if isinstance(err, OSError) and err.filename is None:
                err.filename = str(self.path)
            raise


# -- other sinks ------------------------------------------------------------------


class SinkError(RuntimeError):
    """A metric sink cannot start (its library is missing, say)."""


def _tags(record: Mapping[str, Any]) -> tuple[int, dict[str, float]]:
    """A record's generation and its numeric fields as `name` or `seed_k/name`."""
    # None (a non-finite value) and strings are not scalars to plot: skipped.
    generation = int(record["generation"])
    prefix = f"seed_{record['seed']}/" if "seed" in record else ""
    values = {
        f"{prefix}{name}": float(value)
        for name, value in record.items()
        if name not in ("generation", "seed")
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    }
    return generation, values


class TensorBoardSink:
    """Scalars to TensorBoard event files in `log_dir` (through tensorboardX).

    One scalar per record field, at step = generation; with several seeds the
    tags are `seed_<k>/<field>`. `tensorboard --logdir RUN_DIR/tensorboard`.
    """

    def __init__(self, log_dir: str | Path):
        try:
            from tensorboardX import SummaryWriter
        except ImportError as err:
            raise SinkError(
                "sinks.tensorboard = true needs tensorboardX: pip install "
                "'eqxevo[sinks]'"
            ) from err
        self.log_dir = Path(log_dir)
        self._writer = SummaryWriter(logdir=str(self.log_dir), flush_secs=5)

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        for record in records:
            generation, values = _tags(record)
            for tag, value in values.items():
                self._writer.add_scalar(tag, value, global_step=generation)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Metrics to a Weights & Biases run (offline by default: no network).

    Offline runs are written under `run_dir/wandb/`; `wandb sync` uploads them
    later. One `log` per generation with every seed's fields (`seed_<k>/...`).

    Arguments:
        run_dir: the run directory (W&B writes `run_dir/wandb/`).
        project: the W&B project.
        name: the run's name (the run directory's name).
        config: the resolved experiment, recorded as the run's config.
        mode: "offline" or "online".
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        project: str,
        name: str,
        config: Mapping[str, Any],
        mode: str = "offline",
    ):
        try:
            import wandb
        except ImportError as err:
            raise SinkError(
                "sinks.wandb = true needs wandb: pip install 'eqxevo[sinks]'"
            ) from err
        settings = wandb.Settings(
            silent=True, console="off", x_disable_stats=True, disable_git=True
        )
        self._run = wandb.init(
            project=project,
            name=name,
            dir=str(run_dir),
            mode=mode,  # type: ignore[arg-type]
            config=dict(config),
            settings=settings,
        )

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        by_generation: dict[int, dict[str, float]] = {}
        for record in records:
            generation, values = _tags(record)
            by_generation.setdefault(generation, {}).update(values)
        for generation in sorted(by_generation):
            self._run.log(by_generation[generation], step=generation)

    def close(self) -> None:
        self._run.finish()


# -- progress -----------------------------------------------------------------------


def _fmt(value: Any) -> str:
    return "nan" if value is None else f"{value:+.4g}"


def format_seconds(seconds: int | float) -> str:
    """`0.17 s`, `42 s`, `7.5 min`, `3.7 h`."""
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def archive_text(records: Sequence[Mapping[str, Any]]) -> str:
    """A MAP-Elites run's archive in a progress line: the best QD score and
    coverage of `records` (one generation's, a record per seed); "" for others."""
    scores = [r["qd_score"] for r in records if r.get("qd_score") is not None]
    if not scores:
        return ""
    coverage = max(r["coverage"] for r in records if "coverage" in r)
    return f"QD score {_fmt(max(scores))}  coverage {100 * coverage:.1f}%"


def heldout_text(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The newest held-out evaluation among `records`, in words: the mean genome's
    (or, for algorithms without a mean, the best-so-far genome's) held-out
    fitness with its 95% CI half-width (one seed), or the mean over seeds."""
    for genome in ("mean", "best"):
        name = f"heldout_{genome}_mean"
        found = [r for r in records if r.get(name) is not None]
        if not found:
            continue
        last = max(r["generation"] for r in found)
        rows = [r for r in found if r["generation"] == last]
        if len(rows) > 1:
            value = float(np.mean([r[name] for r in rows]))
            return f"held-out {genome} {value:+.4g} (mean of {len(rows)} seeds)"
        (row,) = rows
        low, high = (
            row.get(f"heldout_{genome}_ci_low"),
            row.get(f"heldout_{genome}_ci_high"),
        )
        half = "" if low is None or high is None else f" ± {(high - low) / 2:.2g}"
        return f"held-out {genome} {row[name]:+.4g}{half}"
    return None


class Progress:
    """Progress of a run: a live bar on a terminal, plain lines otherwise.

    Throughput and the time left come from the generations run since
    `start_running()` (called once the program is compiled), so compilation
    does not inflate them. Between chunks a heartbeat reports the chunk in
    progress every `every` seconds, from the measured seconds per generation
    (no callback leaves the compiled program).

    Arguments:
        total: generations to reach.
        agent_steps_per_generation: P * T * seeds, for the agent-steps/s figure.
        start: generations already done (a resumed run).
        quiet: print nothing.
        stream: where to write (default stderr).
        every: seconds between plain lines (and heartbeats).
        long_run: seconds of projected wall time above which a warning is printed.
    """

    def __init__(
        self,
        total: int,
        agent_steps_per_generation: int,
        *,
        start: int = 0,
        quiet: bool = False,
        stream: Any = None,
        every: float = 5.0,
        long_run: float = 3600.0,
    ):
        self.total = total
        self.steps_per_generation = agent_steps_per_generation
        self.start_generation = start
        self.done = start
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.long_run = long_run
        self._t0 = time.perf_counter()
        self._run_t0: float | None = None
        self._run_from = start
        self._last_update = self._t0
        self._last_line = -math.inf
        self._bar: Any = None
        self._task: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.best: float | None = None
        self.mean: float | None = None
        self.heldout: str | None = None
        self.archive = ""  # a MAP-Elites run's QD score and coverage
        self.projected: float | None = None
        self._printed_at = -1

    # -- output -----------------------------------------------------------------

    def _width(self) -> int:
        return shutil.get_terminal_size((100, 24)).columns

    def say(self, text: str) -> None:
        """Print one line (above the live bar, if any)."""
        if self.quiet:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.console.print(text, highlight=False, markup=False)
            else:
                print(text, file=self.stream, flush=True)

    def __enter__(self) -> "Progress":
        if self.quiet:
            return self
        if self.stream.isatty():
            console = Console(file=self.stream, width=self._width())
            self._bar = RichProgress(
                TextColumn("gen"),
                MofNCompleteColumn(),
                BarColumn(bar_width=None),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                console=console,
                transient=False,
                refresh_per_second=2,
                expand=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "run", total=self.total, completed=self.done, info="compiling..."
            )
        else:
            self.say(f"generation {self.done}/{self.total}: compiling...")
        # A daemon thread: it never keeps the process alive after the run.
        self._thread = threading.Thread(
            target=self._heartbeat, name="eqxevo-progress", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif not self.quiet and self._printed_at != self.done and self._run_t0:
            self._line()

    # -- measurements -----------------------------------------------------------

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def start_running(self, at: float | None = None) -> None:
        """Mark the end of compilation (now, or at `at`, a `time.perf_counter()`
        value): rates are measured from here."""
        self._run_t0 = time.perf_counter() if at is None else at
        self._run_from = self.done
        self._last_update = self._run_t0

    @property
    def seconds_per_generation(self) -> float | None:
        """Measured since `start_running` (None before a chunk has finished)."""
        if self._run_t0 is None or self.done <= self._run_from:
            return None
        return (self._last_update - self._run_t0) / (self.done - self._run_from)

    @property
    def agent_steps_per_second(self) -> float:
        """Throughput since compilation ended (0 before any chunk)."""
        per_generation = self.seconds_per_generation
        if per_generation is None:
            return 0.0
        return self.steps_per_generation / max(per_generation, 1e-9)

    @property
    def eta(self) -> float | None:
        """Seconds left at the measured pace (None before a chunk has finished)."""
        per_generation = self.seconds_per_generation
        if per_generation is None:
            return None
        # Time since the last chunk finished is already spent on the next one.
        behind = time.perf_counter() - self._last_update
        return max((self.total - self.done) * per_generation - behind, 0.0)

    def update(
        self, records: Sequence[Mapping[str, Any]], at: float | None = None
    ) -> None:
        """Account for a chunk of records (one or more generations), finished now
        or at `at` (a `time.perf_counter()` value: when the device finished it)."""
        if not records:
            return
        if self._run_t0 is None:
            self.start_running()
        # The display shows the newest generation (one record per seed).
        last = max(r["generation"] for r in records)
        latest = [r for r in records if r["generation"] == last]
        first_chunk = self.done == self._run_from
        self.done = last + 1
        self._last_update = time.perf_counter() if at is None else at
        bests = [r["best_so_far"] for r in latest if r.get("best_so_far") is not None]
        means = [r["mean"] for r in latest if r.get("mean") is not None]
        self.best = max(bests) if bests else None
        self.mean = float(np.mean(means)) if means else None
        self.archive = archive_text(latest)
        # Held-out evaluations run every few generations: keep the last one shown.
        self.heldout = heldout_text(records) or self.heldout
        if first_chunk:
            self._project()
        if self.quiet:
            return
        if self._bar is not None:
            with self._lock:
                self._bar.update(self._task, completed=self.done, info=self._info())
        elif self.elapsed - self._last_line >= self.every or self.done >= self.total:
            self._line()

    def _project(self) -> None:
        # Said once, after the first chunk: the first honest measure of the pace.
        per_generation = self.seconds_per_generation
        if per_generation is None:
            return
        projected = (self.total - self.done) * per_generation
        self.projected = projected
        if self.done >= self.total:
            return
        text = (
            f"{format_seconds(per_generation)} per generation here: the remaining "
            f"{self.total - self.done} generations take about "
            f"{format_seconds(projected)}"
        )
        if projected > self.long_run:
            text = (
                f"warning: long run. {text}. Ctrl-C (or SIGTERM) stops it with a "
                "checkpoint; `eqxevo resume RUN_DIR` continues it."
            )
        self.say(text)

    def _info(self) -> str:
        eta = self.eta
        parts = [self.heldout] if self.heldout else []
        parts += [f"train best so far {_fmt(self.best)}", f"mean {_fmt(self.mean)}"]
        parts += [self.archive] if self.archive else []
        rate = self.agent_steps_per_second
        if rate > 0:
            parts.append(f"{rate:.3g} agent-steps/s")
        if eta is not None:
            parts.append(f"eta {format_seconds(eta)}")
        return "  ".join(parts)

    def _line(self) -> None:
        self._last_line = self.elapsed
        self._printed_at = self.done
        self.say(
            f"generation {self.done}/{self.total}  {self._info()}  "
            f"elapsed {format_seconds(self.elapsed)}"
        )

    def _heartbeat(self) -> None:
        """Every `every` seconds without a finished chunk: the generation running,
        how long it has run and the time left (estimated from the pace)."""
        quiet_for = max(self.every, 1.0)
        # Wakes twice a second so that __exit__'s stop is seen at once.
        while not self._stop.wait(0.5):
            now = time.perf_counter()
            if self._run_t0 is None or now - self._last_update < quiet_for:
                continue
            if self.elapsed - self._last_line < quiet_for:
                continue
            per_generation = self.seconds_per_generation
            running = now - self._last_update
            if per_generation is None:
                text = (
                    f"generation {self.done + 1}/{self.total} running: "
                    f"{format_seconds(running)} so far (first chunk)"
                )
            else:
                text = (
                    f"generation {self.done + 1}/{self.total} running: "
                    f"{format_seconds(running)} so far, about "
                    f"{format_seconds(per_generation)} per generation; "
                    f"eta {format_seconds(self.eta or 0.0)}"
                )
            if self._bar is not None:
                # Cut to the terminal: a wrapped live bar redraws as garbage.
                with self._lock:
                    self._bar.update(
                        self._task, info=text[: max(self._width() - 40, 20)]
                    )
                self._last_line = self.elapsed
            elif not self.quiet:
                self._last_line = self.elapsed
                self.say(text)


__all__ = [
    "MetricsLog",
    "Progress",
    "SinkError",
    "TensorBoardSink",
    "WandbSink",
    "archive_text",
    "format_seconds",
    "heldout_text",
    "history_records",
]
