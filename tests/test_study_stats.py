"""eqxevo._app.study.stats against plain NumPy references."""

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_ind

from eqxevo._app.study.checks import Comparison
from eqxevo._app.study.intervals import (
    MIN_RUNS_FOR_CI,
    RESAMPLES,
    SEED,
    iqm_interval,
    probability_of_improvement,
)
from eqxevo._app.study.stats import (
    ALPHA,
    TESTS,
    preregistered_tests,
    smallest_p,
    undecidable,
    verdict,
)

scores = st.lists(
    st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    min_size=1,
    max_size=12,
)


def numpy_iqm(x: np.ndarray) -> float:
    # the mean of the middle half: a quarter of the runs cut from each end
    x = np.sort(x)
    cut = int(0.25 * x.size)
    return float(x[cut : x.size - cut].mean())


def numpy_poi(a: np.ndarray, b: np.ndarray) -> float:
    wins = (a[:, None] > b[None, :]).sum() + 0.5 * (a[:, None] == b[None, :]).sum()
    return float(wins / (a.size * b.size))


def numpy_holm(p: np.ndarray) -> np.ndarray:
    order = np.argsort(p)
    m = p.size
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


@given(scores, scores)
def test_point_estimates_equal_their_numpy_references(a, b):
    a, b = np.asarray(a), np.asarray(b)
    centre = iqm_interval(a, resamples=50)[0]
    assert centre == pytest.approx(numpy_iqm(a), rel=1e-12, abs=1e-9)
    p = probability_of_improvement(a, b, resamples=50)[0]
    assert p == pytest.approx(numpy_poi(a, b))


def test_intervals_need_enough_runs_and_hold_the_estimate():
    rng = np.random.default_rng(0)
    few = rng.normal(size=MIN_RUNS_FOR_CI - 1)
    enough = rng.normal(size=MIN_RUNS_FOR_CI + 5)
    assert all(map(math.isnan, iqm_interval(few)[1:]))
    assert all(map(math.isnan, probability_of_improvement(few, enough)[1:]))
    centre, low, high = iqm_interval(enough, resamples=500)
    assert low <= centre <= high and low < high
    p, low, high = probability_of_improvement(enough + 1.0, enough, resamples=500)
    assert 0.0 <= low <= p <= high <= 1.0
    # a fixed bootstrap seed, and NumPy's global generator left as it was
    state = np.random.get_state(legacy=False)["state"]["key"].copy()
    assert iqm_interval(enough, resamples=500) == (
        centre,
        *iqm_interval(enough, 500)[1:],
    )
    after = np.random.get_state(legacy=False)["state"]["key"]
    np.testing.assert_array_equal(after, state)


def numpy_bootstrap_p(a: np.ndarray, b: np.ndarray, alternative: str) -> float:
    # the percentile-bootstrap test of mean A - mean B, as docs/studies.md states it
    rng = np.random.default_rng(SEED)
    ia = rng.choice(a, (RESAMPLES, a.size)).mean(axis=1)
    ib = rng.choice(b, (RESAMPLES, b.size)).mean(axis=1)
    d = ia - ib
    above = (1 + np.sum(d <= 0)) / (RESAMPLES + 1)
    below = (1 + np.sum(d >= 0)) / (RESAMPLES + 1)
    return {"greater": above, "less": below}.get(
        alternative, min(1.0, 2 * min(above, below))
    )


RUNS = {
    "ff": np.random.default_rng(1).normal(80.0, 1.0, 10),
    "plastic-ff": np.random.default_rng(2).normal(86.0, 1.0, 10),
    "gru": np.random.default_rng(3).normal(86.0, 1.0, 10),
    "plastic-rnn": np.random.default_rng(4).normal(86.2, 1.0, 10),
}


@pytest.mark.parametrize("test", ["welch", "mwu", "bootstrap"])
def test_each_declared_test_equals_its_library_and_holm_corrects_the_set(test):
    comparisons = [
        Comparison("plastic-ff", "ff", test, "greater"),
        Comparison("plastic-rnn", "gru", test, "two-sided"),
        Comparison("ff", "plastic-ff", test, "greater"),
        Comparison("ff", "gru", test, "less"),
    ]
    rows = preregistered_tests(comparisons, RUNS, resamples=200)
    for row, c in zip(rows, comparisons, strict=True):
        a, b = RUNS[c.a], RUNS[c.b]
        if test == "welch":
            want = stats.ttest_ind(a, b, equal_var=False, alternative=c.alternative)
            se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
            assert row["statistic"] == pytest.approx((a.mean() - b.mean()) / se)
            assert row["p"] == pytest.approx(want.pvalue, rel=1e-12)
        elif test == "mwu":
            want = stats.mannwhitneyu(a, b, alternative=c.alternative)
            assert row["statistic"] == want.statistic
            assert row["p"] == pytest.approx(want.pvalue, rel=1e-12)
        else:
            assert row["statistic"] == pytest.approx(a.mean() - b.mean())
            assert row["p"] == pytest.approx(numpy_bootstrap_p(a, b, c.alternative))
        assert row["prob_improvement"] == pytest.approx(numpy_poi(a, b))
    p = np.array([r["p"] for r in rows])
    holm = np.array([r["p_holm"] for r in rows])
    np.testing.assert_allclose(holm, numpy_holm(p), rtol=1e-12)
    np.testing.assert_allclose(holm, multipletests(p, method="holm")[1], rtol=1e-12)
    # the verdicts: what each declared test supports at ALPHA after Holm
    assert rows[0]["verdict"] == "better"
    assert rows[2]["verdict"] == "undecided"  # the declared direction is wrong
    assert rows[3]["verdict"] == "worse"


@pytest.mark.parametrize("test", ["welch", "mwu", "bootstrap"])
def test_an_equivalence_claim_is_two_one_sided_tests_within_the_margin(test):
    a, b = RUNS["gru"], RUNS["plastic-rnn"]
    margin = 2.5
    near = Comparison("gru", "plastic-rnn", test, "equivalent", margin)
    tight = Comparison("gru", "plastic-rnn", test, "equivalent", 0.05)
    far = Comparison("ff", "gru", test, "equivalent", margin)
    rows = preregistered_tests([near, tight, far], RUNS, resamples=200)
    if test == "welch":
        want = ttost_ind(a, b, -margin, margin, usevar="unequal")[0]
    elif test == "mwu":
        want = max(
            stats.mannwhitneyu(a + margin, b, alternative="greater").pvalue,
            stats.mannwhitneyu(a - margin, b, alternative="less").pvalue,
        )
    else:
        want = max(
            numpy_bootstrap_p(a + margin, b, "greater"),
            numpy_bootstrap_p(a - margin, b, "less"),
        )
    assert rows[0]["p"] == pytest.approx(want, rel=1e-10)
    assert [r["verdict"] for r in rows] == ["equivalent", "undecided", "undecided"]


@pytest.mark.parametrize("n_a, n_b", [(2, 2), (3, 3), (4, 5), (5, 5)])
def test_the_smallest_p_is_what_the_test_gives_on_fully_separated_runs(n_a, n_b):
    # every run of A above every run of B: the most extreme data there is
    a, b = np.arange(n_a) + 100.0, np.arange(n_b) * 1.0
    for alternative in ("greater", "two-sided"):
        want = stats.mannwhitneyu(a, b, alternative=alternative).pvalue
        assert smallest_p("mwu", alternative, n_a, n_b) == pytest.approx(want)
    assert smallest_p("mwu", "equivalent", n_a, n_b) == smallest_p(
        "mwu", "greater", n_a, n_b
    )
    assert smallest_p("bootstrap", "greater", n_a, n_b) == 1 / (RESAMPLES + 1)
    assert smallest_p("welch", "less", n_a, n_b) == 0.0
    assert smallest_p("welch", "greater", 1, n_b) == 1.0  # no test at all
    lines = undecidable([Comparison("x", "y", "mwu", "greater")], n_a)
    assert bool(lines) == (1 / math.comb(2 * n_a, n_a) >= ALPHA)


@pytest.mark.parametrize("test", ["welch", "mwu", "bootstrap"])
def test_an_undecidable_line_names_the_test_as_the_report_does(test):
    (line,) = undecidable([Comparison("x", "y", test, "greater")], 1)
    assert line.startswith(f"study.compare[0] (x vs y): {TESTS[test][0]} with 1 seed ")


def test_verdicts_say_only_what_the_test_supports():
    assert verdict("greater", 0.01, -3.0) == "better"  # the test's direction rules
    assert verdict("less", 0.01, 3.0) == "worse"
    assert verdict("two-sided", 0.01, 3.0) == "better"
    assert verdict("two-sided", 0.01, -3.0) == "worse"
    assert verdict("equivalent", 0.01, 0.2) == "equivalent"
    assert verdict("greater", ALPHA, 9.0) == "undecided"  # p < ALPHA, strictly
    assert verdict("two-sided", math.nan, 9.0) == "undecided"


def test_a_side_with_one_run_has_no_test_and_stays_out_of_the_correction():
    runs = {
        "a": np.array([1.0]),
        "b": np.array([0.0, 0.5, 0.2]),
        "c": np.array([1.0, 1.2, 0.9]),
    }
    rows = preregistered_tests(
        [Comparison("a", "b", "welch"), Comparison("c", "b", "welch")],
        runs,
        resamples=50,
    )
    assert math.isnan(rows[0]["p"]) and math.isnan(rows[0]["p_holm"])
    assert rows[0]["verdict"] == "undecided"
    # alone in the correction, the other p-value is its own Holm value
    assert rows[1]["p_holm"] == pytest.approx(rows[1]["p"])
