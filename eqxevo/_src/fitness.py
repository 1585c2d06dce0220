"""Fitness values: their dtype, non-finite ranking, per-generation summaries, and
the watch for fitness without spread.

See docs/internals.md ("Fitness values") for why non-finite values never reach evosax.
"""

from collections.abc import Iterable, Mapping
from typing import Any

import jax.numpy as jnp

from ._types import Array, Bool, Float, Int, Metrics


def fitness_dtype(dtype: Any) -> Any:
    """Fitness is float32, or float64 when it arrives as float64 (x64 mode)."""
    # Integer fitness becomes float32: ranking it below the worst needs a float.
    return jnp.dtype(jnp.float64 if dtype == jnp.float64 else jnp.float32)


def check_fitness(fitness: Any, population_size: int) -> Array:
    """`fitness` in its fitness dtype, or a `ValueError` unless it is one real
    (floating or integer) value per genome of a population of this size."""
    fitness = jnp.asarray(fitness)
    if fitness.shape != (population_size,):
        raise ValueError(
            f"fitness: expected shape ({population_size},), one value per "
            f"genome; got shape {fitness.shape}"
        )
    if (
        not (
            jnp.issubdtype(fitness.dtype, jnp.floating)
            or jnp.issubdtype(fitness.dtype, jnp.integer)
        )
        or fitness.dtype == jnp.bool_
    ):
        raise ValueError(
            f"fitness: expected a real (floating or integer) dtype; got {fitness.dtype}"
        )
    return fitness.astype(fitness_dtype(fitness.dtype))


def rank_nonfinite_worst(
    fitness: Float[Array, " pop"],
    reference: Float[Array, " ref"] | None = None,
) -> tuple[Float[Array, " pop"], Bool[Array, " pop"]]:
    """Replace non-finite fitness by a finite value worse than every finite one.

    Fitness here is in evosax's sign (lower is better). The replacement is
    `worst + spread + 1`, where `worst` and `spread` are the largest value and
    the range of the finite values in `fitness` and `reference` (a
    population-based strategy's stored fitness, so a failed genome can never
    displace a stored one). It is raised to at least the next float above
    `worst`, so it is strictly worse even where `+ 1` is below the float's
    resolution, and capped at the largest finite float, so it never overflows
    to inf. Only when `worst` is itself the largest finite float does the
    replacement tie with it. When no value is finite every genome gets 0.

    Returns:
        `(clean_fitness, nonfinite_mask)`.
    """
    nonfinite = ~jnp.isfinite(fitness)
    pool = fitness if reference is None else jnp.concatenate([fitness, reference])
    finite_pool = jnp.isfinite(pool)
    any_finite = jnp.any(finite_pool)
    worst = jnp.max(jnp.where(finite_pool, pool, -jnp.inf))
    best = jnp.min(jnp.where(finite_pool, pool, jnp.inf))
    largest = jnp.asarray(jnp.finfo(fitness.dtype).max, fitness.dtype)
    # Finite extremes can overflow the sum (3e38 + 6e38): fall back to the cap.
    candidate = worst + (worst - best) + 1.0
    candidate = jnp.where(jnp.isfinite(candidate), candidate, largest)
    above = jnp.nextafter(worst, jnp.asarray(jnp.inf, fitness.dtype))
    replacement = jnp.minimum(jnp.maximum(candidate, above), largest)
    replacement = jnp.where(any_finite, replacement, jnp.zeros((), fitness.dtype))
    return jnp.where(nonfinite, replacement, fitness), nonfinite


def fitness_summary(
    fitness: Float[Array, " pop"], nonfinite: Bool[Array, " pop"], maximize: bool
) -> Metrics:
    """Per-generation scalars over the finite fitness values, in the user's sign.

    Returns a dict with `best`, `mean`, `std`, `min`, `max` (NaN when no value is
    finite) and `num_nonfinite` (int32).
    """
    # Masked sums, not boolean indexing: shapes stay static under jit.
    finite = ~nonfinite
    count = jnp.sum(finite).astype(fitness.dtype)
    safe = jnp.where(finite, fitness, 0.0)
    mean = jnp.sum(safe) / count
    var = jnp.sum(jnp.where(finite, (fitness - mean) ** 2, 0.0)) / count
    lo = jnp.min(jnp.where(finite, fitness, jnp.inf))
    hi = jnp.max(jnp.where(finite, fitness, -jnp.inf))
    none = count == 0
    nan = jnp.asarray(jnp.nan, fitness.dtype)
    lo, hi = jnp.where(none, nan, lo), jnp.where(none, nan, hi)
    return {
        "best": hi if maximize else lo,
        "mean": mean,
        "std": jnp.sqrt(var),
        "min": lo,
        "max": hi,
        "num_nonfinite": jnp.sum(nonfinite).astype(jnp.int32),
    }


def best_index(fitness: Float[Array, " pop"], maximize: bool) -> Int[Array, ""]:
    """Index of the best finite genome (0 when none is finite)."""
    if maximize:
        return jnp.argmax(jnp.where(jnp.isfinite(fitness), fitness, -jnp.inf))
    return jnp.argmin(jnp.where(jnp.isfinite(fitness), fitness, jnp.inf))


NO_SPREAD_GENERATIONS = 5
"""Generations in a row of fitness without spread (every genome of a generation
scored the same) after which a run says so: selection has nothing to rank. One
or two such generations happen (a plateau everyone reaches); five do not."""


class SpreadWatch:
    """Watches a run's records for fitness without spread (`min == max` over the
    population) for `generations` generations in a row, per seed, and says so
    once (`notice`). It reads the summaries the host receives anyway.

    Arguments:
        generations: how many generations in a row (default
            `NO_SPREAD_GENERATIONS`).
    """

    def __init__(self, generations: int = NO_SPREAD_GENERATIONS):
        self.generations = generations
        self.flat: dict[int, int] = {}
        self.said = False

    def notice(self, records: Iterable[Mapping[str, Any]]) -> str | None:
        """The notice, the first time a seed's fitness has had no spread for
        `generations` generations in a row in the records seen so far; else None."""
        found = None
        for r in sorted(records, key=lambda r: (r["generation"], r.get("seed", 0))):
            seed = r.get("seed", 0)
            low, high = r.get("min"), r.get("max")
            flat = low is not None and low == high
            self.flat[seed] = self.flat.get(seed, 0) + 1 if flat else 0
            if self.flat[seed] >= self.generations and not self.said and found is None:
                first = r["generation"] - self.generations + 1
                found = (
                    f"warning: no fitness spread for {self.generations} generations "
                    f"in a row ({first}-{r['generation']}"
                    + (f", seed {seed}" if "seed" in r else "")
                    + f"): every genome scored {low!r}, so selection has nothing "
                    "to rank (a reward no policy changes? a fitness that ignores "
                    "the genome? genomes too alike: strategy.init_scale?)"
                )
        if found is not None:
            self.said = True
        return found


__all__ = [
    "NO_SPREAD_GENERATIONS",
    "SpreadWatch",
    "best_index",
    "check_fitness",
    "fitness_dtype",
    "fitness_summary",
    "rank_nonfinite_worst",
]
