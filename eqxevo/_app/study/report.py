"""A study's report: per-run and per-cell tables, comparisons on held-out fitness,
figures and report.md (docs/studies.md, "The report").
"""

import dataclasses
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..experiment.build import build
from ..experiment.certify import certificate_bands, task_record
from . import plots
from .budget import (
    CURVE_METRICS,
    budget_lines,
    budget_summary,
    curve_columns,
    curves,
    platform,
)
from .intervals import (
    MIN_RUNS_FOR_CI,
    curve_band,
    difference_interval,
    iqm_interval,
    mean_interval,
    probability_of_improvement,
)
from .lesions import lesion_columns, lesion_lines
from .markdown import TOO_FEW, ci, fmt, markdown
from .reference_scores import (
    ROOM_NOTE,
    reference_lines,
    room_columns,
    score_study_references,
)
from .runner import (
    HELDOUT_COLUMNS,
    heldout_columns,
    load_plan,
    load_study,
    read_summary,
    run_dir,
)
from .spec import Study, format_value, require
from .stats import ALPHA, TESTS, preregistered_tests
from .tune import tuning_lines

RUN_COLUMNS: dict[str, str] = {
    "generations": "generations run",
    "final_mean_fitness": "training: population mean fitness, last generation",
    "final_best_fitness": "training: best fitness in the last generation",
    "best_fitness": "training: best fitness seen (the selection's own episodes)",
    "agent_steps": "environment steps taken (P x T x generations)",
    "wall_time_s": "wall time, s (the run's share of its program's time, "
    "compilation included)",
    "platform": "the JAX backend it ran on (cpu, gpu, tpu), from its segments",
    "complete": "the run finished",
}
"""cells.csv columns read from each run's summary.json, in order."""

METRICS: dict[str, str] = {
    "heldout_mean": "held-out final fitness",
    "final_mean_fitness": "training: final mean fitness",
    "best_fitness": "training: best fitness",
}
"""Per-run figures that summary.csv summarises and comparisons compare."""

QD_METRICS: dict[str, str] = {
    "qd_score": "archive: final QD score",
    "coverage": "archive: final coverage",
    "max_fitness": "archive: best elite's fitness",
}
"""A MAP-Elites run's figures (its summary.json's), beside `METRICS` in the
tables of a study that has them."""


def study_metrics(cells: Any) -> dict[str, str]:
    """`METRICS`, and `QD_METRICS` when some run of `cells` is a MAP-Elites run."""
    qd = "qd_score" in cells and cells["qd_score"].notna().any()
    return METRICS | (QD_METRICS if qd else {})


# -- tables -------------------------------------------------------------------------


def cells_table(out: str | Path, study: Study | None = None) -> Any:
    """One row per run (a `pandas.DataFrame`); see docs/studies.md."""
    pd = require("pandas", "eqxevo study report")

    study = study or load_study(out)
    rows = []
    for run in study.runs:
        summary = read_summary(run_dir(out, run))
        row: dict[str, Any] = {"cell": run.cell.name, "arm": run.cell.arm}
        row.update({k: format_value(v) for k, v in run.cell.values.items()})
        row["seed"] = run.seed
        row.update(heldout_columns(summary))
        row.update({k: summary.get(k) for k in RUN_COLUMNS})
        row.update({k: summary.get(k) for k in QD_METRICS})
        row["complete"] = bool(summary.get("complete", False))
        row["platform"] = platform(summary)
        row["run_dir"] = str(Path("runs") / run.id)
        rows.append(row)
    table = pd.DataFrame(rows)
    # A study without MAP-Elites runs has no archive figures: no empty columns.
    return table.drop(columns=[k for k in QD_METRICS if table[k].isna().all()])


def summary_table(cells: Any, metrics: Mapping[str, str] = METRICS) -> Any:
    """One row per cell: n and, per metric, mean, std, BCa CIs (NaN with n below
    `MIN_RUNS_FOR_CI`) and IQM; with the budget columns
    (`eqxevo._app.study.budget.budget_summary`), mean agent steps and seconds
    per run and the backend; with the reference columns
    (`eqxevo._app.study.reference_scores`), the mean normalised score, the mean best
    reference without memory and `below_no_memory`: whether the cell's mean
    held-out fitness is below it (on the same lifetimes)."""
    pd = require("pandas", "eqxevo study report")

    rows = []
    for cell, group in cells.groupby("cell", sort=False):
        row: dict[str, Any] = {"cell": cell, "n": 0}
        for metric in metrics:
            x = group[metric].dropna().to_numpy(np.float64)
            row["n"] = max(row["n"], x.size)
            low, high = mean_interval(x)
            centre, iqm_low, iqm_high = iqm_interval(x)
            row |= {
                f"{metric}_mean": float(np.mean(x)) if x.size else math.nan,
                f"{metric}_std": float(np.std(x, ddof=1)) if x.size > 1 else math.nan,
                f"{metric}_ci_low": low,
                f"{metric}_ci_high": high,
                f"{metric}_iqm": centre,
                f"{metric}_iqm_ci_low": iqm_low,
                f"{metric}_iqm_ci_high": iqm_high,
            }
        if {"agent_steps", "wall_time_s", "platform"} <= set(group):
            row |= budget_summary(group)
        if "normalised" in group:
            row |= _against_references(group)
        rows.append(row)
    return pd.DataFrame(rows)


def _against_references(runs: Any) -> dict[str, Any]:
    """A cell's runs against the references on their own lifetimes."""
    both = runs[["heldout_mean", "no_memory_reference"]].astype(float).dropna()
    gap = (both["heldout_mean"] - both["no_memory_reference"]).to_numpy()
    normalised = runs["normalised"].astype(float).dropna().to_numpy()
    floor = both["no_memory_reference"].to_numpy()
    return {
        "normalised_mean": float(normalised.mean()) if normalised.size else math.nan,
        "no_memory_reference_mean": float(floor.mean()) if floor.size else math.nan,
        "below_no_memory": bool(gap.size and gap.mean() < 0),
    }


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
    pd = require("pandas", "eqxevo study report")
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
                test = stats.mannwhitneyu(xa, xb, alternative="two-sided")
                u, p = float(test.statistic), float(test.pvalue)
                # P(A > B), ties counting one half: U / (n_a n_b), the
                # common-language effect size.
                poi = u / (xa.size * xb.size)
            if min(xa.size, xb.size) >= MIN_RUNS_FOR_CI:
                # Its CI and the difference's resample each cell apart.
                low, high = difference_interval(xa, xb)
                _, poi_low, poi_high = probability_of_improvement(xa, xb)
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
        if bool(rows_of.any()):
            table.loc[rows_of, "p_adjusted"] = stats.false_discovery_control(
                table.loc[rows_of, "p_value"].to_numpy(), method="bh"
            )
    return table


def preregistered_table(cells: Any, study: Study) -> Any:
    """The pre-registered comparisons (`[[study.compare]]`), each on its metric
    (held-out final fitness by default): `stats.preregistered_tests` for arm A
    against arm B at every combination of axis values, Holm-corrected over all
    of them."""
    pd = require("pandas", "eqxevo study report")
    pairs, context = [], []
    for c in study.compare:
        for cell in (x for x in study.cells if x.arm == c.a):
            other = next(
                x for x in study.cells if x.arm == c.b and x.values == cell.values
            )
            pairs.append(dataclasses.replace(c, a=cell.name, b=other.name))
            context.append(
                ", ".join(f"{k}={format_value(v)}" for k, v in cell.values.items())
            )
    scores = {
        (name, p.metric): cells.loc[cells["cell"] == name, p.metric]
        .dropna()
        .to_numpy(np.float64)
        for p in pairs
        for name in (p.a, p.b)
    }
    rows = preregistered_tests(pairs, scores)
    for row, where in zip(rows, context, strict=True):
        row["context"] = where
    return pd.DataFrame(rows)


# -- report.md ----------------------------------------------------------------------


def _episodes(cells: Any) -> str:
    counts = sorted({int(n) for n in cells["heldout_episodes"].dropna()})
    return "/".join(map(str, counts)) or "–"


def _room(row: Any) -> str:
    """A comparison's room flag (`room_columns`)."""
    if "little_room" not in row or not math.isfinite(float(row["headroom"])):
        return "–"
    text = f"{fmt(row['headroom'])} vs spread {fmt(row['spread'], 3)}"
    return f"**little room** ({text})" if row["little_room"] else text


def study_bands(study: Study) -> list[Any]:
    """The certified memoryless bound and best learner or oracle of the study's
    task as figure bands, when every run shares one task and it has a
    certificate (`eqxevo certify`)."""
    tasks = {
        json.dumps(task_record(r.experiment), sort_keys=True, default=str)
        for r in study.runs
    }
    if len(tasks) != 1:
        return []
    return certificate_bands(build(study.runs[0].experiment).experiment)


def _hypothesis(row: Any) -> str:
    if row["alternative"] == "equivalent":
        return f"|A − B| < {fmt(row['margin'])}"
    return {"greater": "A > B", "less": "A < B"}.get(row["alternative"], "A ≠ B")


def _preregistered_lines(table: Any, note: str) -> list[str]:
    if table.empty:
        return []
    rows = [
        [
            f"{row['a']} vs {row['b']}"
            + (f" ({row['context']})" if row["context"] else "")
            + (f", on {row['metric']}" if row["metric"] != "heldout_mean" else ""),
            _hypothesis(row),
            TESTS[row["test"]][0]
            + (" (TOST)" if row["alternative"] == "equivalent" else ""),
            f"{row['n_a']}, {row['n_b']}",
            f"{fmt(row['mean_a'])} vs {fmt(row['mean_b'])}",
            f"{TESTS[row['test']][1]}={fmt(row['statistic'], 3)}, "
            f"p={fmt(row['p'], 3)} (Holm {fmt(row['p_holm'], 3)})",
            f"**{row['verdict']}**",
            f"{fmt(row['prob_improvement'], 3)} "
            + ci(row, "prob_improvement", min(int(row["n_a"]), int(row["n_b"]))),
            _room(row),
        ]
        for _, row in table.iterrows()
    ]
    return [
        "## Pre-registered comparisons",
        "",
        "Declared in the study file before it ran (`[[study.compare]]`), on "
        "held-out final fitness unless a row names another metric: each "
        "comparison's one declared test, in the "
        "declared direction (an equivalence claim: two one-sided tests within "
        f"the margin), Holm-corrected over these comparisons at α = {ALPHA}. "
        "The verdict is what that test supports: better, worse, equivalent "
        "(within the margin) or undecided; an undecided comparison is not "
        "evidence of no difference. P(A > B) with its 95% BCa bootstrap CI "
        "describes the effect and decides nothing.",
        "",
        markdown(
            [
                "A vs B",
                "hypothesis",
                "test",
                "n_A, n_B",
                "means",
                "statistic, p",
                "verdict",
                "P(A > B) [95% CI]",
                "room",
            ],
            rows,
        ),
        "",
        note,
        "",
    ]


def write_report(out: str | Path, to: str | Path | None = None) -> Path:
    """Write the report of the study in `out` (to `out/report/` by default);
    returns the path of report.md. Runs not complete yet are left out of the
    statistics (the report says how many). The environments' reference agents
    are scored on the runs' held-out lifetimes here (references.csv), once per
    environment variant and seed."""
    out = Path(out)
    study = load_study(out)
    to = Path(to) if to is not None else out / "report"
    to.mkdir(parents=True, exist_ok=True)
    refs, cells = score_study_references(study, cells_table(out, study))
    cells = curve_columns(out, lesion_columns(out, cells))
    refs.to_csv(to / "references.csv", index=False)
    cells.to_csv(to / "cells.csv", index=False)
    complete = cells[cells["complete"]]
    metrics = study_metrics(cells)
    summary = summary_table(complete, metrics | CURVE_METRICS)
    summary.to_csv(to / "summary.csv", index=False)
    comparisons = room_columns(comparisons_table(complete, study, metrics), complete)
    comparisons.to_csv(to / "comparisons.csv", index=False)
    preregistered = room_columns(preregistered_table(complete, study), complete)
    if study.compare:
        preregistered.to_csv(to / "preregistered.csv", index=False)

    seeds = len(study.seeds)
    bands = {name: curve_band(v) for name, v in curves(out, study).items()}
    plots.learning_curves(
        bands, seeds, to / "learning_curves.png", references=study_bands(study)
    )
    plots.final_fitness(
        complete, summary, list(metrics.items()), to / "final_fitness.png"
    )
    plots.performance_profile(
        complete,
        "heldout_mean",
        METRICS["heldout_mean"],
        to / "performance_profile.png",
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
        "*Held-out final fitness*: the final genome (the search distribution's "
        "mean; the best genome for algorithms without one) scored on "
        f"{_episodes(complete)} fresh lifetimes that selection never played "
        "(eqxevo._src.heldout); runs are compared on it. *Training* figures come from "
        "the episodes selection saw: the population's mean fitness in the last "
        "generation, and the best single evaluation of the run (biased upward "
        "by selection on noise).",
        "Intervals are 95% BCa bootstrap intervals over a cell's runs (scipy). "
        f"Intervals need {MIN_RUNS_FOR_CI} runs or more: with fewer, a nominal 95% "
        "interval of a mean was measured to cover the truth less than 90% of "
        'the time (docs/studies.md, "The report"), and tables say '
        f"[{TOO_FEW}] instead.",
        "",
        "## How the arms were tuned",
        "",
        *tuning_lines(study, out),
        "",
        *reference_lines(refs, summary),
        "## Cells",
        "",
    ]
    for metric, label in metrics.items():
        headers = ["cell", "n", "mean ± std", "95% CI", "IQM [95% CI]"]
        extra = metric == "heldout_mean" and "normalised_mean" in summary
        rows = []
        for _, row in summary.iterrows():
            n = int(row["n"])
            rows.append(
                [
                    row["cell"],
                    n,
                    f"{fmt(row[f'{metric}_mean'])} ± {fmt(row[f'{metric}_std'], 2)}",
                    ci(row, metric, n),
                    f"{fmt(row[f'{metric}_iqm'])} {ci(row, f'{metric}_iqm', n)}",
                ]
                + (
                    [
                        fmt(row["normalised_mean"], 3),
                        "**below**" if row["below_no_memory"] else "above",
                    ]
                    if extra
                    else []
                )
            )
        if extra:
            headers += ["normalised", "vs best without memory"]
        lines += [
            f"**{label[0].upper() + label[1:]}**",
            "",
            markdown(headers, rows),
            "",
        ]
    lines += budget_lines(summary, complete)
    lines += lesion_lines(complete)
    lines += _preregistered_lines(preregistered, ROOM_NOTE)
    lines += ["## Comparisons", ""]
    if comparisons.empty:
        lines += ["No two cells differ in exactly one factor.", ""]
    else:
        lines += [
            "Pairs of cells that differ in one factor. Difference = A − B of the "
            "means, 95% BCa bootstrap CI; Mann–Whitney U two-sided, p "
            "adjusted over the comparisons of each metric (Benjamini–Hochberg); "
            "effect size P(A > B) = U / (n_A n_B): the probability that a run of "
            "A beats a run of B (0.5: no effect), 95% BCa bootstrap CI.",
            "",
        ]
        rows = []
        for _, row in comparisons.iterrows():
            n = min(int(row["n_a"]), int(row["n_b"]))
            rows.append(
                [
                    f"{row['factor']}: {row['a']} vs {row['b']}"
                    + (f" ({row['context']})" if row["context"] else ""),
                    metrics[row["metric"]],
                    f"{row['n_a']}, {row['n_b']}",
                    f"{fmt(row['difference'])} {ci(row, 'difference', n)}",
                    f"U={fmt(row['mannwhitney_u'])}, p={fmt(row['p_value'], 3)} "
                    f"(adj. {fmt(row['p_adjusted'], 3)})",
                    f"{fmt(row['prob_improvement'], 3)} "
                    + ci(row, "prob_improvement", n),
                    _room(row),
                ]
            )
        lines += [
            markdown(
                [
                    "A vs B",
                    "metric",
                    "n_A, n_B",
                    "A − B [95% CI]",
                    "Mann–Whitney",
                    "P(A > B) [95% CI]",
                    "room",
                ],
                rows,
            ),
            "",
            ROOM_NOTE,
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
        "comparisons.csv, references.csv"
        + (", preregistered.csv." if study.compare else "."),
        "",
    ]
    path = to / "report.md"
    path.write_text("\n".join(lines))
    return path


__all__ = [
    "HELDOUT_COLUMNS",
    "METRICS",
    "QD_METRICS",
    "RUN_COLUMNS",
    "cells_table",
    "comparisons_table",
    "heldout_columns",
    "preregistered_table",
    "summary_table",
    "write_report",
]
