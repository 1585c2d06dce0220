"""A study's reference agents: scored on the held-out lifetimes of its runs, and
each run's normalised score (docs/studies.md, "The report"; `eqxevo._src.references`).
"""

import dataclasses
import json
import math
from typing import Any

from eqxevo._src.heldout import heldout_keys
from eqxevo._src.references import references, scale, score_references

from ..config import Experiment
from ..experiment.build import build
from ..experiment.review import certified_reference
from .spec import Study, require

REFERENCE_COLUMNS: dict[str, str] = {
    "no_memory_reference": "held-out fitness of the best reference without memory "
    "on the run's held-out lifetimes",
    "learner_reference": "held-out fitness of the best learner or oracle reference "
    "on the run's held-out lifetimes",
    "normalised": "(heldout_mean - no_memory_reference) / (learner_reference - "
    "no_memory_reference): 0 = no better than without memory, 1 = the learner",
    "headroom": "learner_reference - no_memory_reference: the room the task "
    "leaves for memory on the run's held-out lifetimes",
}
"""cells.csv columns from the references scored on each run's lifetimes."""


def _variant(experiment: Experiment, episodes: int) -> str:
    """What the references' scores depend on besides the policy and the seed: the
    environment, the run's settings (lifetime, ...) and the held-out episodes."""
    run = dataclasses.asdict(experiment.run)
    del run["seed"]
    data = {"env": dataclasses.asdict(experiment.env), "run": run, "n": episodes}
    return json.dumps(data, sort_keys=True, default=str)


def score_study_references(study: Study, cells: Any) -> tuple[Any, Any]:
    """The references of every complete run's environment, scored on that run's
    held-out lifetimes (as many as the run's), once per environment variant and
    seed: arms that change only the network or the strategy share them.

    Arguments:
        study: the study.
        cells: its cells table (`eqxevo._app.study.report.cells_table`).

    Returns:
        `(references, cells)`: one row per variant, seed and reference (columns
        `variant` (0, 1, ...), `cells` (the cells of that variant, joined by
        "; "), `seed`, `reference`, `kind`, `mean`, `ci_low`, `ci_high`, `std`,
        `episodes`),
        and `cells` with `REFERENCE_COLUMNS` (NaN for a run without a held-out
        score or without such a reference).
    """
    pd = require("pandas", "eqxevo study report")

    done = cells[cells["complete"] & cells["heldout_episodes"].notna()]
    episodes = {
        (cell, int(seed)): int(n)
        for cell, seed, n in zip(
            done["cell"], done["seed"], done["heldout_episodes"], strict=True
        )
    }
    variants: dict[str, int] = {}
    served: dict[int, list[str]] = {}
    variant_of: dict[tuple[str, int], int] = {}
    rows: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for run in study.runs:
        n = episodes.get((run.cell.name, run.seed))
        if n is None:
            continue
        variant = variants.setdefault(_variant(run.experiment, n), len(variants))
        variant_of[run.cell.name, run.seed] = variant
        if run.cell.name not in served.setdefault(variant, []):
            served[variant].append(run.cell.name)
        if (variant, run.seed) in rows:
            continue
        built = build(run.experiment)
        (held_key,) = heldout_keys(built.key)  # the run's own held-out lifetimes
        scored = score_references(
            held_key,
            built.heldout_fitness,
            references(built.env, built.env_params),
            n,
            settings=built.options().evaluation(),
        )
        # the task's certified memoryless network, where it has a certificate
        scored += certified_reference(built, held_key, n)
        rows[variant, run.seed] = [
            {"variant": variant, "seed": run.seed, "reference": s.name}
            | {"kind": s.kind, **s.result.summary()}
            for s in scored
        ]
    columns = ["variant", "seed", "reference", "kind", "mean", "ci_low", "ci_high"]
    table = pd.DataFrame(
        [row for group in rows.values() for row in group],
        columns=[*columns, "std", "episodes"],
    )
    table.insert(1, "cells", ["; ".join(served[v]) for v in table["variant"]])

    scales = {
        key: scale((r["reference"], r["kind"], r["mean"]) for r in group)
        for key, group in rows.items()
    }
    cells = cells.copy()
    for column in REFERENCE_COLUMNS:
        cells[column] = math.nan
    for i, (cell, seed, score) in enumerate(
        zip(cells["cell"], cells["seed"], cells["heldout_mean"], strict=True)
    ):
        variant = variant_of.get((cell, int(seed)))
        if variant is None:
            continue
        one = scales[variant, int(seed)]
        finite = score is not None and math.isfinite(score)
        cells.loc[cells.index[i], list(REFERENCE_COLUMNS)] = [
            one.floor,
            one.ceiling,
            one.normalise(score) if finite else math.nan,
            one.ceiling - one.floor,
        ]
    return table, cells


ROOM_FACTOR = 3.0
"""A comparison is flagged when its task's headroom (best learner or oracle minus
the certified memoryless bound) is below this many times the arms' spread
between seeds: the task leaves too little room for the test to mean much."""


ROOM_NOTE = (
    "*Room*: the task's headroom on the runs' held-out lifetimes (best learner or "
    "oracle minus the best memoryless reference, the certified memoryless network "
    "included where the task has a certificate) against the arms' spread between "
    f"seeds; **little room** where it is below {ROOM_FACTOR:g} x that spread: the "
    "comparison cannot say much about memory there."
)
"""report.md's note under every table with a room column."""


def room_columns(table: Any, cells: Any) -> Any:
    """`table` (comparisons of cells `cell_a`/`a` against `cell_b`/`b`) with
    `headroom` (the two cells' mean headroom over their runs, fitness units),
    `spread` (the larger standard deviation between seeds of their held-out
    means) and `little_room` (headroom < `ROOM_FACTOR` x spread), on its rows of
    held-out fitness (all rows where the table has no `metric` column)."""
    if table.empty or "headroom" not in cells:
        return table
    table = table.copy()
    a = "cell_a" if "cell_a" in table else "a"
    b = "cell_b" if "cell_b" in table else "b"
    room, spread = [], []
    for x, y in zip(table[a], table[b], strict=True):
        both = cells[cells["cell"].isin([x, y])]
        room.append(float(both["headroom"].astype(float).mean()))
        stds = [
            cells.loc[cells["cell"] == c, "heldout_mean"].astype(float).std(ddof=1)
            for c in (x, y)
        ]
        spread.append(max((v for v in stds if math.isfinite(v)), default=math.nan))
    if "metric" in table:  # the room is held-out fitness's: not the training rows'
        held = (table["metric"] == "heldout_mean").to_numpy()
        room = [r if h else math.nan for r, h in zip(room, held, strict=True)]
        spread = [s if h else math.nan for s, h in zip(spread, held, strict=True)]
    table["headroom"] = room
    table["spread"] = spread
    table["little_room"] = [
        bool(math.isfinite(r) and math.isfinite(s) and r < ROOM_FACTOR * s)
        for r, s in zip(room, spread, strict=True)
    ]
    return table


def reference_lines(refs: Any, summary: Any) -> list[str]:
    """report.md's "References" section: each variant's references (mean over the
    seeds' held-out lifetimes), what the normalised score is, and the cells below
    the best reference without memory, flagged."""
    lines = ["## References", ""]
    if refs.empty:
        return [*lines, "No complete run to score references against.", ""]
    lines += [
        "Reference agents (eqxevo._src.references) scored on the held-out lifetimes of "
        "each run (the same lifetimes, as many). *Normalised* = (held-out − best "
        "without memory) / (best learner or oracle − best without memory), per "
        "run on its own lifetimes, mean over the cell's runs: 0 = no better than "
        "the best policy without memory, 1 = as good as the best learner or "
        "oracle (– where the environment declares no learner or oracle).",
        "",
        "| cells | reference | kind | held-out mean over seeds | seeds |",
        "|---|---|---|---|---|",
    ]
    for (cells, name, kind), group in refs.groupby(
        ["cells", "reference", "kind"], sort=False
    ):
        mean = group["mean"].astype(float).mean()
        lines.append(f"| {cells} | {name} | {kind} | {mean:.4g} | {len(group)} |")
    lines.append("")
    if "below_no_memory" in summary:
        below = summary[summary["below_no_memory"].astype(bool)]
        for _, row in below.iterrows():
            lines.append(
                f"- **Below the best reference without memory:** `{row['cell']}` "
                f"(held-out {row['heldout_mean_mean']:.4g} against "
                f"{row['no_memory_reference_mean']:.4g} on the same lifetimes)."
            )
        lines += [""] if len(below) else []
    return lines


__all__ = [
    "REFERENCE_COLUMNS",
    "ROOM_FACTOR",
    "ROOM_NOTE",
    "reference_lines",
    "room_columns",
    "score_study_references",
]
