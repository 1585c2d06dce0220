"""One progress display for a whole study: runs done, generations, rate, ETA (a live
bar on a terminal, plain lines in a cluster log).
"""

import io
import math
import sys
import time
from typing import Any

from rich.progress import (
    BarColumn,
    Progress as RichProgress,
    TextColumn,
    TimeRemainingColumn,
)


class StudyProgress:
    """Progress of a study.

    Arguments:
        runs: runs in the study.
        done: runs already complete.
        generations: run-generations the study needs in all (sum over runs).
        start: run-generations already done.
        quiet: print nothing.
        stream: where to write (default stderr).
        every: seconds between plain lines when the stream is not a terminal.
    """

    def __init__(
        self,
        runs: int,
        done: int,
        generations: int,
        start: int,
        *,
        quiet: bool = False,
        stream: io.TextIOBase | None = None,
        every: float = 10.0,
    ):
        self.runs, self.done = runs, done
        self.generations, self.reached = generations, start
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.every = every
        self.best: float | None = None
        self._t0 = time.perf_counter()
        self._first: tuple[float, int] | None = None
        self._last_line = -math.inf
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> "StudyProgress":
        if not self.quiet and self.stream.isatty():
            self._bar = RichProgress(
                TextColumn("study"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(
                "study", total=self.generations, completed=self.reached, info=""
            )
            self._refresh()
        elif not self.quiet:
            self._line()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
        elif not self.quiet:
            self._line()

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the measured rate (None before two chunks)."""
        if self._first is None or self.reached == self._first[1]:
            return None
        seconds, reached = self._first
        rate = (self.reached - reached) / max(time.perf_counter() - seconds, 1e-9)
        return (self.generations - self.reached) / rate

    def advance(self, generations: int, best: float | None = None) -> None:
        """Account for `generations` more run-generations (a chunk of a group)."""
        if self._first is None:
            self._first = (time.perf_counter(), self.reached + generations)
        self.reached += generations
        if best is not None and math.isfinite(best):
            self.best = best if self.best is None else max(self.best, best)
        self._refresh()

    def finished(self, runs: int = 1) -> None:
        """Account for `runs` completed runs."""
        self.done += runs
        self._refresh(force=True)

    def _info(self) -> str:
        best = "" if self.best is None else f"  best {self.best:+.4g}"
        return f"runs {self.done}/{self.runs}{best}"

    def _refresh(self, force: bool = False) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.reached, info=self._info())
        elif force or time.perf_counter() - self._last_line >= self.every:
            self._line()

    def _line(self) -> None:
        self._last_line = time.perf_counter()
        eta = self.eta_seconds
        shown = "" if eta is None else f"  eta {eta:.0f}s"
        print(
            f"{self._info()}  generations {self.reached}/{self.generations}"
            f"{shown}  elapsed {time.perf_counter() - self._t0:.0f}s",
            file=self.stream,
            flush=True,
        )


__all__ = ["StudyProgress"]
