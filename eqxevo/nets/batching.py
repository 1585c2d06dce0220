"""Population-last batching: how a per-genome network step runs fast under vmap.

Networks are written per genome (the policy protocol is per genome, and
`eqxevo.evaluate` vmaps it over the population). The default vmap of a sparse step
is slow on CPU: JAX batches `x[src]` and `segment_sum(..., dst)` with the
population axis first, and XLA then gathers and scatters single elements with a
stride of N (measured 4-20 ns per edge on a 2-core EPYC; see docs/performance.md).
With the population axis *last*, the same gather copies contiguous rows of P
values and the scatter adds contiguous rows (0.2-0.8 ns per edge).

`population_last(fn)` gives a per-genome function whose vmap rule moves the
population axis to the end, calls `fn` once for the whole population, and moves
it back. `fn` is written for a trailing batch axis: every array of `data` (and of
its output) has one, of size 1 for a single genome and P under vmap; `index`
holds integer topology arrays and never has one. The moves sit behind
`lax.optimization_barrier`: without it XLA fuses each transpose into its consumer
as a strided read (measured 3.7 ns per element against 0.14 ns for the standalone
transpose), and inside a `lax.scan` XLA's layout assignment then keeps the carried
arrays population-minor, so most moves cost nothing at all.

The rule is plain `jax.custom_batching.custom_vmap`: it nests (an outer vmap, over
seeds say, batches the rule's body with JAX's own rules), and supports
forward-mode differentiation but not reverse mode. When `index` itself is batched
(a different topology per genome) it falls back to the ordinary vmap.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_batching import custom_vmap

from .._types import PyTree


def _with_batch_axis(data: PyTree) -> PyTree:
    return jax.tree.map(lambda x: jnp.asarray(x)[..., None], data)


def _without_batch_axis(data: PyTree) -> PyTree:
    return jax.tree.map(lambda y: y[..., 0], data)


def population_last(
    fn: Callable[[PyTree, PyTree], PyTree], *, enabled: bool = True
) -> Callable[[PyTree, PyTree], PyTree]:
    """Make `fn(index, data)`, written for a trailing batch axis, a per-genome function.

    Arguments:
        fn: `fn(index, data) -> out`. Every array in `data` and `out` carries a
            trailing batch axis; arrays in `index` do not. `fn` must only use
            operations that broadcast over that axis (elementwise maths, indexing
            and reductions over leading axes).
        enabled: if False, return the plain per-genome function and let JAX's
            default vmap rules batch it (the dense layout prefers that: a batched
            matrix-vector product wants the population axis first).

    Returns:
        `f(index, data) -> out` without the batch axis. `jax.vmap(f)` runs `fn`
        once with the population as the trailing axis.
    """

    def per_genome(index: PyTree, data: PyTree) -> PyTree:
        return _without_batch_axis(fn(index, _with_batch_axis(data)))

    if not enabled:
        return per_genome

    wrapped = custom_vmap(per_genome)

    @wrapped.def_vmap
    def _rule(
        axis_size: int, in_batched: list[Any], index: PyTree, data: PyTree
    ) -> tuple[PyTree, PyTree]:
        index_batched, data_batched = in_batched
        if any(jax.tree.leaves(index_batched)):
            axes = jax.tree.map(
                lambda b: 0 if b else None, (index_batched, data_batched)
            )
            out = jax.vmap(per_genome, in_axes=axes)(index, data)
            return out, jax.tree.map(lambda _: True, out)

        # One barrier per leaf: a loop-invariant input (the genome's weights inside
        # a rollout's scan) then stays loop-invariant, and XLA hoists its
        # transpose out of the loop. One barrier over everything would tie it to
        # the carried state and keep it in the loop.
        def move(x: jax.Array, batched: bool) -> jax.Array:
            if not batched:
                return jnp.asarray(x)[..., None]
            return lax.optimization_barrier(jnp.moveaxis(x, 0, -1))

        def back(y: jax.Array) -> jax.Array:
            y = jnp.broadcast_to(y, (*y.shape[:-1], axis_size))
            return lax.optimization_barrier(jnp.moveaxis(y, -1, 0))

        out = fn(index, jax.tree.map(move, data, data_batched))
        out = jax.tree.map(back, out)
        return out, jax.tree.map(lambda _: True, out)

    return wrapped


__all__ = ["population_last"]
