"""`population_last`: a per-genome network step that, under vmap, runs the whole
population at once with its axis last. See docs/networks.md ("Population-last").
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
        once with the population as the trailing axis; an outer vmap batches
        that call with JAX's own rules; forward-mode differentiation works,
        reverse mode does not (`custom_vmap`).
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
        # A batched index (a topology per genome) cannot share one gather: fall
        # back to the ordinary vmap.
        if any(jax.tree.leaves(index_batched)):
            axes = jax.tree.map(
                lambda b: 0 if b else None, (index_batched, data_batched)
            )
            out = jax.vmap(per_genome, in_axes=axes)(index, data)
            return out, jax.tree.map(lambda _: True, out)

        # The moves sit behind optimization barriers: without them XLA fuses each
        # transpose into its consumer as a strided read (3.7 ns per element
        # against 0.14 ns for the standalone transpose). Inside a scan, layout
        # assignment then keeps the carried arrays population-minor, and most
        # moves cost nothing.
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
