"""A study's statistics, every one from a kept library (docs/studies.md, "The report").

- Per cell, the interquartile mean (IQM) of the runs' scores with a 95%
  stratified-bootstrap interval: rliable (Agarwal et al. 2021, "Deep
  reinforcement learning at the edge of the statistical precipice").
- Per pair of cells, the probability of improvement P(A > B) with its
  stratified-bootstrap interval: rliable.
- The mean, differences of means and learning-curve bands: scipy's percentile
  bootstrap (`scipy_interval`).
- Per pre-registered comparison (`[[study.compare]]`), in the declared
  direction: Welch's t-test and the Mann-Whitney U test (scipy), each
  Holm-corrected over the pre-registered comparisons (statsmodels).

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


def preregistered_tests(
    comparisons: Sequence[Comparison],
    scores: Mapping[str, Float[np.ndarray, " runs"]],
    resamples: int | None = None,
) -> list[dict[str, Any]]:
    """One row per comparison: n and mean of each side, P(A > B) with its
    interval, Welch's t and Mann-Whitney U with their one-sided p-values, and
    both p-values Holm-corrected over the comparisons (NaN tests where a side
    has fewer than 2 runs; a NaN p-value is left out of the correction).

    `scores[cell]` holds each run's score (one per seed).
    """
    from scipy import stats

    multitest = require("statsmodels.stats.multitest", "Holm's correction")
    rows = []
    for c in comparisons:
        a = np.asarray(scores[c.a], np.float64)
        b = np.asarray(scores[c.b], np.float64)
        poi, poi_low, poi_high = probability_of_improvement(a, b, resamples)
        row: dict[str, Any] = {
            "a": c.a,
            "b": c.b,
            "alternative": c.alternative,
            "n_a": a.size,
            "n_b": b.size,
            "mean_a": float(a.mean()) if a.size else math.nan,
            "mean_b": float(b.mean()) if b.size else math.nan,
            "prob_improvement": poi,
            "prob_improvement_ci_low": poi_low,
            "prob_improvement_ci_high": poi_high,
            "welch_t": math.nan,
            "welch_p": math.nan,
            "mannwhitney_u": math.nan,
            "mannwhitney_p": math.nan,
        }
        if a.size >= 2 and b.size >= 2:
            welch: Any = stats.ttest_ind(
                a, b, equal_var=False, alternative=c.alternative
            )
            mw = stats.mannwhitneyu(a, b, alternative=c.alternative)
            row |= {
                "welch_t": float(welch.statistic),
                "welch_p": float(welch.pvalue),
                "mannwhitney_u": float(mw.statistic),
                "mannwhitney_p": float(mw.pvalue),
            }
        rows.append(row)
    for test in ("welch", "mannwhitney"):
        p = np.array([r[f"{test}_p"] for r in rows], np.float64)
        adjusted = np.full_like(p, math.nan)
        finite = np.isfinite(p)
        if finite.any():
            adjusted[finite] = multitest.multipletests(p[finite], method="holm")[1]
        for row, value in zip(rows, adjusted, strict=True):
            row[f"{test}_p_holm"] = float(value)
    return rows


__all__ = [
    "CONFIDENCE",
    "CURVE_RESAMPLES",
    "MIN_RUNS_FOR_CI",
    "RESAMPLES",
    "SEED",
    "enough_runs",
    "iqm_interval",
    "mean_interval",
    "preregistered_tests",
    "probability_of_improvement",
    "scipy_interval",
]
