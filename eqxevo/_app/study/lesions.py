"""A study's lesions: each run's final genome scored again on its own held-out
lifetimes with its plasticity cut or its memory wiped (`eqxevo._src.nets.lesion`), and
how much of its score each carries (docs/studies.md, "The report")."""

import math
from pathlib import Path
from typing import Any

from eqxevo._src.nets.base import LesionError
from eqxevo._src.nets.lesion import LESIONS

from ..experiment.review import eval_run

LESION_COLUMNS: dict[str, str] = {
    f"lesion_{what}": f"held-out fitness of the final genome with its {what} "
    "lesioned, on the run's held-out lifetimes (NaN: nothing to lesion)"
    for what in LESIONS
}
"""cells.csv columns: each run's lesioned held-out scores."""


def lesion_columns(out: str | Path, cells: Any) -> Any:
    """`cells` with `LESION_COLUMNS` for every complete run with a held-out
    score: the same genome (`heldout_genome`), lifetimes and episodes as
    `heldout_mean`."""
    cells = cells.copy()
    for column in LESION_COLUMNS:
        cells[column] = math.nan
    for i, row in cells.iterrows():
        if not row["complete"] or row.get("heldout_genome") not in ("mean", "best"):
            continue
        for what in LESIONS:
            try:
                evaluation, _, _ = eval_run(
                    Path(out) / row["run_dir"],
                    genome=row["heldout_genome"],
                    num_episodes=int(row["heldout_episodes"]),
                    lesion=what,
                    with_references=False,
                )
            except LesionError:
                continue  # the network has no such mechanism
            cells.loc[i, f"lesion_{what}"] = evaluation.result.mean
    return cells


def lesion_lines(cells: Any) -> list[str]:
    """report.md's "Lesions" section: per cell, the held-out score intact and
    lesioned (means over its runs), and the share of its score above the best
    reference without memory that each lesion takes away."""
    have = [c for c in LESION_COLUMNS if c in cells and cells[c].notna().any()]
    if not have:
        return []
    lines = [
        "## Lesions",
        "",
        "Each run's final genome again, on its own held-out lifetimes, with its "
        "plasticity cut (weights stay those it is born with; alpha = 0) or its "
        "memory wiped (recurrent activity reset before every step): *carried* = "
        "(intact − lesioned) / (intact − best without memory), the share of its "
        "room above the memoryless floor that the mechanism carries (– where the "
        "network has no such mechanism).",
        "",
        "| cell | intact | "
        + " | ".join(f"{c[7:]} lesioned (carried)" for c in have)
        + " |",
        "|---|---|" + "---|" * len(have),
    ]
    for cell, group in cells.groupby("cell", sort=False):
        intact = group["heldout_mean"].astype(float).mean()
        floor = (
            group["no_memory_reference"].astype(float).mean()
            if "no_memory_reference" in group
            else math.nan
        )
        entries = []
        for column in have:
            lesioned = group[column].astype(float).mean()
            if not math.isfinite(lesioned):
                entries.append("–")
                continue
            room = intact - floor
            carried = (intact - lesioned) / room if room > 0 else math.nan
            shown = f"{carried:.2f}" if math.isfinite(carried) else "–"
            entries.append(f"{lesioned:.4g} ({shown})")
        lines.append(f"| {cell} | {intact:.4g} | " + " | ".join(entries) + " |")
    return [*lines, ""]


__all__ = ["LESION_COLUMNS", "lesion_columns", "lesion_lines"]
