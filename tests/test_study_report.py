import json
import warnings

import jax
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from study_fixtures import finished_study  # noqa: F401

from eqxevo._app.study import plots
from eqxevo._app.study.budget import CURVE_METRICS, curves
from eqxevo._app.study.intervals import (
    CONFIDENCE,
    MIN_RUNS_FOR_CI,
    RESAMPLES,
    SEED,
    curve_band,
    improvement,
)
from eqxevo._app.study.report import (
    METRICS,
    cells_table,
    comparisons_table,
    preregistered_table,
    summary_table,
    write_report,
)
from eqxevo._app.study.spec import from_dict
from eqxevo._src.heldout import heldout_keys
from eqxevo._src.references import references, score_references
from eqxevo.experiment import build
from eqxevo.study import load

# Fixed data: two arms x two noise levels, just enough seeds for intervals.
SEEDS = MIN_RUNS_FOR_CI
RNG = np.random.default_rng(42)
STUDY = from_dict(
    {
        "study": {
            "name": "fixed",
            "seeds": SEEDS,
            "axes": {"env.params.sensor_noise": [0.05, 0.3]},
            "arms": [{"name": "ablated", "run.lifetime": 10}],
        }
    }
)
CELLS = pd.DataFrame(
    [
        {
            "cell": cell.name,
            "seed": seed,
            "heldout_mean": float(RNG.normal(-i, 2.0)),
            "final_mean_fitness": float(RNG.normal(i, 1.0)),
            "best_fitness": float(RNG.normal(2 * i, 0.5)),
        }
        for i, cell in enumerate(STUDY.cells)
        for seed in range(SEEDS)
    ]
)


def _scipy_ci(*samples, statistic):
    """scipy's BCa interval, called directly (test_study_intervals.py checks
    it against a NumPy BCa); where BCa is undefined (every run of one cell
    beats every run of the other), the percentile interval of its resamples."""
    options = {"confidence_level": CONFIDENCE, "rng": np.random.default_rng(SEED)}
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(
            samples, statistic, method="BCa", n_resamples=RESAMPLES, **options
        )
    if np.isnan(result.confidence_interval.low):
        result = stats.bootstrap(
            samples,
            statistic,
            method="percentile",
            n_resamples=0,
            bootstrap_result=result,
            **options,
        )
    return result.confidence_interval


@pytest.fixture(scope="module")
def report(finished_study, tmp_path_factory):  # noqa: F811
    """The tiny study's report, written once for the tests that read it."""
    to = tmp_path_factory.mktemp("report")
    return write_report(finished_study.out, to), to


def test_summary_statistics_match_numpy_and_scipy_on_fixed_data():
    summary = summary_table(CELLS).set_index("cell")
    assert list(summary.index) == [c.name for c in STUDY.cells]
    for cell, group in CELLS.groupby("cell"):
        row = summary.loc[cell]
        assert row["n"] == SEEDS
        for metric in METRICS:
            x = group[metric].to_numpy()
            assert row[f"{metric}_mean"] == pytest.approx(np.mean(x), rel=1e-12)
            assert row[f"{metric}_std"] == pytest.approx(np.std(x, ddof=1), rel=1e-12)
            ci = _scipy_ci(x, statistic=np.mean)
            assert row[f"{metric}_ci_low"] == pytest.approx(ci.low, rel=1e-12)
            assert row[f"{metric}_ci_high"] == pytest.approx(ci.high, rel=1e-12)
            # IQM: scipy's 25%-trimmed mean, and its BCa interval
            iqm = stats.trim_mean(x, 0.25)
            assert row[f"{metric}_iqm"] == pytest.approx(iqm, rel=1e-12)
            ci = _scipy_ci(
                x, statistic=lambda v, axis: stats.trim_mean(v, 0.25, axis=axis)
            )
            assert row[f"{metric}_iqm_ci_low"] == pytest.approx(ci.low, rel=1e-12)
            assert row[f"{metric}_iqm_ci_high"] == pytest.approx(ci.high, rel=1e-12)
            assert ci.low < iqm < ci.high


def test_comparisons_pair_cells_differing_in_one_factor_and_match_scipy():
    table = comparisons_table(CELLS, STUDY)
    # 4 cells in a 2x2 design: 4 pairs differ in one factor, 2 in both
    pairs = set(zip(table["cell_a"], table["cell_b"], strict=True))
    assert len(pairs) == 4 and len(table) == 4 * len(METRICS)
    arm_rows = table[table["factor"] == "arm"]
    assert set(arm_rows["a"]) == {"ablated"} and set(arm_rows["b"]) == {"base"}
    for _, row in table.iterrows():
        xa = CELLS.loc[CELLS["cell"] == row["cell_a"], row["metric"]].to_numpy()
        xb = CELLS.loc[CELLS["cell"] == row["cell_b"], row["metric"]].to_numpy()
        assert row["difference"] == pytest.approx(xa.mean() - xb.mean(), rel=1e-12)
        ci = _scipy_ci(xa, xb, statistic=lambda x, y, axis: x.mean(axis) - y.mean(axis))
        assert row["difference_ci_low"] == pytest.approx(ci.low, rel=1e-12)
        assert row["difference_ci_high"] == pytest.approx(ci.high, rel=1e-12)
        test = stats.mannwhitneyu(xa, xb, alternative="two-sided")
        assert row["mannwhitney_u"] == test.statistic
        assert row["p_value"] == pytest.approx(test.pvalue, rel=1e-12)
        greater = stats.mannwhitneyu(xa, xb, alternative="greater").statistic
        pairs = SEEDS * SEEDS
        assert row["prob_improvement"] == pytest.approx(greater / pairs, rel=1e-12)
        ci = _scipy_ci(xa, xb, statistic=improvement)
        assert row["prob_improvement_ci_low"] == pytest.approx(ci.low, rel=1e-12)
        assert row["prob_improvement_ci_high"] == pytest.approx(ci.high, rel=1e-12)
    for metric in METRICS:
        rows = table[table["metric"] == metric]
        adjusted = stats.false_discovery_control(rows["p_value"], method="bh")
        np.testing.assert_allclose(rows["p_adjusted"], adjusted, rtol=1e-12)


def test_preregistered_comparisons_run_at_every_axis_value_holm_corrected():
    study = from_dict(
        {
            "study": STUDY.data["study"]
            | {
                "compare": [
                    {
                        "a": "ablated",
                        "b": "base",
                        "test": "welch",
                        "alternative": "less",
                    }
                ]
            }
        }
    )
    table = preregistered_table(CELLS, study).set_index("context")
    # one test per noise level, in one Holm family
    assert list(table.index) == [
        "env.params.sensor_noise=0.05",
        "env.params.sensor_noise=0.3",
    ]
    for context, row in table.iterrows():
        a = CELLS.loc[CELLS["cell"] == row["a"], "heldout_mean"].to_numpy()
        b = CELLS.loc[CELLS["cell"] == row["b"], "heldout_mean"].to_numpy()
        assert row["a"].startswith("ablated,") and row["a"].endswith(str(context))
        welch = stats.ttest_ind(a, b, equal_var=False, alternative="less")
        assert row["p"] == pytest.approx(welch.pvalue, rel=1e-12)
        assert row["statistic"] == pytest.approx(welch.statistic, rel=1e-12)
    p = table["p"].to_numpy()
    holm = np.minimum(1.0, np.maximum.accumulate(np.sort(p) * [2, 1]))
    np.testing.assert_allclose(np.sort(table["p_holm"]), holm)


def test_the_report_writes_tables_figures_and_markdown(finished_study, report):  # noqa: F811
    path, tmp_path = report
    study = load(finished_study.file)
    cells = pd.read_csv(tmp_path / "cells.csv")
    assert len(cells) == 8 and bool(cells["complete"].all())
    assert {"cell", "arm", "env.params.sensor_noise", "seed"} <= set(cells.columns)
    assert not {"qd_score", "coverage", "max_fitness"} & set(cells.columns)  # no QD
    assert list(cells.columns[:7]) == [
        "cell",
        "arm",
        "env.params.sensor_noise",
        "seed",
        "heldout_mean",
        "heldout_ci_low",
        "heldout_ci_high",
    ]
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert list(summary.columns[:3]) == ["cell", "n", "heldout_mean_mean"]
    assert list(pd.read_csv(tmp_path / "summary.csv")["n"]) == [2] * 4
    assert len(pd.read_csv(tmp_path / "comparisons.csv")) == 4 * len(METRICS)
    text = path.read_text()
    assert "4 cells x 2 seeds = 8 runs (8 complete), in 2 compiled programs" in text
    assert "**Held-out final fitness**" in text
    assert "**Training: final mean fitness**" in text
    assert text.index("Held-out final fitness") < text.index("Training: best")
    for name in ("learning_curves", "final_fitness", "performance_profile"):
        assert f"({name}.png)" in text and (tmp_path / f"{name}.png").exists()
    assert cells_table(finished_study.out, study).shape[0] == 8

    # 2 seeds a cell: no interval anywhere, "n too small" in its place
    assert bool(summary["heldout_mean_ci_low"].isna().all())
    assert bool(summary["heldout_mean_iqm_ci_high"].isna().all())
    comparisons = pd.read_csv(tmp_path / "comparisons.csv")
    assert bool(comparisons["difference_ci_low"].isna().all())
    assert bool(comparisons["prob_improvement_ci_low"].isna().all())
    assert bool(comparisons["p_value"].notna().all())  # exact tests still apply
    held_out = text.split("**Held-out final fitness**", 1)[1].split("**Training")[0]
    rows = [
        x
        for x in held_out.splitlines()
        if x.startswith("| base") or x.startswith("| wide")
    ]
    assert len(rows) == 4 and all(r.count("[n too small]") == 2 for r in rows)
    assert f"Intervals need {MIN_RUNS_FOR_CI} runs or more" in text
    assert "stratified" not in text  # one task per cell: a plain bootstrap

    # the references, on the lifetimes each run held out
    refs = pd.read_csv(tmp_path / "references.csv")
    assert set(refs["reference"]) == {
        "random",
        "Braitenberg vehicle 2b",
        "told the source",
    }
    assert len(refs) == 2 * 2 * 3  # noise levels (variants) x seeds x references
    run = study.runs[0]
    built = build(run.experiment)
    direct = score_references(
        heldout_keys(built.key)[0],
        built.heldout_fitness,
        references(built.env, built.env_params),
        32,
    )
    ours = refs["cells"].str.split("; ").apply(lambda cells: run.cell.name in cells)
    mine = refs[(refs["seed"] == run.seed) & ours]
    assert list(mine["mean"]) == pytest.approx([d.result.mean for d in direct])
    assert {"no_memory_reference", "learner_reference", "normalised"} <= set(cells)
    assert np.all(np.isfinite(cells["no_memory_reference"].to_numpy()))
    # the oracle told where the source is sets 1; the vehicle 0
    np.testing.assert_allclose(
        cells["normalised"],
        (cells["heldout_mean"] - cells["no_memory_reference"])
        / (cells["learner_reference"] - cells["no_memory_reference"]),
    )
    np.testing.assert_allclose(
        cells["headroom"], cells["learner_reference"] - cells["no_memory_reference"]
    )
    # every comparison of held-out fitness weighs the task's room against the
    # arms' spread; training rows have none
    assert (
        comparisons.loc[comparisons["metric"] != "heldout_mean", "headroom"]
        .isna()
        .all()
    )
    for _, row in comparisons[comparisons["metric"] == "heldout_mean"].iterrows():
        both = cells[cells["cell"].isin([row["cell_a"], row["cell_b"]])]
        assert row["headroom"] == pytest.approx(both["headroom"].mean())
        spread = max(
            cells.loc[cells["cell"] == c, "heldout_mean"].std(ddof=1)
            for c in (row["cell_a"], row["cell_b"])
        )
        assert row["spread"] == pytest.approx(spread)
        assert row["little_room"] == (row["headroom"] < 3 * spread)
    assert "*Room*: the task's headroom" in text
    assert "## References" in text and "| Braitenberg vehicle 2b | no_memory |" in text
    flagged = summary[summary["below_no_memory"]]["cell"]
    for cell in flagged:
        assert f"**Below the best reference without memory:** `{cell}`" in text


def test_each_cell_states_its_samples_compute_and_curve_area(finished_study, report):  # noqa: F811
    path, to = report
    study = load(finished_study.file)
    cells = pd.read_csv(to / "cells.csv")
    summary = pd.read_csv(to / "summary.csv").set_index("cell")
    # every run recorded the backend it ran on, and so does its cell
    assert set(cells["platform"]) == {jax.default_backend()}
    assert set(summary["platform"]) == {jax.default_backend()}
    steps_per_generation = 8 * 40  # population x lifetime, one episode each
    assert set(cells["agent_steps"]) == {6 * steps_per_generation}
    for run in study.runs:
        row = cells[cells["run_dir"] == f"runs/{run.id}"].iloc[0]
        records = [
            json.loads(line)
            for line in (finished_study.out / row["run_dir"] / "metrics.jsonl")
            .read_text()
            .splitlines()
        ]
        curve = np.array(
            [r["mean"] for r in sorted(records, key=lambda r: r["generation"])]
        )
        assert curve.size == 6
        assert row["curve_auc"] == pytest.approx(curve.mean(), rel=1e-12)
        # every run spends the same steps: the step budget is the whole run
        assert row["curve_auc_steps"] == pytest.approx(curve.mean(), rel=1e-12)
        assert row["final_mean_fitness"] == pytest.approx(curve[-1])
    for cell, group in cells.groupby("cell"):
        got = summary.loc[cell]
        assert got["agent_steps_mean"] == group["agent_steps"].mean()
        assert got["wall_time_s_mean"] == pytest.approx(group["wall_time_s"].mean())
        assert got["curve_auc_mean"] == pytest.approx(group["curve_auc"].mean())
        assert np.isnan(got["curve_auc_ci_low"])  # 2 seeds: no interval
    assert {f"{m}_{s}" for m in CURVE_METRICS for s in ("mean", "iqm")} <= set(summary)

    text = path.read_text()
    section = text.split("## Samples and compute", 1)[1].split("\n## ", 1)[0]
    device = jax.default_backend().upper()
    assert f"| cell | n | agent steps / run | {device} s / run |" in section
    assert "AUC per agent step" not in section  # equal steps: the same figure
    for cell, row in summary.iterrows():
        line = next(x for x in section.splitlines() if x.startswith(f"| {cell} |"))
        assert line.startswith(
            f"| {cell} | 2 | 1,920 | {row['wall_time_s_mean']:.3g} | "
            f"{row['heldout_mean_mean']:.4g} | {row['curve_auc_mean']:.4g} "
            "[n too small] |"
        )


def test_figures_are_labelled_for_a_paper(finished_study):  # noqa: F811
    study = load(finished_study.file)
    bands = {k: curve_band(v) for k, v in curves(finished_study.out, study).items()}
    fig = plots.learning_curves(bands, len(study.seeds))
    (ax,) = fig.axes
    assert ax.get_xlabel() == "generation"
    assert ax.get_ylabel() == "population mean fitness"
    assert ax.get_title() == "Population mean fitness per generation"
    legend = ax.get_legend()
    # 2 seeds cannot support a CI: no band, and the legend says so
    assert legend.get_title().get_text() == "mean over 2 seeds (n too small for a CI)"
    assert [t.get_text() for t in legend.get_texts()] == [c.name for c in study.cells]
    assert len(ax.collections) == 0
    enough = {
        k: curve_band(np.tile(v, (SEEDS, 1))[:SEEDS])
        for k, v in curves(finished_study.out, study).items()
    }
    (ax,) = plots.learning_curves(enough, SEEDS).axes
    legend = ax.get_legend().get_title().get_text()
    assert legend == f"mean ± 95% CI over {SEEDS} seeds"
    assert len(ax.collections) == 4  # one CI band per cell

    cells = cells_table(finished_study.out, study)
    summary = summary_table(cells)
    fig = plots.final_fitness(cells, summary, list(METRICS.items()))
    assert [a.get_ylabel() for a in fig.axes] == list(METRICS.values())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [c.name for c in study.cells]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {
        "one run",
        "mean (n too small for a CI)",
    }
    fig = plots.final_fitness(CELLS, summary_table(CELLS), list(METRICS.items()))
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} == {
        "one run",
        "mean, 95% bootstrap CI",
    }

    fig = plots.performance_profile(cells, "heldout_mean", "held-out final fitness")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "held-out final fitness (τ)"
    assert ax.get_ylabel() == "fraction of runs with score > τ"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        c.name for c in study.cells
    ]
    assert ax.get_legend().get_title().get_text() == "pointwise 95% CI (Greenwood)"
    for line in ax.get_lines():  # a survival function: from 1 down to 0
        y = line.get_ydata()
        assert y[0] == 1.0 and y[-1] == 0.0 and np.all(np.diff(y) <= 0)


def test_a_cell_below_the_no_memory_reference_is_flagged():
    from eqxevo._app.study.reference_scores import reference_lines

    cells = CELLS.copy()
    means = cells.groupby("cell")["heldout_mean"].mean()
    last = STUDY.cells[-1].name
    # every cell 1 above its floor, but the last one 1 below it
    floor = {c: m - 1.0 if c != last else m + 1.0 for c, m in means.items()}
    cells["no_memory_reference"] = [floor[c] for c in cells["cell"]]
    cells["learner_reference"] = cells["no_memory_reference"] + 4.0
    cells["normalised"] = (cells["heldout_mean"] - cells["no_memory_reference"]) / 4
    summary = summary_table(cells).set_index("cell")
    assert list(summary.index[summary["below_no_memory"]]) == [last]
    for cell, group in cells.groupby("cell"):
        want = group["normalised"].mean()
        assert summary.loc[cell, "normalised_mean"] == pytest.approx(want)
    refs = pd.DataFrame(
        [
            {"variant": 0, "cells": "; ".join(means.index), "seed": s}
            | {"reference": name, "kind": kind, "mean": m}
            for s in range(5)
            for name, kind, m in (
                ("reflex", "no_memory", 1.0),
                ("learner", "learner", 5.0),
            )
        ]
    )
    text = "\n".join(reference_lines(refs, summary.reset_index()))
    assert "| reflex | no_memory | 1 | 5 |" in text
    assert text.count("**Below the best reference without memory:**") == 1
    assert f"`{last}` (held-out {summary.loc[last, 'heldout_mean_mean']:.4g}" in text


def test_heldout_columns_take_the_best_genome_where_there_is_no_mean():
    from eqxevo._app.study.runner import heldout_columns

    best = {"mean": 3.0, "ci_low": 2.0, "ci_high": 4.0, "std": 1.0, "episodes": 32}
    mean = {"mean": 5.0, "ci_low": 4.5, "ci_high": 5.5, "std": 0.5, "episodes": 32}
    with_mean = heldout_columns({"heldout": {"mean": mean, "best": best}})
    assert with_mean == {
        "heldout_mean": 5.0,
        "heldout_ci_low": 4.5,
        "heldout_ci_high": 5.5,
        "heldout_genome": "mean",
        "heldout_episodes": 32,
        "heldout_best_mean": 3.0,
    }
    # a population-based algorithm (SimpleGA, ...) has no search mean
    without = heldout_columns({"heldout": {"mean": None, "best": best}})
    assert without["heldout_genome"] == "best"
    assert (without["heldout_mean"], without["heldout_ci_high"]) == (3.0, 4.0)
    # a run not complete yet has no held-out figures
    assert set(heldout_columns({}).values()) == {None}
