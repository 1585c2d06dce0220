"""What each run spent and what it earned on the way: agent steps, device seconds
and the area under its learning curve (docs/studies.md, "The report")."""

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Float

from .markdown import ci, fmt, markdown
from .runner import run_dir
from .spec import Study

CURVE_METRICS: dict[str, str] = {
    "curve_auc": "training: area under the learning curve (mean over generations)",
    "curve_auc_steps": "training: area under the learning curve per agent step, "
    "over the study's common step budget",
}
"""cells.csv columns from each run's learning curve (the population's mean fitness
per generation, as learning_curves.png draws it), both on the fitness scale;
summary.csv summarises them as it does the final scores. NaN for a run not
complete."""


def platform(summary: Mapping[str, Any]) -> str | None:
    """The JAX backend a run ran on, from its summary.json's segments ("cpu",
    "gpu", "tpu"; "cpu+gpu" when its segments differ; None with no segment)."""
    kinds = sorted(
        {s["platform"] for s in summary.get("segments", ()) if s.get("platform")}
    )
    return "+".join(kinds) or None


def run_curve(
    path: str | Path, generations: int, field: str = "mean"
) -> Float[np.ndarray, " generations"]:
    """`field` per generation from a run directory's metrics.jsonl (NaN where
    the run has not reached a generation)."""
    values = np.full(generations, np.nan)
    metrics = Path(path) / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            record = json.loads(line)
            g, v = record["generation"], record.get(field)
            if g < values.size and v is not None:
                values[g] = v
    return values


def curves(out: str | Path, study: Study, field: str = "mean") -> dict[str, np.ndarray]:
    """Per cell, the field per generation of every seed: `(seeds, generations)`
    (NaN where a run has not reached a generation)."""
    out_curves = {}
    for cell in study.cells:
        rows = [
            run_curve(run_dir(out, run), run.experiment.run.generations, field)
            for run in study.runs
            if run.cell.name == cell.name
        ]
        width = max(len(r) for r in rows)
        out_curves[cell.name] = np.stack(
            [np.pad(r, (0, width - len(r)), constant_values=np.nan) for r in rows]
        )
    return out_curves


def curve_area(
    curve: Float[np.ndarray, " generations"],
    per_generation: float | int = 1.0,
    budget: float | int | None = None,
) -> float:
    """The area under a learning curve over its first `budget` steps, divided by
    `budget`: on the curve's own scale, the mean fitness per step spent.

    Generation g holds its fitness over the steps it spent, from g x
    `per_generation` to (g + 1) x `per_generation`; with the default arguments
    the area is the mean over generations. NaN where the curve is NaN within the
    budget, or empty.

    Arguments:
        curve: the fitness per generation.
        per_generation: steps each generation spends (agent steps).
        budget: steps to integrate over (default: every generation's).

    Raises:
        ValueError: `budget` exceeds the steps the curve spent.
    """
    spent = curve.size * per_generation
    budget = spent if budget is None else budget
    if budget > spent * (1 + 1e-12):
        raise ValueError(
            f"budget={budget} exceeds the {spent} steps the curve spent "
            f"({curve.size} generations x {per_generation})"
        )
    if curve.size == 0 or budget <= 0:
        return math.nan
    start = np.arange(curve.size) * per_generation
    weight = np.clip(budget - start, 0.0, per_generation)
    within = weight > 0
    return float(np.sum(weight[within] * curve[within]) / budget)


def curve_columns(out: str | Path, cells: Any) -> Any:
    """`cells` with `CURVE_METRICS` for every complete run: `curve_auc` over its
    generations, and `curve_auc_steps` over the first S agent steps, S the
    fewest any complete run of the study spent (each run's steps per generation
    from its summary: agent_steps / generations)."""
    cells = cells.copy()
    for column in CURVE_METRICS:
        cells[column] = math.nan
    budget = step_budget(cells)
    if not math.isfinite(budget):
        return cells
    for i, row in _done(cells).iterrows():
        generations = int(row["generations"])
        curve = run_curve(Path(out) / row["run_dir"], generations)
        per_generation = float(row["agent_steps"]) / generations
        cells.loc[i, "curve_auc"] = curve_area(curve)
        cells.loc[i, "curve_auc_steps"] = curve_area(curve, per_generation, budget)
    return cells


def _done(cells: Any) -> Any:
    """The complete runs that ran a generation or more."""
    return cells[cells["complete"].astype(bool) & (cells["generations"].fillna(0) > 0)]


def step_budget(cells: Any) -> float:
    """The fewest agent steps any complete run in `cells` spent (NaN with none):
    the budget `curve_auc_steps` integrates every run over."""
    done = _done(cells)
    return float(done["agent_steps"].min()) if not done.empty else math.nan


def _steps(value: float) -> str:
    return f"{value:,.0f}" if math.isfinite(value) else "–"


def budget_summary(runs: Any) -> dict[str, Any]:
    """summary.csv's budget columns for one cell's runs."""
    kinds = sorted({k for p in runs["platform"].dropna() for k in str(p).split("+")})
    steps = runs["agent_steps"].dropna().to_numpy(np.float64)
    seconds = runs["wall_time_s"].dropna().to_numpy(np.float64)
    return {
        "agent_steps_mean": float(steps.mean()) if steps.size else math.nan,
        "wall_time_s_mean": float(seconds.mean()) if seconds.size else math.nan,
        "platform": "+".join(kinds) or None,
    }


def budget_lines(summary: Any, cells: Any) -> list[str]:
    """report.md's "Samples and compute" section: per cell, agent steps and
    device seconds per run, and the area under the learning curve beside the
    held-out final fitness."""
    if summary.empty or "curve_auc_mean" not in summary:
        return []
    kinds = sorted({k for p in summary["platform"].dropna() for k in p.split("+")})
    device = "+".join(k.upper() for k in kinds) or "device"
    spent = cells.loc[cells["curve_auc_steps"].notna(), ["agent_steps", "generations"]]
    # Over agent steps only where it can differ from the AUC over generations.
    by_steps = (spent["agent_steps"] / spent["generations"]).nunique() > 1 or bool(
        spent["agent_steps"].nunique() > 1
    )
    headers = [
        "cell",
        "n",
        "agent steps / run",
        f"{device} s / run",
        "held-out final fitness",
        "AUC [95% CI]",
    ] + (["AUC per agent step [95% CI]"] if by_steps else [])
    rows = []
    for _, row in summary.iterrows():
        n = int(row["n"])
        rows.append(
            [
                row["cell"],
                n,
                _steps(float(row["agent_steps_mean"])),
                fmt(row["wall_time_s_mean"], 3)
                + (f" ({row['platform']})" if len(kinds) > 1 else ""),
                fmt(row["heldout_mean_mean"]),
                f"{fmt(row['curve_auc_mean'])} {ci(row, 'curve_auc', n)}",
            ]
            + (
                [f"{fmt(row['curve_auc_steps_mean'])} {ci(row, 'curve_auc_steps', n)}"]
                if by_steps
                else []
            )
        )
    return [
        "## Samples and compute",
        "",
        "What a run spent, means over each cell's complete runs: *agent steps*, "
        "the environment steps its populations took (population x lifetime x "
        f"generations), and *{device} s*, seconds on the backend its runs "
        "recorded (summary.json's `wall_time_s`: the run's share of its "
        "program's wall time, compilation included). Beside the held-out final "
        "fitness, *AUC*: the area under the run's training curve (the "
        "population's mean fitness per generation, as learning_curves.png "
        "draws it) divided by its length, i.e. its mean over generations, on "
        "the fitness scale; a run that learns early scores higher than one that "
        "reaches the same final fitness late."
        + (
            " Cells spend different agent steps (a generation, or a run): *AUC "
            "per agent step* integrates each run's curve, a generation's "
            "fitness held over the steps it spent, over its first "
            f"{_steps(step_budget(cells))} agent steps (the fewest any run "
            "spent) and divides by them, so every cell is compared at the same "
            "number of samples."
            if by_steps
            else ""
        )
        + " 95% CIs as in the cells' tables.",
        "",
        markdown(headers, rows),
        "",
    ]


__all__ = [
    "CURVE_METRICS",
    "budget_lines",
    "budget_summary",
    "curve_area",
    "curve_columns",
    "curves",
    "platform",
    "run_curve",
    "step_budget",
]
