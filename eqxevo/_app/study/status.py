"""Where a study stands (cells, runs done, programs, generations), read from the
output folder alone, without building or compiling anything.
"""

from pathlib import Path
from typing import Any

from ..checkpoint import saved_generations
from ..lock import holder
from .runner import load_plan, load_study, read_summary, run_dir
from .spec import Study, Trial


def _progress(out: str | Path, run: Trial) -> tuple[bool, int]:
    """`(complete, generations saved)` of one run: an unfinished run counts the
    generations of its newest checkpoint, where it resumes (the metrics it
    recorded after that checkpoint are run again)."""
    path = run_dir(out, run)
    summary = read_summary(path)
    total = run.experiment.run.generations
    if summary.get("complete") and summary.get("generations") == total:
        return True, total
    saved = saved_generations(path / "checkpoints")
    return False, min(saved[-1] if saved else 0, total)


def progress_of(study: Study, out: str | Path) -> tuple[int, int]:
    """`(runs complete, run-generations saved)` of the study in `out`."""
    progress = [_progress(out, run) for run in study.runs]
    return sum(done for done, _ in progress), sum(n for _, n in progress)


def status(out: str | Path) -> dict[str, Any]:
    """The study in `out` as one JSON-ready dict.

    Keys: `study`, `cells`, `runs`, `done` (runs complete), `programs`
    (compiled programs in the plan), `generations` (`done`/`total`
    run-generations), `running` (who runs it now, in words, or None) and
    `per_cell` (`cell`, `runs`, `done` for each).

    Raises:
        StudyError: `out` holds no study.
    """
    study = load_study(out)
    plan = load_plan(out)
    progress = {run.id: _progress(out, run) for run in study.runs}
    per_cell = []
    for cell in study.cells:
        runs = [r for r in study.runs if r.cell.name == cell.name]
        done = sum(progress[r.id][0] for r in runs)
        per_cell.append({"cell": cell.name, "runs": len(runs), "done": done})
    return {
        "study": study.name,
        "out": str(out),
        "cells": len(study.cells),
        "runs": len(study.runs),
        "done": sum(done for done, _ in progress.values()),
        "programs": len(plan["programs"]) if plan else None,
        "generations": {
            "done": sum(n for _, n in progress.values()),
            "total": sum(r.experiment.run.generations for r in study.runs),
        },
        "running": holder(out),
        "per_cell": per_cell,
    }


__all__ = ["progress_of", "status"]
