"""A study's bootstrap intervals (BCa, `scipy.stats.bootstrap`) and their measured
coverage, which sets `MIN_RUNS_FOR_CI` (docs/studies.md, "The report").
"""

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jaxtyping import Float
from scipy import integrate, stats

CONFIDENCE = 0.95
RESAMPLES = 9999
SEED = 0
"""Bootstrap resamples (read at each call: a function's `resamples=None`) and
their seed: a report is reproducible. scipy's resampling is vectorised: an
interval of 9,999 resamples of 20 runs takes a few milliseconds."""

CURVE_RESAMPLES = 2000
"""Resamples for a fitness curve's band: one interval per generation, drawn on a
plot, not read as a figure."""

MIN_RUNS_FOR_CI = 14
"""Fewer runs than this give no interval ("n too small" in tables, no band or
error bar in figures): the smallest n at which the report's 95% interval of a
mean (BCa, `bootstrap_interval`) was measured to cover the true mean at least
90% of the time for every distribution of `DISTRIBUTIONS`. The normal alone
reaches 90% at 10 runs, the skewed lognormal at 14. (From 2 runs every
resample's mean lies between them: a "95% interval" would be their min-max.)

Measured coverage of nominal 95% intervals (`coverage`: 20,000 samples an
entry, 9,999 resamples an interval; standard error about 0.002 near 0.9), from
`python -c "from eqxevo._app.study.intervals import coverage_table;
print(coverage_table(20000))"` (about 30 minutes on two CPU cores):

| statistic | distribution | n=3 | n=5 | n=8 | n=10 | n=13 | n=14 | n=15 | n=20 |
|---|---|---|---|---|---|---|---|---|---|
| mean | normal | 0.724 | 0.840 | 0.886 | 0.902 | 0.912 | 0.914 | 0.920 | 0.929 |
| mean | lognormal | 0.698 | 0.812 | 0.866 | 0.885 | 0.895 | 0.901 | 0.907 | 0.916 |
| mean | bimodal | 0.694 | 0.826 | 0.908 | 0.922 | 0.935 | 0.937 | 0.937 | 0.943 |
| IQM | normal | 0.724 | 0.895 | 0.934 | 0.934 | 0.937 | 0.935 | 0.939 | 0.941 |
| IQM | lognormal | 0.721 | 0.896 | 0.932 | 0.935 | 0.937 | 0.936 | 0.939 | 0.941 |
| IQM | bimodal | 0.721 | 0.884 | 0.939 | 0.931 | 0.934 | 0.935 | 0.932 | 0.937 |

The IQM's interval reaches 90% between 5 and 8 runs (at 3 runs it trims
nothing: it is the mean); one threshold serves every interval.
"""


def enough_runs(*samples: Sequence[float] | np.ndarray) -> bool:
    """Whether every sample has at least `MIN_RUNS_FOR_CI` runs."""
    return all(len(s) >= MIN_RUNS_FOR_CI for s in samples)


def bootstrap_interval(
    samples: tuple[np.ndarray, ...],
    statistic: Callable[..., Any],
    *,
    axis: int = -1,
    resamples: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`(low, high)`: the 95% BCa (bias-corrected and accelerated; Efron 1987)
    bootstrap interval of `statistic` over `samples`, each resampled on its own
    along `axis` (`scipy.stats.bootstrap`, `RESAMPLES` resamples unless
    `resamples` is given, from `SEED`); the caller checks `enough_runs`.

    Where BCa is undefined (every resample gives the same value, as when every
    run of A beats every run of B, or the jackknife is flat) the interval is the
    percentile interval of the same resamples: that value, or the resamples'
    2.5% and 97.5% quantiles.

    The IQM's and P(A > B)'s intervals come from here too, not from rliable:
    rliable 1.2 offers BCa (`get_interval_estimates(method="bca")`, through
    arch), but its resampling loop is Python (seconds an interval, too slow to
    measure its coverage), its bias correction counts resamples tied with the
    estimate as above it (P(A > B) and a few runs' IQM tie often; scipy counts
    them one half), and it raises where no resample falls below the estimate
    (every run of A above every run of B).

    Arguments:
        samples: one array per sample, runs along `axis`; other axes are
            independent problems (a generation each, or a simulated study).
        statistic: `statistic(*samples, axis=...)`, vectorised.
    """
    options: dict[str, Any] = {
        "confidence_level": CONFIDENCE,
        "n_resamples": RESAMPLES if resamples is None else resamples,
        "axis": axis,
        "rng": np.random.default_rng(SEED),
    }
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        # A degenerate bootstrap distribution: BCa gives NaN, which is met below.
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(samples, statistic, method="BCa", **options)
    low = np.asarray(result.confidence_interval.low, np.float64)
    high = np.asarray(result.confidence_interval.high, np.float64)
    undefined = np.isnan(low) | np.isnan(high)
    if undefined.any():
        options["n_resamples"] = 0
        fallback = stats.bootstrap(
            samples,
            statistic,
            method="percentile",
            bootstrap_result=result,
            **options,
        ).confidence_interval
        low = np.where(undefined, fallback.low, low)
        high = np.where(undefined, fallback.high, high)
    return low, high


def mean_interval(values: Float[np.ndarray, " runs"]) -> tuple[float, float]:
    """The 95% BCa interval of the mean (NaN with fewer than `MIN_RUNS_FOR_CI`
    values)."""
    x = np.asarray(values, np.float64)
    if not enough_runs(x):
        return math.nan, math.nan
    low, high = bootstrap_interval((x,), np.mean)
    return float(low), float(high)


def _difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> Any:
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def difference_interval(
    a: Float[np.ndarray, " runs_a"], b: Float[np.ndarray, " runs_b"]
) -> tuple[float, float]:
    """The 95% BCa interval of mean A - mean B, each side resampled on its own
    (NaN with fewer than `MIN_RUNS_FOR_CI` runs in either)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not enough_runs(x, y):
        return math.nan, math.nan
    low, high = bootstrap_interval((x, y), _difference)
    return float(low), float(high)


def iqm(values: np.ndarray, axis: int = -1) -> Any:
    """The interquartile mean along `axis`: the mean of the middle half, a
    quarter of the runs (rounded down) cut from each end (`scipy.stats.trim_mean`
    at 0.25, as rliable's `aggregate_iqm`; Agarwal et al. 2021, "Deep
    reinforcement learning at the edge of the statistical precipice")."""
    return stats.trim_mean(values, 0.25, axis=axis)


def iqm_interval(
    values: Float[np.ndarray, " runs"], resamples: int | None = None
) -> tuple[float, float, float]:
    """`(iqm, low, high)`: the interquartile mean of the runs' scores and its 95%
    BCa interval (NaN bounds with fewer than `MIN_RUNS_FOR_CI` runs; NaN IQM
    with none). A cell is one task: the bootstrap resamples its runs."""
    x = np.asarray(values, np.float64)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    centre = float(iqm(x))
    if not enough_runs(x):
        return centre, math.nan, math.nan
    low, high = bootstrap_interval((x,), iqm, resamples=resamples)
    return centre, float(low), float(high)


def improvement(a: np.ndarray, b: np.ndarray, axis: int = -1) -> Any:
    """P(A > B) along `axis`: the share of pairs (a run of A, a run of B) in which
    A scores higher, ties counting one half: Mann-Whitney's U / (n_A n_B)
    (`scipy.stats.mannwhitneyu`; rliable's `probability_of_improvement` on one
    task)."""
    u = stats.mannwhitneyu(a, b, axis=axis, method="asymptotic").statistic
    return u / (np.shape(a)[axis] * np.shape(b)[axis])


def probability_of_improvement(
    a: Float[np.ndarray, " runs_a"],
    b: Float[np.ndarray, " runs_b"],
    resamples: int | None = None,
) -> tuple[float, float, float]:
    """`(p, low, high)`: P(A > B) (`improvement`) with its 95% BCa interval, each
    side's runs resampled on their own (NaN bounds with fewer than
    `MIN_RUNS_FOR_CI` runs in either)."""
    x, y = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan, math.nan
    p = float(improvement(x, y))
    if not enough_runs(x, y):
        return p, math.nan, math.nan
    low, high = bootstrap_interval((x, y), improvement, resamples=resamples)
    return p, float(low), float(high)


def curve_band(
    values: Float[np.ndarray, "seeds generations"],
) -> tuple[
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
    Float[np.ndarray, " generations"],
]:
    """Mean over seeds per generation and its 95% BCa interval (`CURVE_RESAMPLES`
    resamples; NaN bands with fewer than `MIN_RUNS_FOR_CI` seeds, or where a
    seed has not reached the generation)."""
    mean = np.nanmean(values, axis=0) if values.size else values
    low = np.full(values.shape[1], np.nan)
    high = np.full(values.shape[1], np.nan)
    complete = ~np.isnan(values).any(axis=0)
    if values.shape[0] >= MIN_RUNS_FOR_CI and complete.any():
        low[complete], high[complete] = bootstrap_interval(
            (values[:, complete],), np.mean, axis=0, resamples=CURVE_RESAMPLES
        )
    return mean, low, high


# -- coverage -----------------------------------------------------------------------

STATISTICS: dict[str, Callable[..., Any]] = {"mean": np.mean, "IQM": iqm}
"""The statistics whose intervals `coverage` measures."""

DISTRIBUTIONS: dict[str, Any] = {
    "normal": stats.Normal(),
    "lognormal": stats.exp(stats.Normal(sigma=0.5)),
    "bimodal": stats.Mixture(
        [stats.Normal(mu=0.0), stats.Normal(mu=4.0)], weights=[0.7, 0.3]
    ),
}
"""Scores `coverage` draws: normal; lognormal (sigma 0.5, skewness 1.75); and a
mix of 70% N(0, 1) and 30% N(4, 1), as when some seeds find what the others miss
(skewness 0.59)."""


def true_value(statistic: str, distribution: str) -> float:
    """What `statistic` estimates for `distribution`: its mean, or its
    interquartile mean 2 * integral of the quantile function from 1/4 to 3/4."""
    law = DISTRIBUTIONS[distribution]
    if statistic == "mean":
        return float(law.mean())
    value, _ = integrate.quad(law.icdf, 0.25, 0.75)
    return 2.0 * float(value)


def coverage(
    statistic: str,
    distribution: str,
    n: int,
    repetitions: int,
    *,
    resamples: int | None = None,
    seed: int = 0,
) -> float:
    """The share of `repetitions` samples of `n` runs drawn from `distribution`
    whose 95% interval of `statistic` (`bootstrap_interval`, as the report
    computes it) holds its true value (`true_value`).

    Arguments:
        statistic: a key of `STATISTICS`.
        distribution: a key of `DISTRIBUTIONS`.
        n: runs per sample.
        repetitions: samples drawn (the measured share's standard error is
            about sqrt(0.9 x 0.1 / repetitions) near 90%).
        resamples: bootstrap resamples per interval (`RESAMPLES` by default).
        seed: the draws' seed.
    """
    function = STATISTICS[statistic]
    truth = true_value(statistic, distribution)
    draws = DISTRIBUTIONS[distribution].sample(
        (repetitions, n), rng=np.random.default_rng(seed)
    )
    resamples = RESAMPLES if resamples is None else resamples
    # Many samples at once, each an independent problem along the first axis;
    # in slices that keep the resampled array near 10^7 numbers.
    step = max(1, 10_000_000 // (resamples * n))
    hits = 0
    for start in range(0, repetitions, step):
        low, high = bootstrap_interval(
            (draws[start : start + step],), function, resamples=resamples
        )
        hits += int(np.count_nonzero((low <= truth) & (truth <= high)))
    return hits / repetitions


def coverage_table(
    repetitions: int, sizes: Sequence[int] = (3, 5, 8, 10, 13, 14, 15, 20)
) -> str:
    """`coverage` of every statistic and distribution at each n in `sizes`, as
    a markdown table."""
    lines = [
        "| statistic | distribution | " + " | ".join(f"n={n}" for n in sizes) + " |",
        "|---|---|" + "---|" * len(sizes),
    ]
    for statistic in STATISTICS:
        for distribution in DISTRIBUTIONS:
            shares = [coverage(statistic, distribution, n, repetitions) for n in sizes]
            lines.append(
                f"| {statistic} | {distribution} | "
                + " | ".join(f"{s:.3f}" for s in shares)
                + " |"
            )
    return "\n".join(lines)


__all__ = [
    "CONFIDENCE",
    "CURVE_RESAMPLES",
    "DISTRIBUTIONS",
    "MIN_RUNS_FOR_CI",
    "RESAMPLES",
    "SEED",
    "STATISTICS",
    "bootstrap_interval",
    "coverage",
    "coverage_table",
    "curve_band",
    "difference_interval",
    "enough_runs",
    "improvement",
    "iqm",
    "iqm_interval",
    "mean_interval",
    "probability_of_improvement",
    "true_value",
]
