"""eqxevo._app.study.stats against plain NumPy references."""

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from eqxevo._app.study.stats import (
    MIN_RUNS_FOR_CI,
    Comparison,
    iqm_interval,
    preregistered_tests,
    probability_of_improvement,
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


def test_preregistered_tests_are_one_sided_and_holm_corrected():
    rng = np.random.default_rng(1)
    runs = {
        "ff": rng.normal(80.0, 1.0, 10),
        "plastic-ff": rng.normal(86.0, 1.0, 10),
        "gru": rng.normal(86.0, 1.0, 10),
        "plastic-rnn": rng.normal(86.2, 1.0, 10),
    }
    comparisons = [
        Comparison("plastic-ff", "ff", "greater"),
        Comparison("plastic-rnn", "gru", "two-sided"),
        Comparison("ff", "plastic-ff", "greater"),
    ]
    rows = preregistered_tests(comparisons, runs, resamples=200)
    for row, c in zip(rows, comparisons, strict=True):
        a, b = runs[c.a], runs[c.b]
        # Welch's t from its formula
        se = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        assert row["welch_t"] == pytest.approx((a.mean() - b.mean()) / se)
        assert row["prob_improvement"] == pytest.approx(numpy_poi(a, b))
    assert rows[0]["welch_p"] < 1e-6 and rows[0]["mannwhitney_p"] < 1e-3
    assert rows[2]["welch_p"] > 0.999  # the declared direction is the wrong one
    for test in ("welch", "mannwhitney"):
        p = np.array([r[f"{test}_p"] for r in rows])
        holm = np.array([r[f"{test}_p_holm"] for r in rows])
        np.testing.assert_allclose(holm, numpy_holm(p), rtol=1e-12)


def test_a_side_with_one_run_has_no_test_and_stays_out_of_the_correction():
    runs = {
        "a": np.array([1.0]),
        "b": np.array([0.0, 0.5, 0.2]),
        "c": np.array([1.0, 1.2, 0.9]),
    }
    rows = preregistered_tests(
        [Comparison("a", "b"), Comparison("c", "b")], runs, resamples=50
    )
    assert math.isnan(rows[0]["welch_p"]) and math.isnan(rows[0]["welch_p_holm"])
    # alone in the correction, the other p-value is its own Holm value
    assert rows[1]["welch_p_holm"] == pytest.approx(rows[1]["welch_p"])
