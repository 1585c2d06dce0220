"""Population evaluation: vmap over genomes, per-genome keys, non-finite fitness.

`evaluate` maps a user's `fitness_fn(genome, key)` over a population with
`eqx.filter_vmap`. Only the evolvable leaves are mapped; static leaves (topology,
functions, configuration) are closed over, so the population shares one copy.
Each genome's key is `jax.random.fold_in(key, index)`: it depends on the genome's
index alone, never on how the population is chunked or sharded.

Non-finite fitness (NaN, +-inf, from a diverging rollout say) must never reach an
evosax update as NaN: `rank_nonfinite_worst` gives such genomes a finite value
strictly worse than every finite one, and `fitness_summary` counts them.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from ._types import (
    Array,
    Bool,
    Fitness,
    Float,
    Int,
    Metrics,
    Population,
    PRNGKey,
    PRNGKeys,
    PyTree,
)


def fitness_dtype(dtype: Any) -> Any:
    """Fitness is float32, or float64 when it arrives as float64 (x64 mode)."""
    return jnp.dtype(jnp.float64 if dtype == jnp.float64 else jnp.float32)


def genome_keys(key: PRNGKey, population_size: int) -> PRNGKeys:
    """Per-genome keys: `fold_in(key, i)` for genome index i = 0..P-1."""
    return jax.vmap(jr.fold_in, in_axes=(None, 0))(key, jnp.arange(population_size))


def population_size_of(population: Population, filter_spec: Any) -> int:
    """Leading-axis size shared by the evolvable leaves of `population`."""
    leaves = jtu.tree_leaves(eqx.filter(population, filter_spec))
    sizes = {int(x.shape[0]) if getattr(x, "ndim", 0) else -1 for x in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            "population: its evolvable leaves (selected by filter_spec) must all carry "
            "one leading population axis; got leading sizes "
            f"{sorted(sizes) if leaves else 'none (no evolvable leaves)'}"
        )
    return sizes.pop()


def _split_output(out: Any) -> tuple[Array, Any]:
    if isinstance(out, tuple):
        if len(out) != 2:
            raise ValueError(
                "fitness_fn must return a scalar or a (scalar, aux) pair; got a tuple "
                f"of length {len(out)}"
            )
        fitness, aux = out
    else:
        fitness, aux = out, None
    fitness = jnp.asarray(fitness)
    if fitness.shape != ():
        raise ValueError(
            "fitness_fn must return a scalar fitness per genome (or (scalar, aux)); "
            f"got shape {fitness.shape}"
        )
    if not (
        jnp.issubdtype(fitness.dtype, jnp.floating)
        or jnp.issubdtype(fitness.dtype, jnp.integer)
    ):
        raise ValueError(
            f"fitness_fn must return a real number; got dtype {fitness.dtype}"
        )
    return fitness, aux


@eqx.filter_jit
def evaluate(
    fitness_fn: Callable[..., Any],
    population: Population,
    key: PRNGKey,
    *,
    filter_spec: Any = eqx.is_inexact_array,
) -> tuple[Fitness, PyTree]:
    """Evaluate every genome of a population.

    Arguments:
        fitness_fn: `fitness_fn(genome, key)` returning a scalar, or a pair
            `(scalar, aux)` where `aux` is any pytree of small per-genome summaries.
        population: the genome type with a leading axis P on its evolvable leaves,
            as returned by `Strategy.ask`.
        key: the generation's evaluation key; genome i gets `fold_in(key, i)`.
        filter_spec: the filter the strategy was built with (which leaves carry
            the population axis). `Strategy.filter_spec` holds it.

    Returns:
        `(fitness, aux)`: fitness `Float[Array, "P"]` (float32 or wider) and the
        stacked aux (or None when `fitness_fn` returns a scalar).

    Example:
        >>> fitness, aux = eqxevo.evaluate(f, population, key)
    """
    evolvable, static = eqx.partition(population, filter_spec)
    size = population_size_of(population, filter_spec)
    keys = genome_keys(key, size)

    def one(genome_evolvable: Any, genome_key: PRNGKey) -> tuple[Array, Any]:
        genome = eqx.combine(genome_evolvable, static)
        return _split_output(fitness_fn(genome, genome_key))

    fitness, aux = eqx.filter_vmap(one)(evolvable, keys)
    return fitness.astype(fitness_dtype(fitness.dtype)), aux


def rank_nonfinite_worst(
    fitness: Float[Array, " pop"],
    reference: Float[Array, " ref"] | None = None,
) -> tuple[Float[Array, " pop"], Bool[Array, " pop"]]:
    """Replace non-finite fitness by a finite value worse than every finite one.

    Fitness here is in evosax's sign (lower is better). The replacement is
    `worst + spread + 1`, where `worst`/`spread` are the maximum and the range of
    the finite values in `fitness` and `reference` (a population-based strategy's
    stored fitness, so a failed genome can never displace a stored one). When no
    value is finite every genome gets 0.

    Returns:
        `(clean_fitness, nonfinite_mask)`.
    """
    nonfinite = ~jnp.isfinite(fitness)
    pool = fitness if reference is None else jnp.concatenate([fitness, reference])
    finite_pool = jnp.isfinite(pool)
    any_finite = jnp.any(finite_pool)
    worst = jnp.max(jnp.where(finite_pool, pool, -jnp.inf))
    best = jnp.min(jnp.where(finite_pool, pool, jnp.inf))
    replacement = jnp.where(any_finite, worst + (worst - best) + 1.0, 0.0)
    return jnp.where(nonfinite, replacement.astype(fitness.dtype), fitness), nonfinite


def fitness_summary(
    fitness: Float[Array, " pop"], nonfinite: Bool[Array, " pop"], maximize: bool
) -> Metrics:
    """Per-generation scalars over the finite fitness values, in the user's sign.

    Returns a dict with `best`, `mean`, `std`, `min`, `max` (NaN when no value is
    finite) and `num_nonfinite` (int32).
    """
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


__all__ = [
    "best_index",
    "evaluate",
    "fitness_dtype",
    "fitness_summary",
    "genome_keys",
    "population_size_of",
    "rank_nonfinite_worst",
]
