"""A study's report: per-run and per-cell tables, comparisons, figures, report.md.

`write_report(out)` reads the run directories of the study in `out` and writes
to `out/report/`:

- `cells.csv`: one row per run (cell, arm, axis values, seed and `RUN_COLUMNS`);
- `summary.csv`: one row per cell: n, and for each of `METRICS` the mean, the
  standard deviation, a 95% bootstrap CI of the mean, and the interquartile
  mean with its 95% stratified-bootstrap CI (rliable);
- `comparisons.csv`: every pair of cells that differ in one factor (one axis,
  or the arm): the difference of means A - B with its 95% bootstrap CI, the
  two-sided Mann-Whitney U test (p, and p adjusted over all comparisons of a
  metric by Benjamini-Hochberg), and the probability of improvement P(A > B)
  (the common-language effect size; rliable, stratified-bootstrap CI);
- `learning_curves.png`, `final_fitness.png`, `performance_profile.png`;
- `report.md` gathering them.

Statistics come from scipy (`stats.bootstrap`, `stats.mannwhitneyu`,
`stats.false_discovery_control`) and rliable (Agarwal et al. 2021, "Deep
reinforcement learning at the edge of the statistical precipice"); resampling
uses fixed seeds, so a report is reproducible.

Adding a per-run figure (held-out evaluation, say) is one change: a
`summary.json` field listed in `RUN_COLUMNS`, and in `METRICS` to summarise and
compare it.
"""

import contextlib
import itertools
import json
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxtyping import Float

from .runner import load_plan, load_study, read_summary, run_dir
from .spec import Study, format_value

RUN_COLUMNS: dict[str, str] = {
    "generations": "generations run",
    "final_mean_fitness": "population mean fitness in the last generation",
    "final_best_fitness": "best fitness in the last generation",
    "best_fitness": "best fitness seen in training (the selection's own episodes)",
    "agent_steps": "environment steps taken (P x T x generations)",
    "wall_time_s": "wall time, s (the run's share of its program's time)",
    "complete": "the run finished",
}
"""cells.csv columns read from each run's summary.json, in order."""

METRICS: dict[str, str] = {
    "final_mean_fitness": "final mean fitness",
    "best_fitness": "best fitness",
}
"""Per-run figures that summary.csv summarises and comparisons compare."""

CONFIDENCE = 0.95
RESAMPLES = 9999
RLIABLE_REPS = 2000
SEED = 0


# -- tables -------------------------------------------------------------------------


@contextlib.contextmanager
def _seeded_rliable():
    """rliable 1.2 seeds arch's bootstrap with `random_state`, which arch 7
    deprecates (FutureWarning); the seed still works, so only that warning is
    silenced, here."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="random_state is deprecated", category=FutureWarning
        )
        yield


def cells_table(out: str | Path, study: Study | None = None) -> Any:
    """One row per run (a `pandas.DataFrame`); see the module docstring."""
    import pandas as pd

    study = study or load_study(out)
    rows = []
    for run in study.runs:
        summary = read_summary(run_dir(out, run))
        row: dict[str, Any] = {"cell": run.cell.name, "arm": run.cell.arm}
        row.update({k: format_value(v) for k, v in run.cell.values.items()})
        row["seed"] = run.seed
        row.update({k: summary.get(k) for k in RUN_COLUMNS})
        row["complete"] = bool(summary.get("complete", False))
        row["run_dir"] = str(Path("runs") / run.id)
        rows.append(row)
    return pd.DataFrame(rows)


def bootstrap_mean_ci(values: Float[np.ndarray, " runs"]) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean (NaN with fewer than 2 values)."""
    from scipy import stats

    x = np.asarray(values, np.float64)
    if x.size < 2:
        return math.nan, math.nan
    result = stats.bootstrap(
        (x,),
        np.mean,
        confidence_level=CONFIDENCE,
        n_resamples=RESAMPLES,
        method="percentile",
        rng=np.random.default_rng(SEED),
    )
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def iqm(values: Float[np.ndarray, " runs"]) -> tuple[float, float, float]:
    """Interquartile mean and its 95% stratified-bootstrap CI (rliable)."""
    from rliable import library, metrics

    x = np.asarray(values, np.float64).reshape(-1, 1)  # runs x tasks
    if x.shape[0] < 2:
        return float(x.mean()) if x.size else math.nan, math.nan, math.nan
    with _seeded_rliable():
        points, intervals = library.get_interval_estimates(
            {"x": x},
            lambda s: np.array([metrics.aggregate_iqm(s)]),
            reps=RLIABLE_REPS,
            random_state=np.random.RandomState(SEED),
        )
    return (
        float(points["x"][0]),
        float(intervals["x"][0, 0]),
        float(intervals["x"][1, 0]),
    )


def summary_table(cells: Any, metrics: Mapping[str, str] = METRICS) -> Any:
    """One row per cell: n and, per metric, mean, std, CIs and IQM."""
    import pandas as pd

    rows = []
    for cell, group in cells.groupby("cell", sort=False):
        row: dict[str, Any] = {"cell": cell, "n": 0}
        for metric in metrics:
            x = group[metric].dropna().to_numpy(np.float64)
            row["n"] = max(row["n"], x.size)
            low, high = bootstrap_mean_ci(x)
            centre, iqm_low, iqm_high = iqm(x)
            row |= {
                f"{metric}_mean": float(np.mean(x)) if x.size else math.nan,
                f"{metric}_std": float(np.std(x, ddof=1)) if x.size > 1 else math.nan,
                f"{metric}_ci_low": low,
                f"{metric}_ci_high": high,
                f"{metric}_iqm": centre,
                f"{metric}_iqm_ci_low": iqm_low,
                f"{metric}_iqm_ci_high": iqm_high,
            }
        rows.append(row)
    return pd.DataFrame(rows)


def _factors(study: Study) -> dict[str, dict[str, Any]]:
    """Each cell's factors: the arm (when there are arms) and its axis values."""
    arms = len(study.arms) > 1
    return {
        c.name: ({"arm": c.arm} if arms else {})
        | {k: format_value(v) for k, v in c.values.items()}
        for c in study.cells
    }


def comparisons_table(
    cells: Any, study: Study, metrics: Mapping[str, str] = METRICS
) -> Any:
    """Every pair of cells differing in one factor, per metric (see above).

    A is the cell whose differing value comes later in the study file (an
    ablation arm, a later axis value), B the earlier one: the difference is
    A - B, and P(A > B) is the probability that a run of A beats one of B.
    """
    import pandas as pd
    from rliable import library, metrics as rl_metrics
    from scipy import stats

    factors = _factors(study)
    order = [c.name for c in study.cells]
    rows = []
    for b, a in itertools.combinations(order, 2):
        differing = [k for k in factors[a] if factors[a][k] != factors[b][k]]
        if len(differing) != 1:
            continue
        factor = differing[0]
        context = ", ".join(f"{k}={v}" for k, v in factors[a].items() if k != factor)
        for metric in metrics:
            xa = cells.loc[cells["cell"] == a, metric].dropna().to_numpy(np.float64)
            xb = cells.loc[cells["cell"] == b, metric].dropna().to_numpy(np.float64)
            row: dict[str, Any] = {
                "factor": factor,
                "a": factors[a][factor],
                "b": factors[b][factor],
                "context": context,
                "metric": metric,
                "cell_a": a,
                "cell_b": b,
                "n_a": xa.size,
                "n_b": xb.size,
                "mean_a": float(np.mean(xa)) if xa.size else math.nan,
                "mean_b": float(np.mean(xb)) if xb.size else math.nan,
            }
            row["difference"] = row["mean_a"] - row["mean_b"]
            low = high = u = p = poi = poi_low = poi_high = math.nan
            if xa.size >= 2 and xb.size >= 2:
                ci = stats.bootstrap(
                    (xa, xb),
                    lambda x, y, axis: np.mean(x, axis=axis) - np.mean(y, axis=axis),
                    confidence_level=CONFIDENCE,
                    n_resamples=RESAMPLES,
                    method="percentile",
                    rng=np.random.default_rng(SEED),
                ).confidence_interval
                low, high = float(ci.low), float(ci.high)
                test = stats.mannwhitneyu(xa, xb, alternative="two-sided")
                u, p = float(test.statistic), float(test.pvalue)
                with _seeded_rliable():
                    points, intervals = library.get_interval_estimates(
                        {"ab": [xa[:, None], xb[:, None]]},
                        lambda x, y: np.array(
                            [rl_metrics.probability_of_improvement(x, y)]
                        ),
                        reps=RLIABLE_REPS,
                        random_state=np.random.RandomState(SEED),
                    )
                poi = float(points["ab"][0])
                poi_low, poi_high = (float(v) for v in np.ravel(intervals["ab"]))
            row |= {
                "difference_ci_low": low,
                "difference_ci_high": high,
                "mannwhitney_u": u,
                "p_value": p,
                "prob_improvement": poi,
                "prob_improvement_ci_low": poi_low,
                "prob_improvement_ci_high": poi_high,
            }
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table["p_adjusted"] = math.nan
    for metric in metrics:
        rows_of = (table["metric"] == metric) & table["p_value"].notna()
        if rows_of.any():
            table.loc[rows_of, "p_adjusted"] = stats.false_discovery_control(
                table.loc[rows_of, "p_value"].to_numpy(), method="bh"
            )
    return table


# -- curves -------------------------------------------------------------------------


def curves(out: str | Path, study: Study, field: str = "mean") -> dict[str, np.ndarray]:
    """Per cell, the field per generation of every seed: `(seeds, generations)`
    (NaN where a run has not reached a generation)."""
    out_curves = {}
    for cell in study.cells:
        rows = []
        for run in (r for r in study.runs if r.cell.name == cell.name):
            path = run_dir(out, run) / "metrics.jsonl"
            values = np.full(run.experiment.run.generations, np.nan)
            if path.exists():
                for line in path.read_text().splitlines():
                    record = json.loads(line)
                    g, v = record["generation"], record.get(field)
                    if g < values.size and v is not None:
                        values[g] = v
            rows.append(values)
        width = max(len(r) for r in rows)
        out_curves[cell.name] = np.stack(
            [np.pad(r, (0, width - len(r)), constant_values=np.nan) for r in rows]
        )
    return out_curves


def curve_band(
    values: Float[np.ndarray, "seeds generations"],
) -> tuple[
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
]:
    """Mean over seeds per generation and its 95% bootstrap CI (NaN bands with
    fewer than 2 seeds, or where a seed has not reached the generation)."""
    from scipy import stats

    mean = np.nanmean(values, axis=0) if values.size else values
    low = np.full(values.shape[1], np.nan)
    high = np.full(values.shape[1], np.nan)
    complete = ~np.isnan(values).any(axis=0)
    if values.shape[0] >= 2 and complete.any():
        ci = stats.bootstrap(
            (values[:, complete],),
            np.mean,
            axis=0,
            confidence_level=CONFIDENCE,
            n_resamples=2000,
            method="percentile",
            rng=np.random.default_rng(SEED),
        ).confidence_interval
        low[complete], high[complete] = ci.low, ci.high
    return mean, low, high


# -- report.md ----------------------------------------------------------------------


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _ci(row: Any, prefix: str) -> str:
    return f"[{_fmt(row[f'{prefix}_ci_low'])}, {_fmt(row[f'{prefix}_ci_high'])}]"


def _markdown(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out: str | Path, to: str | Path | None = None) -> Path:
    """Write the report of the study in `out` (to `out/report/` by default);
    returns the path of report.md. Runs not complete yet are left out of the
    statistics (the report says how many)."""
    from . import plots

    out = Path(out)
    study = load_study(out)
    to = Path(to) if to is not None else out / "report"
    to.mkdir(parents=True, exist_ok=True)
    cells = cells_table(out, study)
    cells.to_csv(to / "cells.csv", index=False)
    complete = cells[cells["complete"]]
    summary = summary_table(complete)
    summary.to_csv(to / "summary.csv", index=False)
    comparisons = comparisons_table(complete, study)
    comparisons.to_csv(to / "comparisons.csv", index=False)

    seeds = len(study.seeds)
    bands = {name: curve_band(v) for name, v in curves(out, study).items()}
    plots.learning_curves(bands, seeds, to / "learning_curves.png")
    plots.final_fitness(
        complete, summary, list(METRICS.items()), to / "final_fitness.png"
    )
    plots.performance_profile(
        complete,
        "final_mean_fitness",
        METRICS["final_mean_fitness"],
        to / "performance_profile.png",
        reps=RLIABLE_REPS,
    )

    plan = load_plan(out)
    first = study.runs[0].experiment
    lines = [
        f"# Study `{study.name}`",
        "",
        f"{len(study.cells)} cells x {seeds} seeds = {len(study.runs)} runs "
        f"({int(cells['complete'].sum())} complete), in "
        f"{len(plan.get('programs', [])) or '?'} compiled programs. "
        f"Generations per run: {first.run.generations}; population "
        f"{first.strategy.population_size}; lifetime {first.run.lifetime} steps.",
        "",
        "Fitness is the training evaluation (the episodes selection saw). *Final "
        "mean fitness*: the population's mean in the last generation; *best "
        "fitness*: the best single evaluation seen in the run.",
        "",
        "## Cells",
        "",
    ]
    headers = ["cell", "n"]
    for label in METRICS.values():
        headers += [f"{label}: mean ± std", "95% CI", "IQM [95% CI]"]
    rows = []
    for _, row in summary.iterrows():
        values: list[Any] = [row["cell"], int(row["n"])]
        for metric in METRICS:
            values += [
                f"{_fmt(row[f'{metric}_mean'])} ± {_fmt(row[f'{metric}_std'], 2)}",
                _ci(row, metric),
                f"{_fmt(row[f'{metric}_iqm'])} {_ci(row, f'{metric}_iqm')}",
            ]
        rows.append(values)
    lines += [_markdown(headers, rows), ""]
    lines += ["## Comparisons", ""]
    if comparisons.empty:
        lines += ["No two cells differ in exactly one factor.", ""]
    else:
        lines += [
            "Pairs of cells that differ in one factor. Difference = A − B of the "
            "means, 95% percentile-bootstrap CI; Mann–Whitney U two-sided, p "
            "adjusted over the comparisons of each metric (Benjamini–Hochberg); "
            "P(A > B): probability that a run of A beats a run of B, 95% "
            "stratified-bootstrap CI (rliable).",
            "",
        ]
        rows = []
        for _, row in comparisons.iterrows():
            rows.append(
                [
                    f"{row['factor']}: {row['a']} vs {row['b']}"
                    + (f" ({row['context']})" if row["context"] else ""),
                    METRICS[row["metric"]],
                    f"{_fmt(row['difference'])} {_ci(row, 'difference')}",
                    f"U={_fmt(row['mannwhitney_u'])}, p={_fmt(row['p_value'], 3)} "
                    f"(adj. {_fmt(row['p_adjusted'], 3)})",
                    f"{_fmt(row['prob_improvement'], 3)} "
                    + _ci(row, "prob_improvement"),
                ]
            )
        lines += [
            _markdown(
                ["A vs B", "metric", "A − B [95% CI]", "Mann–Whitney", "P(A > B)"],
                rows,
            ),
            "",
        ]
    lines += [
        "## Figures",
        "",
        "![learning curves](learning_curves.png)",
        "",
        "![final fitness per cell](final_fitness.png)",
        "",
        "![performance profile](performance_profile.png)",
        "",
        "Tables: cells.csv (one row per run), summary.csv (one row per cell), "
        "comparisons.csv.",
        "",
    ]
    path = to / "report.md"
    path.write_text("\n".join(lines))
    return path


__all__ = [
    "METRICS",
    "RUN_COLUMNS",
    "bootstrap_mean_ci",
    "cells_table",
    "comparisons_table",
    "curve_band",
    "curves",
    "iqm",
    "summary_table",
    "write_report",
]
