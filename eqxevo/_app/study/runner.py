"""A study's programs run: one `evolve(..., runs=R)` per program, each run in its
own run directory through `eqxevo.experiment.Run`; the study folder's files.
"""

import contextlib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh

from eqxevo._src.evolve import Chunk, evolve
from eqxevo._src.runs import take

from .. import config as config_module
from ..checkpoint import CheckpointError
from ..experiment.run import Run
from ..experiment.rundir import RunDir, RunDirError, read_json, write_atomic
from ..interrupts import StopRequest
from ..lock import LockedError
from .group import Member, Program, stacked
from .progress import StudyProgress
from .spec import Study, StudyError, Trial, from_dict


def run_dir(out: str | Path, run: Trial) -> Path:
    """`OUT/runs/<cell>/seed-<seed>`: the run's directory."""
    return Path(out) / "runs" / run.id


def read_summary(path: str | Path) -> dict[str, Any]:
    """A run directory's summary.json ({} when there is none, or when it is cut
    short: the run then counts as unfinished, and `study run` writes it again)."""
    try:
        return RunDir(path).read_summary()
    except RunDirError:
        return {}


def is_done(out: str | Path, run: Trial) -> bool:
    """Whether the run is complete (its summary says so, for its generations)."""
    summary = read_summary(run_dir(out, run))
    return bool(summary.get("complete")) and (
        summary.get("generations") == run.experiment.run.generations
    )


HELDOUT_COLUMNS: dict[str, str] = {
    "heldout_mean": "held-out fitness of the final genome (mean over lifetimes)",
    "heldout_ci_low": "95% CI of heldout_mean, low",
    "heldout_ci_high": "95% CI of heldout_mean, high",
    "heldout_genome": "which final genome: the search mean, or the best (no mean)",
    "heldout_episodes": "held-out lifetimes per genome",
    "heldout_best_mean": "held-out fitness of the best genome seen in training",
}
"""cells.csv columns from each run's held-out evaluation (summary.json's
`"heldout"`)."""


def heldout_columns(summary: Mapping[str, Any]) -> dict[str, Any]:
    """`HELDOUT_COLUMNS` from a summary's `"heldout"` entry (None where absent):
    the search mean's figures, or the best genome's where there is no mean."""
    heldout = summary.get("heldout") or {}
    best = heldout.get("best") or {}
    final, genome = heldout.get("mean"), "mean"
    if final is None:
        final, genome = best, "best" if best else None
    return {
        "heldout_mean": final.get("mean"),
        "heldout_ci_low": final.get("ci_low"),
        "heldout_ci_high": final.get("ci_high"),
        "heldout_genome": genome,
        "heldout_episodes": final.get("episodes"),
        "heldout_best_mean": best.get("mean"),
    }


# -- the study folder ---------------------------------------------------------------


def load_study(out: str | Path) -> Study:
    """The study an output folder holds (from OUT/study.json).

    Raises:
        StudyError: the folder holds no study, or its study.json is cut short
            (`eqxevo study run FILE --out OUT` writes it again).
    """
    try:
        data = read_json(Path(out) / "study.json")
    except RunDirError as err:
        raise StudyError(
            f"{err}; `eqxevo study run FILE --out {out}` with the study file "
            "writes it again"
        ) from None
    if not data:
        raise StudyError(f"{out} holds no study (no study.json); run one first")
    return from_dict(data)


def load_plan(out: str | Path) -> dict[str, Any]:
    """OUT/plan.json ({} when there is none, or when it is cut short: the plan
    follows from study.json, and `study run` writes it again)."""
    try:
        return read_json(Path(out) / "plan.json")
    except RunDirError:
        return {}


def check_same_study(out: str | Path, study: Study) -> None:
    """Raise unless OUT holds no study or this one, up to keys a resumed run may
    change (`config.RESUMABLE_CHANGES`: more generations, other chunk sizes ...).

    Raises:
        StudyError: a run of OUT's study differs in other keys; names them.
    """
    try:
        saved = {r.id: r for r in load_study(out).runs}
    except StudyError:  # none, or cut short: each run's config.toml still checks
        return
    for run in study.runs:
        if run.id not in saved:
            continue
        changed = config_module.differences(saved[run.id].experiment, run.experiment)
        fixed = [k for k in changed if not config_module.resumable(k)]
        if fixed:
            raise StudyError(
                f"{run_dir(out, run)} holds run {run.id} of another experiment "
                f"(differs in {', '.join(fixed)}); restore the study file or use "
                "another --out"
            )


def save_plan(out: str | Path, study: Study, programs: list[Program]) -> None:
    """Write OUT/study.json and OUT/plan.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "study.json", json.dumps(study.data, indent=2) + "\n")
    plan = {
        "study": study.name,
        "cells": [
            {"name": c.name, "slug": c.slug, "arm": c.arm, "values": c.values}
            for c in study.cells
        ],
        "seeds": list(study.seeds),
        "programs": [[r.id for r in p.runs] for p in programs],
    }
    write_atomic(out / "plan.json", json.dumps(plan, indent=2) + "\n")


# -- running ------------------------------------------------------------------------


def open_run(
    out: str | Path, member: Member, share: int, mesh: Mesh | None = None
) -> Run:
    """The member's `Run` in its directory: resumed when the directory holds it;
    its generations and held-out lifetimes split over `mesh`.

    Raises:
        StudyError: the directory holds another experiment, or its checkpoints
            cannot be used; names the run.
    """
    path = run_dir(out, member.run)
    try:
        one = Run(
            member.built,
            path,
            resume=RunDir(path).exists(),
            share=share,
            extra={"study_cell": member.run.cell.name, "seed": member.run.seed},
            mesh=mesh,
        )
    except (RunDirError, CheckpointError) as err:
        raise StudyError(f"run {member.run.id}: {err}") from err
    for note in one.notes:  # a damaged checkpoint passed over, a rebuilt summary
        print(f"eqxevo: run {member.run.id}: {note}", file=sys.stderr, flush=True)
    return one


def _segment(
    runs: list[Run],
    progress: StudyProgress | None,
    stop: StopRequest | None,
) -> None:
    """Run `runs`, all at the same generation, to the end in one program."""
    start, first = runs[0].generation, runs[0]
    keys, strategy, fitness = stacked([r.built for r in runs])
    state = None
    if start > 0:
        state = jtu.tree_map(lambda *xs: jnp.stack(xs), *[r.state for r in runs])
    # Held before any file is written: an interrupt while the runs take a chunk
    # finds every run's records and state of that chunk here.
    latest: dict[str, Any] = {}

    def on_chunk(chunk: Chunk) -> bool:
        latest.update(generation=chunk.generation, chunk=chunk)
        # A signal never exits while a chunk's files are written (stop.lock).
        with stop.lock if stop is not None else contextlib.nullcontext():
            for r, one in enumerate(runs):
                one.chunk(
                    chunk.generation, take(chunk.history, r), take(chunk.state, r)
                )
            if stop is not None:
                stop.work_done = True
        if progress is not None:
            best = np.asarray(chunk.best_fitness)
            finite = best[np.isfinite(best)]
            added = chunk.history["generation"].shape[-1] * len(runs)
            progress.advance(added, float(finite.max()) if finite.size else None)
        return stop is not None and stop.requested

    for one in runs:
        one.begin()
    interrupted: BaseException | None = None
    status = "failed"
    try:
        evolve(
            keys,
            strategy,
            fitness,
            num_generations=first.built.experiment.run.generations - start,
            runs=len(runs),
            callback=on_chunk,
            state=state,
            # Every run of a program has the same options (`group`): the first's.
            options=first.built.options(first.mesh),
        )
        status = "stopped" if stop is not None and stop.requested else "complete"
    except (KeyboardInterrupt, SystemExit) as err:  # Ctrl-C, SIGTERM, preemption
        interrupted, status = err, "stopped"
    finally:
        if latest:  # runs an interrupt kept from the last chunk take it now
            chunk = latest["chunk"]
            for r, one in enumerate(runs):
                if one.generation != chunk.generation:
                    one.chunk(
                        chunk.generation, take(chunk.history, r), take(chunk.state, r)
                    )
        for one in runs:
            one.finish(status)
    if progress is not None and status == "complete":
        progress.finished(len(runs))
    if interrupted is not None:
        raise interrupted
    if status == "stopped":
        raise KeyboardInterrupt


def run_program(
    program: Program,
    out: str | Path,
    progress: StudyProgress | None = None,
    stop: StopRequest | None = None,
    mesh: Mesh | None = None,
) -> None:
    """Run the program's unfinished runs to the end; runs a kill left at
    different generations continue in one program per generation.

    `stop`: the CLI's `eqxevo._app.interrupts.StopRequest`; a first Ctrl-C/SIGTERM
    stops after the running chunk, every run saved, with `KeyboardInterrupt`.
    `mesh`: split every run's population over these devices (`--devices`).

    Raises:
        StudyError: a run directory holds another experiment, or its checkpoints
            cannot be used.
        KeyboardInterrupt: after saving every run's last finished chunk.
    """
    # Done runs are left alone; the others share the program's wall time.
    members = [m for m in program.members if not is_done(out, m.run)]
    runs: list[Run] = []
    try:
        for m in members:
            try:
                runs.append(open_run(out, m, share=len(members), mesh=mesh))
            except LockedError as err:
                # The last line of defence: a run another live process writes (a
                # task of an earlier submission) is left to it, untouched.
                print(f"eqxevo: skipped run {m.run.id}: {err}", file=sys.stderr)
        # A kill can leave runs of one program at different checkpoints: each
        # generation they restart from is one `evolve` call (keys do not care).
        by_start: dict[int, list[Run]] = {}
        for one in runs:
            if one.complete:  # killed after its last checkpoint: finish it
                one.finish_complete()
                continue
            by_start.setdefault(one.generation, []).append(one)
        for start in sorted(by_start):
            _segment(by_start[start], progress, stop)
    finally:
        for one in runs:  # runs an error kept from their segment
            one.close()


__all__ = [
    "HELDOUT_COLUMNS",
    "check_same_study",
    "heldout_columns",
    "is_done",
    "load_plan",
    "load_study",
    "open_run",
    "read_summary",
    "run_dir",
    "run_program",
    "save_plan",
]
