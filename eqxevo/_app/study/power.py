"""Power before running: the seeds each declared comparison needs to find its
declared effect (`effect`, or an equivalence test's `margin`) with probability
`POWER`, from the spread of the tuned arms over the tuning seeds
(`eqxevo study plan --power`; docs/studies.md, "Power").

- Welch's t and the bootstrap of the difference of means: the two-sample t
  test's power (statsmodels' `TTestIndPower`) at Cohen's d = effect / sd, sd
  the root mean square of the two arms' standard deviations; the fewest seeds
  with power >= `POWER`.
- Mann-Whitney U: the t test's seeds divided by 3/pi, the test's asymptotic
  relative efficiency against t for normal scores (Lehmann), and never fewer
  than the U test needs to reach p < alpha at all.
- Equivalence (TOST) at a true difference of 0: power = 2 F(margin/se - t) - 1,
  F the t distribution's CDF with 2n - 2 degrees of freedom, t its 1 - alpha
  quantile, se = sd sqrt(2/n) (Schuirmann's two one-sided tests; Chow, Shao &
  Wang, "Sample Size Calculations in Clinical Research", 3.2).
- alpha is `ALPHA` over the number of declared comparisons: Holm's correction
  tests its first comparison at that level, so the seeds found are enough for
  every step.
"""

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from .checks import Comparison
from .spec import Study, require
from .stats import ALPHA, smallest_p

POWER = 0.8
"""The probability of finding the declared effect that the seeds are sized for."""

MAX_SEEDS = 100_000
"""The search for a number of seeds stops here (an effect far below the spread)."""

MWU_EFFICIENCY = 3 / math.pi
"""Mann-Whitney U's asymptotic relative efficiency against t, normal scores."""


def tost_power(n: int, d: float, alpha: float) -> float:
    """Power of two one-sided t tests (TOST) with `n` runs per arm, the margin
    `d` standard deviations, and a true difference of 0 (module docstring)."""
    if n < 2:
        return 0.0
    df = 2 * n - 2
    t = stats.t.ppf(1 - alpha, df)
    return max(0.0, 2 * float(stats.t.cdf(d / math.sqrt(2 / n) - t, df)) - 1)


def _fewest(power_at: Callable[[int], float]) -> int:
    """The fewest runs per arm (from 2) with `power_at(n)` >= `POWER`, power
    growing with n: doubling, then bisection; `MAX_SEEDS + 1` when none up to
    `MAX_SEEDS` is enough."""
    high = 2
    while power_at(high) < POWER:
        if high > MAX_SEEDS:
            return MAX_SEEDS + 1
        high *= 2
    low = high // 2  # below POWER (or 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if power_at(middle) >= POWER else (middle, high)
    return high


def t_power(n: int, d: float, alpha: float, alternative: str) -> float:
    """The two-sample t test's power with `n` runs per arm at Cohen's `d`
    (statsmodels' `TTestIndPower`; one-sided unless `"two-sided"`)."""
    power = require("statsmodels.stats.power", "eqxevo study plan --power")
    two_sided = alternative == "two-sided"
    return float(
        power.TTestIndPower().power(
            d, n, alpha, ratio=1.0, alternative="two-sided" if two_sided else "larger"
        )
    )


def seeds_needed(
    comparison: Comparison, sd_a: float, sd_b: float, alpha: float
) -> int | None:
    """Runs per arm for `POWER` at `alpha` (module docstring); None when the
    comparison declares no effect, `MAX_SEEDS + 1` when none up to it is
    enough."""
    effect = comparison.margin if comparison.effect is None else comparison.effect
    if effect is None:
        return None
    sd = math.sqrt((sd_a**2 + sd_b**2) / 2)
    d = math.inf if sd == 0 else effect / sd
    if math.isinf(d):
        needed = 2.0
    elif comparison.alternative == "equivalent":
        needed = float(_fewest(lambda n: tost_power(n, d, alpha)))
    else:
        needed = float(_fewest(lambda n: t_power(n, d, alpha, comparison.alternative)))
    if comparison.test == "mwu":
        needed /= MWU_EFFICIENCY
    n = max(2, math.ceil(needed - 1e-9))
    if comparison.test == "mwu":
        # The U test cannot reach p < alpha at all below some n.
        while smallest_p("mwu", comparison.alternative, n, n) >= alpha:
            n += 1
    return min(n, MAX_SEEDS + 1)


def _spread(entry: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """A chosen trial's scores over the tuning seeds, per combination of axis
    values (keyed by its JSON)."""
    out: dict[str, list[float]] = {}
    for score in entry["scores"]:
        key = json.dumps(score["values"], sort_keys=True)
        out.setdefault(key, []).append(float(score["score"]))
    return {k: np.asarray(v) for k, v in out.items()}


def power_table(study: Study, chosen: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per declared comparison and combination of axis values: the two
    arms' spread over the tuning seeds, the seeds needed, and the study's."""
    alpha = ALPHA / max(1, len(study.compare))
    rows = []
    for i, comparison in enumerate(study.compare):
        a = _spread(chosen["arms"][comparison.a])
        b = _spread(chosen["arms"][comparison.b])
        for values in a:
            xa, xb = a[values], b[values]
            sd_a = float(np.std(xa, ddof=1)) if xa.size > 1 else math.nan
            sd_b = float(np.std(xb, ddof=1)) if xb.size > 1 else math.nan
            needed = None
            if math.isfinite(sd_a) and math.isfinite(sd_b):
                needed = seeds_needed(comparison, sd_a, sd_b, alpha)
            rows.append(
                {
                    "compare": i,
                    "a": comparison.a,
                    "b": comparison.b,
                    "test": comparison.test,
                    "alternative": comparison.alternative,
                    "effect": comparison.effect or comparison.margin,
                    "values": values,
                    "sd_a": sd_a,
                    "sd_b": sd_b,
                    "tuning_seeds": int(min(xa.size, xb.size)),
                    "alpha": alpha,
                    "seeds_needed": needed,
                    "seeds": len(study.seeds),
                }
            )
    return rows


def power_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """`power_table` as text, one line per row."""
    lines = []
    for row in rows:
        head = (
            f"study.compare[{row['compare']}] {row['a']} vs {row['b']} "
            f"({row['test']}, {row['alternative']}"
            + ("" if row["values"] == "{}" else f", at {row['values']}")
            + ")"
        )
        if row["effect"] is None:
            lines.append(
                f"{head}: no effect declared; add effect = (the smallest "
                "difference worth finding) to size its seeds"
            )
            continue
        if row["seeds_needed"] is None:
            lines.append(f"{head}: the spread needs 2 tuning seeds or more")
            continue
        needed = row["seeds_needed"]
        shown = f"more than {MAX_SEEDS:,}" if needed > MAX_SEEDS else str(needed)
        verdict = "enough" if needed <= row["seeds"] else "too few"
        lines.append(
            f"{head}: effect {row['effect']:g}, sd {row['sd_a']:.3g} / "
            f"{row['sd_b']:.3g} over {row['tuning_seeds']} tuning seeds: {shown} "
            f"seeds per arm for power {POWER} at alpha {row['alpha']:.3g}; the "
            f"study has {row['seeds']}: {verdict}"
        )
    return lines


__all__ = [
    "MAX_SEEDS",
    "MWU_EFFICIENCY",
    "POWER",
    "power_lines",
    "power_table",
    "seeds_needed",
    "t_power",
    "tost_power",
]
