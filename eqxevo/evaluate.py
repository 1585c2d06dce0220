"""Population evaluation: vmap, micro-batches, devices, multi-fidelity, NaN policy.

`evaluate` maps a user's `fitness_fn(genome, key)` over a population with
`eqx.filter_vmap`. Only the evolvable leaves are mapped; static leaves (topology,
functions, configuration) are closed over, so the population shares one copy.
Each genome's key is `jax.random.fold_in(key, index)`: it depends on the genome's
index alone, never on how the population is chunked or sharded.

Three ways to scale it, each leaving the results bit-identical (on XLA:CPU, and
wherever the per-genome computation does not depend on the batch width):

- `batch_size=b` evaluates b genomes at a time (`lax.map` over blocks), so only
  b lifetimes are alive at once: memory O(b) instead of O(P) in lifetime state.
- `mesh=` splits the population over devices (see `eqxevo.sharding`).
- `MultiFidelity(proxy_fn, full_fn, num_promoted=k, ...)` in place of
  `fitness_fn` evaluates every genome with a cheap proxy, then only the best k
  fully (see `combine_fidelities` for how the two are combined).

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
from jax.sharding import Mesh

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
from .sharding import check_divisible, mesh_size, shard_population


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


class MultiFidelity(eqx.Module):
    """Two-rung evaluation: a cheap proxy for every genome, the full one for the best k.

    Pass it wherever a fitness function goes (`evaluate`, `evolve`). Rung 1 runs
    `proxy_fn` on all P genomes; the `num_promoted` best by proxy (ties: lower
    genome index first; non-finite proxies last) run `full_fn`. Both rungs give
    genome i its usual key `fold_in(key, i)`, so the proxy sees the start of the
    same episode (common random numbers) and a promoted genome's full fitness is
    exactly what single-fidelity `evaluate(full_fn, ...)` gives it. The combined
    fitness ranks every promoted genome above every other one and keeps the
    order inside each group (`combine_fidelities`). Promotion runs on device.

    Arguments:
        proxy_fn: `proxy_fn(genome, key) -> scalar | (scalar, aux)`, e.g. a
            shorter lifetime or fewer rollouts. Same sign as `full_fn`; on a
            comparable scale (a mean per step, say) so the proxy's values mean
            something to the strategy.
        full_fn: the full evaluation, same signature.
        num_promoted: k, how many genomes get the full evaluation (a Python int,
            1 <= k <= P; a multiple of the device count when sharded).
        proxy_steps: agent-steps one proxy evaluation costs (e.g. its lifetime
            T/10); used for the agent-steps metrics only.
        full_steps: agent-steps one full evaluation costs (e.g. T).

    Example:
        >>> mf = eqxevo.MultiFidelity(lambda g, k: lifetime(g, k, 100),
        ...                           lambda g, k: lifetime(g, k, 1000),
        ...                           num_promoted=64, proxy_steps=100, full_steps=1000)
        >>> result = eqxevo.evolve(strategy, mf, key, num_generations=100)
        >>> result.history["agent_steps"]  # per generation (vs "agent_steps_full")
    """

    proxy_fn: Callable[..., Any]
    full_fn: Callable[..., Any]
    num_promoted: int = eqx.field(static=True)
    proxy_steps: int = eqx.field(static=True)
    full_steps: int = eqx.field(static=True)

    def __check_init__(self) -> None:
        for name in ("proxy_fn", "full_fn"):
            if not callable(getattr(self, name)):
                raise TypeError(
                    f"{name} must be callable as fn(genome, key); "
                    f"got {type(getattr(self, name)).__name__}"
                )
        for name in ("num_promoted", "proxy_steps", "full_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive Python int; got {value!r}")

    def agent_steps(self, population_size: int) -> int:
        """Agent-steps one generation spends: `P * proxy_steps + k * full_steps`."""
        return population_size * self.proxy_steps + self.num_promoted * self.full_steps

    def full_agent_steps(self, population_size: int) -> int:
        """Agent-steps a single-fidelity full evaluation spends: `P * full_steps`."""
        return population_size * self.full_steps

    def check(self, population_size: int, mesh: Mesh | None = None) -> None:
        """Raise a clear error if k does not fit a population of this size/mesh."""
        if self.num_promoted > population_size:
            raise ValueError(
                f"num_promoted={self.num_promoted} must be at most the population "
                f"size {population_size}"
            )
        check_divisible("num_promoted", self.num_promoted, mesh_size(mesh))


def check_batch_size(batch_size: Any) -> None:
    """Raise a clear error unless `batch_size` is None or a Python int >= 2."""
    if batch_size is not None and (
        not isinstance(batch_size, int)
        or isinstance(batch_size, bool)
        or batch_size < 2
    ):
        raise ValueError(
            "batch_size must be None (the whole population at once) or a Python "
            "int >= 2 (a block of one genome compiles differently on XLA:CPU and "
            f"would change the last bits of the fitness); got {batch_size!r}"
        )


def _vmap_in_blocks(one: Callable[..., Any], args: Any, batch_size: int | None) -> Any:
    """`vmap(one)(*args)` over the leading axis, `batch_size` genomes at a time.

    With `batch_size` set, a `lax.map` (scan) over blocks of `batch_size`
    genomes, each block vmapped, so only one block's lifetimes are alive at a
    time. A count that `batch_size` does not divide is padded to whole blocks
    by repeating the last genome (at most `batch_size - 1` extra evaluations,
    dropped from the result).

    Every block is vmapped over at least two genomes (a lone genome is padded
    too): XLA:CPU compiles a batch of one like an unbatched program (it
    strength-reduces its dots, for one), whose last bits can differ from the
    same genome evaluated in a wider batch. Two or more genomes per block give
    the same bits whatever the block width, so results do not depend on
    `batch_size`, device count or promotion.
    """
    count = jtu.tree_leaves(args)[0].shape[0]
    width = max(2, count if batch_size is None else min(batch_size, count))
    num_blocks = -(-count // width)
    total = num_blocks * width
    if total != count:
        take = jnp.minimum(jnp.arange(total), count - 1)
        args = jtu.tree_map(lambda x: x[take], args)
    vmapped = eqx.filter_vmap(lambda a: one(*a))
    if num_blocks == 1:
        out = vmapped(args)
    else:
        blocks = jtu.tree_map(
            lambda x: jnp.reshape(x, (num_blocks, width, *x.shape[1:])), args
        )
        out = jtu.tree_map(
            lambda y: jnp.reshape(y, (total, *y.shape[2:])),
            jax.lax.map(vmapped, blocks),
        )
    if total != count:
        out = jtu.tree_map(lambda y: y[:count], out)
    return out


def _evaluate_genomes(
    fitness_fn: Callable[..., Any],
    evolvable: Any,
    static: Any,
    key: PRNGKey,
    indices: Int[Array, " n"],
    mesh: Mesh | None,
    batch_size: int | None,
) -> tuple[Array, Any]:
    """Evaluate the genomes whose evolvable parts are `evolvable` (leading axis n).

    `indices` are their genome indices: genome `indices[j]` gets the key
    `fold_in(key, indices[j])`, wherever it runs.
    """
    # Arrays reach the devices as explicit shard_map operands (replicated), the
    # rest (functions, configuration) is closed over. This includes arrays held
    # by the fitness function itself (an eqx.Module holding env params, say).
    static_arrays, static_other = eqx.partition(static, eqx.is_array)
    fn_arrays, fn_other = eqx.partition(fitness_fn, eqx.is_array)

    def local(batched: Any, shared: Any) -> tuple[Array, Any]:
        genomes, genome_indices = batched
        key, static_arrays, fn_arrays = shared
        static = eqx.combine(static_arrays, static_other)
        fn = eqx.combine(fn_arrays, fn_other)

        def one(genome_evolvable: Any, index: Array) -> tuple[Array, Any]:
            genome = eqx.combine(genome_evolvable, static)
            return _split_output(fn(genome, jr.fold_in(key, index)))

        return _vmap_in_blocks(one, (genomes, genome_indices), batch_size)

    fitness, aux = shard_population(local, mesh)(
        (evolvable, indices), (key, static_arrays, fn_arrays)
    )
    return fitness.astype(fitness_dtype(fitness.dtype)), aux


@eqx.filter_jit
def evaluate(
    fitness_fn: Callable[..., Any] | MultiFidelity,
    population: Population,
    key: PRNGKey,
    *,
    filter_spec: Any = eqx.is_inexact_array,
    maximize: bool | None = None,
    mesh: Mesh | None = None,
    batch_size: int | None = None,
) -> tuple[Fitness, PyTree]:
    """Evaluate every genome of a population.

    Arguments:
        fitness_fn: `fitness_fn(genome, key)` returning a scalar, or a pair
            `(scalar, aux)` where `aux` is any pytree of small per-genome summaries;
            or a `MultiFidelity`.
        population: the genome type with a leading axis P on its evolvable leaves,
            as returned by `Strategy.ask`.
        key: the generation's evaluation key; genome i gets `fold_in(key, i)`.
        filter_spec: the filter the strategy was built with (which leaves carry
            the population axis). `Strategy.filter_spec` holds it.
        maximize: the fitness sign (`Strategy.maximize`); needed by a
            `MultiFidelity` to know which genomes are best, unused otherwise.
        mesh: split the population over this mesh's devices
            (`eqxevo.population_mesh()`); P must be a multiple of its size. The
            result is whole (replicated) on every device.
        batch_size: evaluate this many genomes at a time (per device) instead of
            all at once, to bound the memory of the lifetimes' state; an int >= 2.
            P need not be a multiple of it (the last block is padded). Results
            do not change.

    Returns:
        `(fitness, aux)`: fitness `Float[Array, "P"]` (float32 or wider) and the
        stacked aux (or None when `fitness_fn` returns a scalar). With a
        `MultiFidelity`, fitness is the combined fitness and aux is a dict:
        `proxy` (every genome's proxy fitness), `promoted` (bool mask of the k
        genomes evaluated fully), `proxy_aux` and `full_aux` (the rungs' aux;
        `full_aux` is zero for genomes not promoted).

    Example:
        >>> fitness, aux = eqxevo.evaluate(f, population, key)
        >>> fitness, aux = eqxevo.evaluate(f, population, key, batch_size=32)
    """
    check_batch_size(batch_size)
    evolvable, static = eqx.partition(population, filter_spec)
    size = population_size_of(population, filter_spec)
    check_divisible("population size", size, mesh_size(mesh))
    if isinstance(fitness_fn, MultiFidelity):
        if maximize is None:
            raise ValueError(
                "maximize: a MultiFidelity evaluation must know which fitness is "
                "better; pass maximize=True or False (strategy.maximize); got None"
            )
        fitness_fn.check(size, mesh)
        return _evaluate_multi_fidelity(
            fitness_fn, evolvable, static, key, size, maximize, mesh, batch_size
        )
    return _evaluate_genomes(
        fitness_fn, evolvable, static, key, jnp.arange(size), mesh, batch_size
    )


def _evaluate_multi_fidelity(
    fidelity: MultiFidelity,
    evolvable: Any,
    static: Any,
    key: PRNGKey,
    size: int,
    maximize: bool,
    mesh: Mesh | None,
    batch_size: int | None,
) -> tuple[Fitness, PyTree]:
    proxy, proxy_aux = _evaluate_genomes(
        fidelity.proxy_fn,
        evolvable,
        static,
        key,
        jnp.arange(size),
        mesh,
        batch_size,
    )
    promoted = promote(proxy, fidelity.num_promoted, maximize)
    # The proxy fitness is whole on every device, so is `promoted`: the gather
    # is local, and the k promoted genomes are split over the mesh again.
    chosen = jtu.tree_map(lambda x: x[promoted], evolvable)
    full, full_aux = _evaluate_genomes(
        fidelity.full_fn, chosen, static, key, promoted, mesh, batch_size
    )
    dtype = jnp.promote_types(proxy.dtype, full.dtype)
    fitness, mask = combine_fidelities(
        proxy.astype(dtype), full.astype(dtype), promoted, maximize
    )
    full_aux = jtu.tree_map(
        lambda a: jnp.zeros((size, *a.shape[1:]), a.dtype).at[promoted].set(a),
        full_aux,
    )
    aux = {
        "proxy": proxy,
        "promoted": mask,
        "proxy_aux": proxy_aux,
        "full_aux": full_aux,
    }
    return fitness, aux


def promote(
    proxy: Float[Array, " pop"], num_promoted: int, maximize: bool
) -> Int[Array, " k"]:
    """Indices of the `num_promoted` best genomes by proxy fitness, best first.

    Non-finite proxies (NaN, +-inf) count as worst; ties go to the lower genome
    index (`lax.top_k` is stable), so promotion is deterministic.
    """
    score = proxy if maximize else -proxy
    score = jnp.where(jnp.isfinite(score), score, -jnp.inf)
    # top_k orders -0.0 below +0.0; they are equal fitness, so make them one tie.
    score = jnp.where(score == 0, jnp.zeros_like(score), score)
    return jax.lax.top_k(score, num_promoted)[1]


def combine_fidelities(
    proxy: Float[Array, " pop"],
    full: Float[Array, " k"],
    promoted: Int[Array, " k"],
    maximize: bool,
) -> tuple[Float[Array, " pop"], Bool[Array, " pop"]]:
    """One fitness per genome from two rungs, promoted genomes ranked first.

    Promoted genome `promoted[j]` gets its full fitness `full[j]` unchanged. The
    others keep their proxy fitness, shifted, if needed, by one common offset so
    that the best of them lands just below the worst finite full fitness (the
    next float towards worse). So every promoted genome ranks strictly above
    every other one, and the order inside each group is kept (up to float
    rounding merging two proxy values, which only happens when the offset dwarfs
    their difference, or when they span more than the float range). When the
    proxies already rank below the full values nothing is shifted: with
    `proxy == full` the result equals single-fidelity fitness. Non-finite values
    stay as they are, for the non-finite policy downstream (a failed genome ranks
    worst whichever rung it failed in).

    Ties in the proxy are broken by genome index (`promote`); a tie across the
    promotion boundary leaves the lower index promoted and the other just below.

    Arguments:
        proxy: every genome's proxy fitness, in the user's sign.
        full: the promoted genomes' full fitness (same dtype).
        promoted: their genome indices (distinct).
        maximize: whether higher fitness is better.

    Returns:
        `(fitness, promoted_mask)`.
    """
    # Work in "higher is better"; negation is exact, so the sign round-trips.
    up = (lambda x: x) if maximize else jnp.negative
    s_proxy, s_full = up(proxy), up(full)
    mask = jnp.zeros(proxy.shape, jnp.bool_).at[promoted].set(True)
    full_finite = jnp.isfinite(s_full)
    floor = jnp.min(jnp.where(full_finite, s_full, jnp.inf))
    rest = ~mask & jnp.isfinite(s_proxy)
    top = jnp.max(jnp.where(rest, s_proxy, -jnp.inf))
    needs_shift = jnp.any(full_finite) & jnp.any(rest) & (top >= floor)
    info = jnp.finfo(proxy.dtype)
    # The next float below `floor`; near zero that is subnormal, which XLA:CPU
    # flushes to zero (== floor), so step at least the smallest normal number.
    ceiling = jnp.minimum(
        jnp.nextafter(floor, jnp.asarray(-jnp.inf, proxy.dtype)),
        floor - jnp.asarray(info.smallest_normal, proxy.dtype),
    )
    # ceiling - (top - s): (top - s) >= 0 rounds to >= 0, so every shifted value
    # is <= ceiling < floor whatever the rounding; equal gaps stay equal.
    lowest = jnp.asarray(info.min, proxy.dtype)  # never shift a finite value to -inf
    shifted = jnp.maximum(ceiling - (top - s_proxy), lowest)
    s_rest = jnp.where(needs_shift & jnp.isfinite(s_proxy), shifted, s_proxy)
    combined = s_rest.at[promoted].set(s_full)
    return up(combined), mask


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
    "MultiFidelity",
    "best_index",
    "combine_fidelities",
    "evaluate",
    "fitness_dtype",
    "fitness_summary",
    "genome_keys",
    "population_size_of",
    "promote",
    "rank_nonfinite_worst",
]
