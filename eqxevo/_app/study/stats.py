"""A study's declared tests (`[[study.compare]]`): Welch's t, Mann-Whitney U or a
bootstrap of the difference of means, in the declared direction or as TOST,
Holm-corrected (statsmodels), and their verdicts (docs/studies.md, "The report").
"""

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jaxtyping import Float
from scipy import stats

from .checks import Comparison
from .intervals import RESAMPLES, SEED, probability_of_improvement
from .spec import require

ALPHA = 0.05
"""The level every declared comparison is decided at, after Holm's correction."""

TESTS: dict[str, tuple[str, str]] = {
    "welch": ("Welch's t", "t"),
    "mwu": ("Mann-Whitney U", "U"),
    "bootstrap": ("bootstrap of the difference of means", "d"),
}
"""Each declared test (`[[study.compare]]`'s `test`): its name in the report and
in `undecidable`'s lines, and the symbol of its statistic."""


def _test(
    test: str, alternative: str, a: np.ndarray, b: np.ndarray, shift: float = 0.0
) -> tuple[float, float]:
    """`(statistic, p)` of one declared test of A + `shift` against B in the
    direction `alternative` ("greater", "less" or "two-sided")."""
    if test == "welch":
        r: Any = stats.ttest_ind(a + shift, b, equal_var=False, alternative=alternative)
        return float(r.statistic), float(r.pvalue)
    if test == "mwu":
        r = stats.mannwhitneyu(a + shift, b, alternative=alternative)
        return float(r.statistic), float(r.pvalue)
    return _bootstrap_test(alternative, a + shift, b)


def _bootstrap_test(
    alternative: str, a: np.ndarray, b: np.ndarray
) -> tuple[float, float]:
    """`(mean A - mean B, p)`: the percentile-bootstrap test of the difference of
    means. Each side is resampled on its own (`RESAMPLES` times from `SEED`);
    for "greater" p = (1 + #{d* <= 0}) / (B + 1), the share of resampled
    differences that do not exceed 0 (mirrored for "less"; twice the smaller of
    the two for "two-sided", at most 1)."""
    rng = np.random.default_rng(SEED)
    d = rng.choice(a, (RESAMPLES, a.size)).mean(axis=1) - rng.choice(
        b, (RESAMPLES, b.size)
    ).mean(axis=1)
    above = (1 + np.count_nonzero(d <= 0)) / (RESAMPLES + 1)
    below = (1 + np.count_nonzero(d >= 0)) / (RESAMPLES + 1)
    p = {"greater": above, "less": below}.get(
        alternative, min(1.0, 2 * min(above, below))
    )
    return float(a.mean() - b.mean()), float(p)


def smallest_p(test: str, alternative: str, n_a: int, n_b: int) -> float:
    """The smallest p-value the declared test can give with `n_a` and `n_b` runs,
    whatever the scores: 1 with fewer than 2 a side (no test); Mann-Whitney U's
    exact 1 / C(n_a + n_b, n_a) when every run of one side beats every run of
    the other (doubled for "two-sided"; the largest of two such tests for
    "equivalent"); the bootstrap's 1 / (`RESAMPLES` + 1); Welch's t, 0."""
    if n_a < 2 or n_b < 2:
        return 1.0
    if test == "mwu":
        one_sided = 1.0 / math.comb(n_a + n_b, n_a)
        return min(1.0, 2 * one_sided) if alternative == "two-sided" else one_sided
    if test == "bootstrap":
        return 1.0 / (RESAMPLES + 1)
    return 0.0


def undecidable(comparisons: Sequence[Comparison], runs: int) -> list[str]:
    """One line for each declared comparison that cannot reach p < `ALPHA` with
    `runs` runs a side, whatever the scores (`smallest_p`)."""
    lines = []
    for i, c in enumerate(comparisons):
        p = smallest_p(c.test, c.alternative, runs, runs)
        if p >= ALPHA:
            lines.append(
                f"study.compare[{i}] ({c.a} vs {c.b}): {TESTS[c.test][0]} with "
                f"{runs} seed{'s' if runs != 1 else ''} a side cannot reach "
                f"p < {ALPHA} (its smallest p is {p:.3g}); add seeds or declare "
                "another test"
            )
    return lines


def verdict(alternative: str, p_holm: float, difference: float) -> str:
    """What the declared test supports at `ALPHA` after Holm's correction:
    "better", "worse", "equivalent" (within the margin) or "undecided"."""
    if not p_holm < ALPHA:  # NaN included: no test
        return "undecided"
    if alternative == "equivalent":
        return "equivalent"
    if alternative == "greater" or (alternative == "two-sided" and difference > 0):
        return "better"
    return "worse"


def preregistered_tests(
    comparisons: Sequence[Comparison],
    scores: Mapping[Any, Float[np.ndarray, " runs"]],
    resamples: int | None = None,
) -> list[dict[str, Any]]:
    """One row per declared comparison: n and mean of each side, P(A > B) with
    its interval, the declared test's statistic and p, p Holm-corrected over the
    comparisons, and the verdict (`verdict`). NaN test and "undecided" where a
    side has fewer than 2 runs; a NaN p-value is left out of the correction.

    An equivalence comparison (alternative "equivalent", margin m) is two
    one-sided tests (TOST) of the declared kind: A + m > B and A - m < B; its p
    is the larger of the two, its statistic the lower test's.

    `scores[cell, metric]` (or `scores[cell]`) holds each run's score of the
    comparison's metric (one per seed).
    """
    multitest = require("statsmodels.stats.multitest", "Holm's correction")
    rows = []
    for c in comparisons:
        a, b = (
            np.asarray(scores.get((side, c.metric), scores.get(side)), np.float64)
            for side in (c.a, c.b)
        )
        poi, poi_low, poi_high = probability_of_improvement(a, b, resamples)
        row: dict[str, Any] = {
            "a": c.a,
            "b": c.b,
            "metric": c.metric,
            "test": c.test,
            "alternative": c.alternative,
            "margin": math.nan if c.margin is None else c.margin,
            "n_a": a.size,
            "n_b": b.size,
            "mean_a": float(a.mean()) if a.size else math.nan,
            "mean_b": float(b.mean()) if b.size else math.nan,
            "prob_improvement": poi,
            "prob_improvement_ci_low": poi_low,
            "prob_improvement_ci_high": poi_high,
            "statistic": math.nan,
            "p": math.nan,
        }
        if a.size >= 2 and b.size >= 2:
            if c.alternative == "equivalent":
                assert c.margin is not None  # parse_compare's rule
                low = _test(c.test, "greater", a, b, c.margin)
                high = _test(c.test, "less", a, b, -c.margin)
                row |= {"statistic": low[0], "p": max(low[1], high[1])}
            else:
                statistic, p = _test(c.test, c.alternative, a, b)
                row |= {"statistic": statistic, "p": p}
        rows.append(row)
    p = np.array([r["p"] for r in rows], np.float64)
    adjusted = np.full_like(p, math.nan)
    finite = np.isfinite(p)
    if finite.any():
        adjusted[finite] = multitest.multipletests(p[finite], method="holm")[1]
    for row, value in zip(rows, adjusted, strict=True):
        row["p_holm"] = float(value)
        row["verdict"] = verdict(
            row["alternative"], row["p_holm"], row["mean_a"] - row["mean_b"]
        )
    return rows


__all__ = [
    "ALPHA",
    "TESTS",
    "preregistered_tests",
    "smallest_p",
    "undecidable",
    "verdict",
]
