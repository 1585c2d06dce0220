"""A study's statistics, every one from a kept library (docs/studies.md, "The report").

- Per cell, the interquartile mean (IQM) of the runs' scores with a 95%
  stratified-bootstrap interval: rliable (Agarwal et al. 2021, "Deep
  reinforcement learning at the edge of the statistical precipice").
- Per pair of cells, the probability of improvement P(A > B) with its
  stratified-bootstrap interval: rliable.
- The mean, differences of means and learning-curve bands: scipy's percentile
  bootstrap (`scipy_interval`).
- Per declared comparison (`[[study.compare]]`): its one declared test (Welch's
  t or Mann-Whitney U from scipy, or a bootstrap of the difference of means),
  in the declared direction or as two one-sided tests within a margin (TOST),
  Holm-corrected over the declared comparisons (statsmodels), and the verdict
  that test supports at `ALPHA`.

No interval is given for fewer than `MIN_RUNS_FOR_CI` runs (see there).
"""

import contextlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jaxtyping import Float

from .checks import Comparison
from .spec import require

CONFIDENCE = 0.95
RESAMPLES = 9999
SEED = 0
"""Bootstrap resamples (read at each call: a function's `resamples=None`) and
their seed: a report is reproducible. rliable's resampling loop is Python: an
IQM interval of 9,999 resamples takes about 2 s, a P(A > B) interval 5 s."""

ALPHA = 0.05
"""The level every declared comparison is decided at, after Holm's correction."""

CURVE_RESAMPLES = 2000
"""Resamples for a fitness curve's band: one interval per generation, drawn on a
plot, not read as a figure."""

MIN_RUNS_FOR_CI = 5
"""Fewer runs than this give no interval ("n too small" in tables, no band or
error bar in figures). A bootstrap interval resamples the runs themselves: from
2 runs every resample's mean lies between them, so a "95% interval" is just
their min-max. Measured coverage of a nominal 95% percentile-bootstrap interval
of a mean (normal samples, 4000 x 2000 resamples): 51% at n = 2, 74% at 3, 79%
at 4, 84% at 5, 90% at 10."""


def enough_runs(*samples: Sequence[float] | np.ndarray) -> bool:
    """Whether every sample has at least `MIN_RUNS_FOR_CI` runs."""
    return all(len(s) >= MIN_RUNS_FOR_CI for s in samples)


def _rliable(purpose: str) -> tuple[Any, Any]:
    library = require("rliable.library", purpose)
    metrics = require("rliable.metrics", purpose)
    return library, metrics


@contextlib.contextmanager
def _seeded() -> Any:
    """rliable 1.2 draws its resamples from NumPy's global generator
    (`np.random.choice` in `update_indices`; its `random_state` argument does
    not reach them): seeded with `SEED` here, and put back as it was after."""
    saved = np.random.get_state()
    np.random.seed(SEED)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _column(values: Any) -> np.ndarray:
    """Scores as rliable takes them: `(runs, tasks)`, one task."""
    return np.asarray(values, np.float64).reshape(-1, 1)


def scipy_interval(
    samples: tuple[Any, ...], statistic: Any, **options: Any
) -> tuple[Any, Any]:
    """`(low, high)`: the 95% percentile-bootstrap CI of `statistic` over
    `samples` (`scipy.stats.bootstrap`, `RESAMPLES` resamples unless
    `n_resamples` is given, from a fixed seed); the caller checks
    `enough_runs`."""
    from scipy import stats

    ci = stats.bootstrap(
        samples,
        statistic,
        confidence_level=CONFIDENCE,
        n_resamples=options.pop("n_resamples", RESAMPLES),
        method="percentile",
        rng=np.random.default_rng(SEED),
        **options,
    ).confidence_interval
    return ci.low, ci.high


def mean_interval(values: Float[np.ndarray, " runs"]) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean (NaN with fewer than
    `MIN_RUNS_FOR_CI` values)."""
    x = np.asarray(values, np.float64)
    if not enough_runs(x):
        return math.nan, math.nan
    low, high = scipy_interval((x,), np.mean)
    return float(low), float(high)


def curve_band(
    values: Float[np.ndarray, "seeds generations"],
) -> tuple[
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
]:
    """Mean over seeds per generation and its 95% bootstrap CI (NaN bands with
    fewer than `MIN_RUNS_FOR_CI` seeds, or where a seed has not reached the
    generation)."""
    mean = np.nanmean(values, axis=0) if values.size else values
    low = np.full(values.shape[1], np.nan)
    high = np.full(values.shape[1], np.nan)
    complete = ~np.isnan(values).any(axis=0)
    if values.shape[0] >= MIN_RUNS_FOR_CI and complete.any():
        low[complete], high[complete] = scipy_interval(
            (values[:, complete],), np.mean, axis=0, n_resamples=CURVE_RESAMPLES
        )
    return mean, low, high


def iqm_interval(
    values: Float[np.ndarray, " runs"], resamples: int | None = None
) -> tuple[float, float, float]:
    """`(iqm, low, high)`: the interquartile mean of the runs' scores and its 95%
    stratified-bootstrap interval (NaN bounds with fewer than `MIN_RUNS_FOR_CI`
    runs; NaN IQM with none)."""
    library, metrics = _rliable("the IQM of a study's runs")
    x = _column(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    centre = float(metrics.aggregate_iqm(x))
    if not enough_runs(x):
        return centre, math.nan, math.nan
    with _seeded():
        _, intervals = library.get_interval_estimates(
            {"cell": x},
            lambda scores: np.array([metrics.aggregate_iqm(scores)]),
            reps=RESAMPLES if resamples is None else resamples,
            confidence_interval_size=CONFIDENCE,
        )
    low, high = intervals["cell"][:, 0]
    return centre, float(low), float(high)


def probability_of_improvement(
    a: Float[np.ndarray, " runs_a"],
    b: Float[np.ndarray, " runs_b"],
    resamples: int | None = None,
) -> tuple[float, float, float]:
    """`(p, low, high)`: P(A > B), the probability that a run of A scores above a
    run of B (ties count one half), with its 95% stratified-bootstrap interval
    (NaN bounds with fewer than `MIN_RUNS_FOR_CI` runs in either)."""
    library, metrics = _rliable("the probability of improvement")
    x, y = _column(a), _column(b)
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan, math.nan
    p = float(metrics.probability_of_improvement(x, y))
    if not enough_runs(x, y):
        return p, math.nan, math.nan
    with _seeded():
        _, intervals = library.get_interval_estimates(
            {"pair": (x, y)},
            metrics.probability_of_improvement,
            reps=RESAMPLES if resamples is None else resamples,
            confidence_interval_size=CONFIDENCE,
        )
    low, high = np.ravel(intervals["pair"])
    return p, float(low), float(high)


def _test(
    test: str, alternative: str, a: np.ndarray, b: np.ndarray, shift: float = 0.0
) -> tuple[float, float]:
    """`(statistic, p)` of one declared test of A + `shift` against B in the
    direction `alternative` ("greater", "less" or "two-sided")."""
    from scipy import stats

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


_NAMES = {"welch": "Welch's t", "mwu": "Mann-Whitney U", "bootstrap": "bootstrap"}


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
                f"study.compare[{i}] ({c.a} vs {c.b}): {_NAMES[c.test]} with "
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
    scores: Mapping[str, Float[np.ndarray, " runs"]],
    resamples: int | None = None,
) -> list[dict[str, Any]]:
    """One row per declared comparison: n and mean of each side, P(A > B) with
    its interval, the declared test's statistic and p, p Holm-corrected over the
    comparisons, and the verdict (`verdict`). NaN test and "undecided" where a
    side has fewer than 2 runs; a NaN p-value is left out of the correction.

    An equivalence comparison (alternative "equivalent", margin m) is two
    one-sided tests (TOST) of the declared kind: A + m > B and A - m < B; its p
    is the larger of the two, its statistic the lower test's.

    `scores[cell]` holds each run's score (one per seed).
    """
    multitest = require("statsmodels.stats.multitest", "Holm's correction")
    rows = []
    for c in comparisons:
        a = np.asarray(scores[c.a], np.float64)
        b = np.asarray(scores[c.b], np.float64)
        poi, poi_low, poi_high = probability_of_improvement(a, b, resamples)
        row: dict[str, Any] = {
            "a": c.a,
            "b": c.b,
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
    "CONFIDENCE",
    "CURVE_RESAMPLES",
    "MIN_RUNS_FOR_CI",
    "RESAMPLES",
    "SEED",
    "curve_band",
    "enough_runs",
    "iqm_interval",
    "mean_interval",
    "preregistered_tests",
    "probability_of_improvement",
    "scipy_interval",
    "smallest_p",
    "undecidable",
    "verdict",
]
