import numpy as np
import pandas as pd
import pytest
from scipy import stats
from study_fixtures import finished_study  # noqa: F401

from eqxevo.study import load, plots
from eqxevo.study.report import (
    CONFIDENCE,
    METRICS,
    RESAMPLES,
    SEED,
    cells_table,
    comparisons_table,
    curve_band,
    curves,
    summary_table,
    write_report,
)
from eqxevo.study.spec import from_dict

# Fixed data: two arms x two noise levels, 5 seeds each.
RNG = np.random.default_rng(42)
STUDY = from_dict(
    {
        "study": {
            "name": "fixed",
            "seeds": 5,
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
        for seed in range(5)
    ]
)


SCIPY = {"confidence_level": CONFIDENCE, "n_resamples": RESAMPLES}


def _scipy_ci(*samples, statistic):
    rng = np.random.default_rng(SEED)
    ci = stats.bootstrap(samples, statistic, method="percentile", rng=rng, **SCIPY)
    return ci.confidence_interval


def test_summary_statistics_match_numpy_and_scipy_on_fixed_data():
    summary = summary_table(CELLS).set_index("cell")
    assert list(summary.index) == [c.name for c in STUDY.cells]
    for cell, group in CELLS.groupby("cell"):
        row = summary.loc[cell]
        assert row["n"] == 5
        for metric in METRICS:
            x = group[metric].to_numpy()
            assert row[f"{metric}_mean"] == pytest.approx(np.mean(x), rel=1e-12)
            assert row[f"{metric}_std"] == pytest.approx(np.std(x, ddof=1), rel=1e-12)
            ci = _scipy_ci(x, statistic=np.mean)
            assert row[f"{metric}_ci_low"] == pytest.approx(ci.low, rel=1e-12)
            assert row[f"{metric}_ci_high"] == pytest.approx(ci.high, rel=1e-12)
            # IQM: scipy's 25%-trimmed mean, and its bootstrap CI
            iqm = stats.trim_mean(x, 0.25)
            assert row[f"{metric}_iqm"] == pytest.approx(iqm, rel=1e-12)
            ci = _scipy_ci(
                x, statistic=lambda v, axis: stats.trim_mean(v, 0.25, axis=axis)
            )
            assert row[f"{metric}_iqm_ci_low"] == pytest.approx(ci.low, rel=1e-12)
            assert row[f"{metric}_iqm_ci_high"] == pytest.approx(ci.high, rel=1e-12)


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
        assert row["prob_improvement"] == pytest.approx(greater / 25, rel=1e-12)
        ci = _scipy_ci(
            xa,
            xb,
            statistic=lambda x, y, axis: (
                stats.mannwhitneyu(x, y, axis=axis).statistic / 25
            ),
        )
        assert row["prob_improvement_ci_low"] == pytest.approx(ci.low, rel=1e-12)
        assert row["prob_improvement_ci_high"] == pytest.approx(ci.high, rel=1e-12)
    for metric in METRICS:
        rows = table[table["metric"] == metric]
        adjusted = stats.false_discovery_control(rows["p_value"], method="bh")
        np.testing.assert_allclose(rows["p_adjusted"], adjusted, rtol=1e-12)


def test_curve_band_is_the_mean_and_a_bootstrap_ci_per_generation():
    values = RNG.normal(size=(5, 7))
    values[2, 6] = np.nan  # a seed that has not reached the last generation
    mean, low, high = curve_band(values)
    np.testing.assert_allclose(mean, np.nanmean(values, axis=0))
    assert np.isnan(low[6]) and np.isnan(high[6])
    assert np.all(low[:6] <= mean[:6]) and np.all(mean[:6] <= high[:6])


def test_the_report_writes_tables_figures_and_markdown(finished_study, tmp_path):  # noqa: F811
    path = write_report(finished_study.out, tmp_path)
    study = load(finished_study.file)
    cells = pd.read_csv(tmp_path / "cells.csv")
    assert len(cells) == 8 and bool(cells["complete"].all())
    assert {"cell", "arm", "env.params.sensor_noise", "seed"} <= set(cells.columns)
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


def test_figures_are_labelled_for_a_paper(finished_study):  # noqa: F811
    study = load(finished_study.file)
    bands = {k: curve_band(v) for k, v in curves(finished_study.out, study).items()}
    fig = plots.learning_curves(bands, len(study.seeds))
    (ax,) = fig.axes
    assert ax.get_xlabel() == "generation"
    assert ax.get_ylabel() == "population mean fitness"
    assert ax.get_title() == "Population mean fitness per generation"
    legend = ax.get_legend()
    assert legend.get_title().get_text() == "mean ± 95% CI over 2 seeds"
    assert [t.get_text() for t in legend.get_texts()] == [c.name for c in study.cells]
    assert len(ax.collections) == 4  # one CI band per cell

    cells = cells_table(finished_study.out, study)
    summary = summary_table(cells)
    fig = plots.final_fitness(cells, summary, list(METRICS.items()))
    assert [a.get_ylabel() for a in fig.axes] == list(METRICS.values())
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [c.name for c in study.cells]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {
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


def test_heldout_columns_take_the_best_genome_where_there_is_no_mean():
    from eqxevo.study.report import heldout_columns

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
