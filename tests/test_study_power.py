"""Power before running (eqxevo._app.study.power): the seeds a declared comparison
needs, against statsmodels and against a simulation of the tests themselves."""

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestIndPower
from statsmodels.stats.weightstats import ttost_ind

from eqxevo._app.study.checks import Comparison
from eqxevo._app.study.power import (
    MAX_SEEDS,
    MWU_EFFICIENCY,
    POWER,
    power_lines,
    seeds_needed,
    tost_power,
)
from eqxevo._app.study.stats import smallest_p


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
@pytest.mark.parametrize(("effect", "sd_a", "sd_b"), [(1.0, 1.0, 1.0), (2.0, 1.5, 3.0)])
def test_welch_and_bootstrap_seeds_equal_statsmodels(alternative, effect, sd_a, sd_b):
    d = effect / math.sqrt((sd_a**2 + sd_b**2) / 2)
    n = TTestIndPower().solve_power(
        effect_size=d,
        alpha=0.05,
        power=POWER,
        alternative="two-sided" if alternative == "two-sided" else "larger",
    )
    for test in ("welch", "bootstrap"):
        comparison = Comparison("a", "b", test, alternative, effect=effect)
        got = seeds_needed(comparison, sd_a, sd_b, 0.05)
        assert got == math.ceil(n)
        # and the t test has that power there, not one seed earlier
        power = TTestIndPower().power
        alt = "two-sided" if alternative == "two-sided" else "larger"
        assert power(d, got, 0.05, alternative=alt) >= POWER
        assert power(d, got - 1, 0.05, alternative=alt) < POWER


def test_mann_whitney_needs_the_t_seeds_over_its_efficiency_and_enough_to_decide():
    comparison = Comparison("a", "b", "mwu", "greater", effect=1.0)
    welch = seeds_needed(Comparison("a", "b", "welch", effect=1.0), 1.0, 1.0, 0.05)
    assert welch is not None
    assert seeds_needed(comparison, 1.0, 1.0, 0.05) == math.ceil(welch / MWU_EFFICIENCY)
    huge = Comparison("a", "b", "mwu", "two-sided", effect=100.0)
    n = seeds_needed(huge, 1.0, 1.0, 0.05)
    assert smallest_p("mwu", "two-sided", n, n) < 0.05
    assert smallest_p("mwu", "two-sided", n - 1, n - 1) >= 0.05


def test_tost_power_matches_a_simulation_of_statsmodels_ttost():
    # At the seeds the plan asks for, TOST (statsmodels) decides "equivalent"
    # about as often as the formula says, for a true difference of 0.
    comparison = Comparison("a", "b", "welch", "equivalent", margin=1.0)
    n = seeds_needed(comparison, 1.0, 1.0, 0.05)
    assert n is not None
    assert tost_power(n, 1.0, 0.05) >= POWER > tost_power(n - 1, 1.0, 0.05)
    rng = np.random.default_rng(0)
    reps = 1500
    wins = 0
    for _ in range(reps):
        a, b = rng.normal(0, 1, n), rng.normal(0, 1, n)
        p = ttost_ind(a, b, -1.0, 1.0, usevar="pooled")[0]
        wins += p < 0.05
    simulated = wins / reps
    assert abs(simulated - tost_power(n, 1.0, 0.05)) < 0.04, simulated


def test_tost_power_against_a_noncentral_t_reference():
    # Two one-sided tests at a true difference 0: reject both when
    # |mean diff| < margin - t se; with se known it is a normal probability.
    # For large n the formula approaches 2 Phi(margin/se - z) - 1.
    n, d = 400, 0.25
    se = math.sqrt(2 / n)
    normal = 2 * stats.norm.cdf(d / se - stats.norm.ppf(0.95)) - 1
    assert tost_power(n, d, 0.05) == pytest.approx(normal, abs=5e-3)
    assert tost_power(1, d, 0.05) == 0.0


def test_no_effect_and_effects_beyond_reach():
    assert seeds_needed(Comparison("a", "b", "welch"), 1.0, 1.0, 0.05) is None
    tiny = Comparison("a", "b", "welch", effect=1e-6)
    assert seeds_needed(tiny, 1.0, 1.0, 0.05) == MAX_SEEDS + 1
    exact = Comparison("a", "b", "welch", effect=1.0)
    assert seeds_needed(exact, 0.0, 0.0, 0.05) == 2  # no spread at all
    rows = [
        {
            "compare": 0,
            "a": "x",
            "b": "y",
            "test": "welch",
            "alternative": "greater",
            "effect": None,
            "values": "{}",
            "sd_a": 1.0,
            "sd_b": 1.0,
            "tuning_seeds": 3,
            "alpha": 0.05,
            "seeds_needed": None,
            "seeds": 10,
        },
        {
            "compare": 1,
            "a": "x",
            "b": "y",
            "test": "welch",
            "alternative": "greater",
            "effect": 1.0,
            "values": "{}",
            "sd_a": 1.0,
            "sd_b": 1.0,
            "tuning_seeds": 3,
            "alpha": 0.025,
            "seeds_needed": 17,
            "seeds": 10,
        },
    ]
    first, second = power_lines(rows)
    assert "no effect declared; add effect =" in first
    assert second.endswith(
        "17 seeds per arm for power 0.8 at alpha 0.025; the study has 10: too few"
    )
