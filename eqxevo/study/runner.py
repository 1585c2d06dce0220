"""Run a program (a group of runs) through one `evolve`, keeping a directory per run.

A study's output folder:

    OUT/study.json                 the study, base merged in (status, report, jobs)
    OUT/plan.json                  cells, runs and how they group into programs
    OUT/runs/<cell>/seed-<s>/      one run directory per run, as `eqxevo run`
        config.toml                  keeps them: the resolved experiment,
        metrics.jsonl                one record per generation,
        checkpoints/                 the run's own orbax checkpoints,
        best_genome.eqx              its best genome, and
        summary.json                 final figures; `"complete": true` marks it done;
                                     `"heldout"`: the final genomes' held-out fitness

`run_program` runs the group's unfinished runs with `evolve(..., runs=R)`; the
callback splits each chunk's history and state by run, appends to each run's
metrics and saves each run's checkpoint when due. Each run resumes from its own
newest checkpoint (runs a kill left at different generations continue in one
program per generation), its metrics cut back to that generation, so a study
killed at any moment and run again ends with the same records and states as
an uninterrupted one. A run whose summary says complete is never run again.

When a run completes, its final genomes are scored on held-out lifetimes
(`eqxevo.heldout`: `HELDOUT_EPISODES` fresh lifetimes from
`heldout_key(seed)`, which selection never played): the search distribution's
mean (None for population-based algorithms) and the best genome seen, each with
a 95% CI, in summary.json as

    "heldout": {"mean": {"mean", "ci_low", "ci_high", "std", "episodes"} | null,
                "best": {...}, "generation": G}

`ensure_heldout` adds it to a complete run whose summary lacks it (a run
finished by an older eqxevo), from the run's last checkpoint.
"""

import contextlib
import json
import os
import platform
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from .. import config as config_module
from ..checkpoint import Checkpointer
from ..evolve import Chunk, evolve
from ..experiment import RESUMABLE_CHANGES, save_genome
from ..heldout import heldout_evaluate, heldout_key
from ..interrupts import StopRequest
from ..metrics import MetricsLog, history_records
from .group import Member, Program, build_run
from .progress import StudyProgress
from .spec import Run, Study, StudyError, _flatten, from_dict

HELDOUT_EPISODES = 32
"""Held-out lifetimes per final genome (see the module docstring)."""


def heldout_record(
    member: Member, state: Any, generation: int, num_episodes: int = HELDOUT_EPISODES
) -> dict[str, Any]:
    """The `"heldout"` entry of a run's summary (see the module docstring)."""
    built = member.built
    strategy = built.strategy
    key = heldout_key(member.run.seed)

    def score(genome: Any) -> dict[str, Any]:
        result = heldout_evaluate(key, built.fitness, genome, num_episodes)
        return {
            "mean": result.mean,
            "ci_low": result.ci_low,
            "ci_high": result.ci_high,
            "std": result.std,
            "episodes": result.num_episodes,
        }

    best = strategy.best(state)
    mean = None
    if strategy.has_mean:
        genome = strategy.mean(state)
        shapes = [np.shape(x) for x in jtu.tree_leaves(genome)]
        # Stein-variational algorithms have one mean per sub-population.
        if shapes == [np.shape(x) for x in jtu.tree_leaves(best)]:
            mean = score(genome)
    return {"mean": mean, "best": score(best), "generation": generation}


def run_dir(out: str | Path, run: Run) -> Path:
    """`OUT/runs/<cell>/seed-<seed>`."""
    return Path(out) / "runs" / run.id


def _write(path: Path, text: str) -> None:
    """Write a file whole or not at all (a kill never leaves half of it)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def read_summary(path: str | Path) -> dict[str, Any]:
    """A run's summary.json ({} when there is none)."""
    path = Path(path) / "summary.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _differences(saved: config_module.Experiment, wanted: config_module.Experiment):
    a = _flatten(config_module.to_dict(saved), "")
    b = _flatten(config_module.to_dict(wanted), "")
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def check_run_dir(out: str | Path, run: Run) -> None:
    """Raise unless the run's directory is empty or holds this run's experiment.

    Keys that do not change a trajectory (`run.generations`, chunk and
    checkpoint settings) may differ: the config is updated and the run goes on.

    Raises:
        StudyError: the directory holds another experiment; names the keys.
    """
    path = run_dir(out, run) / "config.toml"
    if not path.exists():
        return
    saved = config_module.load(path)
    changed = _differences(saved, run.experiment)
    fixed = [k for k in changed if k not in RESUMABLE_CHANGES]
    if fixed:
        raise StudyError(
            f"{path.parent} holds run {run.id} of another experiment (differs in "
            f"{', '.join(fixed)}); restore the study file or use another --out"
        )
    if changed:
        _write(path, config_module.dumps(run.experiment))


def is_done(out: str | Path, run: Run) -> bool:
    """Whether the run is complete (its summary says so, for its generations)."""
    check_run_dir(out, run)
    summary = read_summary(run_dir(out, run))
    return bool(summary.get("complete")) and (
        summary.get("generations") == run.experiment.run.generations
    )


# -- the study folder ---------------------------------------------------------------


def save_plan(out: str | Path, study: Study, programs: Iterable[Program]) -> None:
    """Write OUT/study.json and OUT/plan.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _write(out / "study.json", json.dumps(study.data, indent=2) + "\n")
    plan = {
        "study": study.name,
        "cells": [
            {"name": c.name, "slug": c.slug, "arm": c.arm, "values": c.values}
            for c in study.cells
        ],
        "seeds": list(study.seeds),
        "programs": [[r.id for r in p.runs] for p in programs],
    }
    _write(out / "plan.json", json.dumps(plan, indent=2) + "\n")


def load_study(out: str | Path) -> Study:
    """The study an output folder holds (from OUT/study.json).

    Raises:
        StudyError: the folder holds no study.
    """
    path = Path(out) / "study.json"
    if not path.exists():
        raise StudyError(f"{out} holds no study (no study.json); run one first")
    return from_dict(json.loads(path.read_text()))


def load_plan(out: str | Path) -> dict[str, Any]:
    path = Path(out) / "plan.json"
    return json.loads(path.read_text()) if path.exists() else {}


# -- running ------------------------------------------------------------------------


def _take(tree: Any, r: int) -> Any:
    return jtu.tree_map(
        lambda x: x[r] if isinstance(x, np.ndarray | jax.Array) else x, tree
    )


class _RunFiles:
    """A run's directory while its program runs: metrics, checkpoints, summary."""

    def __init__(self, out: Path, member: Member):
        self.member = member
        self.run = member.run
        self.path = run_dir(out, member.run)
        self.path.mkdir(parents=True, exist_ok=True)
        if not (self.path / "config.toml").exists():
            _write(self.path / "config.toml", config_module.dumps(self.run.experiment))
        self.metrics = MetricsLog(self.path / "metrics.jsonl")
        settings = self.run.experiment.run
        self.every = settings.checkpoint_every
        self.checkpoints = Checkpointer(
            self.path / "checkpoints", keep=settings.keep_checkpoints
        )
        self.record = config_module.to_dict(self.run.experiment)
        self.start = self.checkpoints.latest() or 0
        self.saved = self.start  # the generation of the newest checkpoint
        self.recorded = self.start  # metrics.jsonl holds generations below this
        self._appending = False

    def restore(self, generation: int) -> Any:
        like = jax.eval_shape(self.member.built.initial_state)
        _, state = self.checkpoints.restore(
            like, self.record, ignore=RESUMABLE_CHANGES, generation=generation
        )
        return state

    def chunk(self, generation: int, history: dict[str, Any], state: Any) -> None:
        self.record_metrics(generation, history)
        if generation // self.every > self.saved // self.every:
            self.save(generation, state)

    def record_metrics(self, generation: int, history: dict[str, Any]) -> None:
        """Append a chunk's records (after cutting what an interrupted append
        may have left)."""
        if self._appending:
            self.metrics.truncate(self.recorded)
        self._appending = True
        self.metrics.append(history_records(history))
        self._appending = False
        self.recorded = generation

    def save(self, generation: int, state: Any) -> None:
        self.checkpoints.save(generation, state, self.record)
        self.saved = generation

    def finish(self, generation: int, state: Any, seconds: float, runs: int) -> None:
        """Write summary.json (and the best genome when the run is complete)."""
        self.checkpoints.close()
        total = self.run.experiment.run.generations
        complete = generation >= total
        strategy = self.member.built.strategy
        previous = read_summary(self.path)
        records = self.metrics.read()
        last = records[-1] if records else {}
        best = float(np.asarray(strategy.best_fitness(state)))
        heldout = None
        if complete:
            save_genome(self.path / "best_genome.eqx", strategy.best(state))
            heldout = heldout_record(self.member, state, generation)
        run = self.run.experiment.run
        summary = {
            "complete": complete,
            "study_cell": self.run.cell.name,
            "seed": self.run.seed,
            "generations": generation,
            "best_fitness": best if np.isfinite(best) else None,
            "final_mean_fitness": last.get("mean"),
            "final_best_fitness": last.get("best"),
            "agent_steps": strategy.population_size * run.lifetime * generation,
            # Runs of a program execute one after another: each gets its share.
            "wall_time_s": round(previous.get("wall_time_s", 0.0) + seconds / runs, 3),
            "program_runs": runs,
            "platform": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "host": platform.node(),
        }
        if heldout is not None:
            summary["heldout"] = heldout
        _write(self.path / "summary.json", json.dumps(summary, indent=2) + "\n")


def ensure_heldout(out: str | Path, run: Run) -> dict[str, Any]:
    """The run's summary, with its `"heldout"` entry computed and saved first if a
    complete run lacks it (from its last checkpoint; see the module docstring).
    """
    path = run_dir(out, run)
    summary = read_summary(path)
    if not summary.get("complete") or summary.get("heldout") is not None:
        return summary
    files = _RunFiles(Path(out), build_run(run))
    try:
        generation = summary["generations"]
        state = files.restore(generation)
        summary["heldout"] = heldout_record(files.member, state, generation)
    finally:
        files.checkpoints.close()
    _write(path / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def _stack(states: list[Any]) -> Any:
    return jtu.tree_map(lambda *xs: jnp.stack(xs), *states)


def _segment(
    files: list[_RunFiles],
    start: int,
    progress: StudyProgress | None,
    stop: StopRequest | None = None,
) -> None:
    """Run `files`' runs, all at generation `start`, to the end in one program."""
    program = Program(0, tuple(f.member for f in files))
    settings = program.experiment.run
    total = settings.generations
    if start > total:
        raise StudyError(
            f"run {files[0].run.id} has {start} generations, more than "
            f"run.generations = {total}"
        )
    keys, strategy, fitness = program.stacked()
    state = _stack([f.restore(start) for f in files]) if start > 0 else None
    for f in files:
        f.metrics.truncate(start)
    latest: dict[str, Any] = {"generation": start, "state": state}
    started = time.perf_counter()

    def on_chunk(chunk: Chunk) -> bool:
        added = chunk.generation - latest["generation"]
        # Held before any file is written: an interrupt while the files are
        # written finds every run's records and state of this chunk here.
        latest.update(
            generation=chunk.generation, state=chunk.state, history=chunk.history
        )
        # A signal never exits while a chunk's files are written (stop.lock).
        with stop.lock if stop is not None else contextlib.nullcontext():
            for r, f in enumerate(files):
                f.chunk(
                    chunk.generation, _take(chunk.history, r), _take(chunk.state, r)
                )
            if stop is not None:
                stop.work_done = True
        if progress is not None:
            best = np.asarray(chunk.best_fitness)
            finite = best[np.isfinite(best)]
            progress.advance(
                added * len(files), float(finite.max()) if finite.size else None
            )
        return stop is not None and stop.requested

    interrupted: BaseException | None = None
    try:
        if start < total:
            evolve(
                keys,
                strategy,
                fitness,
                num_generations=total - start,
                chunk_size=settings.chunk_size,
                callback=on_chunk,
                state=state,
                on_nonfinite=settings.on_nonfinite,
                episodes=settings.episodes,
                runs=len(files),
            )
    except (KeyboardInterrupt, SystemExit) as err:  # Ctrl-C, SIGTERM, preemption
        interrupted = err
    generation, state = latest["generation"], latest["state"]
    seconds = time.perf_counter() - started
    for r, f in enumerate(files):
        if state is None:
            f.checkpoints.close()
            continue
        state_r = _take(state, r)
        if f.recorded != generation:  # interrupted before this run's records
            f.record_metrics(generation, _take(latest["history"], r))
        if f.saved != generation:
            try:
                f.save(generation, state_r)
            except Exception:
                # An interrupt inside the callback's own save of this generation
                # can leave orbax unwilling to write it again: the run then
                # resumes from its previous checkpoint, losing nothing but time.
                if interrupted is None:
                    raise
        f.finish(generation, state_r, seconds, len(files))
    if progress is not None and generation >= total:
        progress.finished(len(files))
    if interrupted is not None:
        raise interrupted
    if stop is not None and stop.requested:
        raise KeyboardInterrupt


def run_program(
    program: Program,
    out: str | Path,
    progress: StudyProgress | None = None,
    stop: StopRequest | None = None,
) -> None:
    """Run the program's unfinished runs to the end (see the module docstring).

    `stop`: the CLI's `eqxevo.interrupts.StopRequest`; a first Ctrl-C/SIGTERM
    stops after the running chunk, every run saved, with `KeyboardInterrupt`.

    Raises:
        StudyError: a run directory holds another experiment, or a checkpoint
            does not fit.
        KeyboardInterrupt: after saving every run's last finished chunk.
    """
    out = Path(out)
    files = [_RunFiles(out, m) for m in program.members if not is_done(out, m.run)]
    by_start: dict[int, list[_RunFiles]] = {}
    for f in files:
        by_start.setdefault(f.start, []).append(f)
    for start in sorted(by_start):
        _segment(by_start[start], start, progress, stop)


__all__ = [
    "HELDOUT_EPISODES",
    "check_run_dir",
    "ensure_heldout",
    "heldout_record",
    "is_done",
    "load_plan",
    "load_study",
    "read_summary",
    "run_dir",
    "run_program",
    "save_plan",
]
