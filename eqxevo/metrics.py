"""Metric records, the JSONL sink and the progress display.

`evolve` hands the host one chunk of per-generation history at a time; this
module turns it into records (one per generation and seed), appends them to
`metrics.jsonl` and shows progress (figures are drawn by `eqxevo.plots`). Records are
deterministic (no wall-clock fields), so a resumed run's metrics equal an
uninterrupted run's line for line; timing goes to the progress display and to
the run summary. Non-finite values are written as JSON `null`.
"""

import io
import json
import math
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np


def _clean(value: Any) -> Any:
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
        with self.path.open("a") as f:
            for record in records:
                f.write(json.dumps(record, allow_nan=False) + "\n")
            f.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open() as f:
            return [json.loads(line) for line in f if line.strip()]

    def truncate(self, generation: int) -> None:
        """Drop records of generation >= `generation` (work lost after a checkpoint).

        A final line cut short by a crash is dropped too.
        """
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record["generation"] < generation:
                kept.append(line)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in kept))
        tmp.replace(self.path)


def _fmt(value: Any) -> str:
    return "nan" if value is None else f"{value:+.4g}"


class Progress:
    """Progress of a run: a live bar on a terminal, periodic lines otherwise.

    Arguments:
        total: generations to reach.
        agent_steps_per_generation: P * T * seeds, for the agent-steps/s figure.
        start: generations already done (a resumed run).
        quiet: print nothing.
        stream: where to write (default stderr).
        every: seconds between plain lines when the stream is not a terminal.
    """

    def __init__(
        self,
        total: int,
        agent_steps_per_generation: int,
        *,
        start: int = 0,
        quiet: bool = False,
        stream: io.TextIOBase | None = None,
        every: float = 10.0,
    ):
        self.total = total
        self.steps_per_generation = agent_steps_per_generation
        self.start_generation = start
        self.done = start
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self._t0 = time.perf_counter()
        self._last_line = -math.inf
        self._bar: Any = None
        self._task: Any = None
        self.best: float | None = None
        self.mean: float | None = None
        # Throughput is measured from the end of the first chunk, which includes
        # compilation, so the figure is the steady rate.
        self._first: tuple[float, int] | None = None
        self._printed_at = -1

    def __enter__(self) -> "Progress":
        if not self.quiet and self.stream.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress as RichProgress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = RichProgress(
                TextColumn("generation"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "run", total=self.total, completed=self.done, info="compiling..."
            )
        elif not self.quiet:
            print(
                f"generation {self.done}/{self.total}: compiling...", file=self.stream
            )
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif not self.quiet and self._printed_at != self.done:
            self._line()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    @property
    def agent_steps_per_second(self) -> float:
        """Steady throughput (after the first chunk).

        With a single chunk so far, the overall rate (compilation included, so an
        underestimate); 0 before any chunk.
        """
        if self._first is None or self.done == self._first[1]:
            done = self.done - self.start_generation
            return done * self.steps_per_generation / max(self.elapsed, 1e-9)
        seconds, generation = self._first
        elapsed = max(self.elapsed - seconds, 1e-9)
        return (self.done - generation) * self.steps_per_generation / elapsed

    def update(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Account for a chunk of records (one or more generations)."""
        if not records:
            return
        last = max(r["generation"] for r in records)
        latest = [r for r in records if r["generation"] == last]
        self.done = last + 1
        if self._first is None:
            self._first = (self.elapsed, self.done)
        bests = [r["best_so_far"] for r in latest if r.get("best_so_far") is not None]
        means = [r["mean"] for r in latest if r.get("mean") is not None]
        self.best = max(bests) if bests else None
        self.mean = float(np.mean(means)) if means else None
        if self.quiet:
            return
        if self._bar is not None:
            info = (
                f"best {_fmt(self.best)}  mean {_fmt(self.mean)}  "
                f"{self.agent_steps_per_second:.3g} agent-steps/s"
            )
            self._bar.update(self._task, completed=self.done, info=info)
        elif self.elapsed - self._last_line >= self.every or self.done >= self.total:
            self._line()

    def _line(self) -> None:
        self._last_line = self.elapsed
        self._printed_at = self.done
        rate = self.agent_steps_per_second
        speed = ""
        if rate > 0:
            remaining = (self.total - self.done) * self.steps_per_generation / rate
            speed = f"  {rate:.3g} agent-steps/s  eta {remaining:.0f}s"
        print(
            f"generation {self.done}/{self.total}  best {_fmt(self.best)}"
            f"  mean {_fmt(self.mean)}{speed}  elapsed {self.elapsed:.0f}s",
            file=self.stream,
            flush=True,
        )


__all__ = ["MetricsLog", "Progress", "history_records"]
