"""How a sparse network meets the world: which neurons take the observation and
which give the action (static ids), and the injection and readout through them."""

from collections.abc import Sequence

import jax.numpy as jnp

from .._types import Array


def neuron_ids(
    name: str, ids: Sequence[int] | None, default: range, num_neurons: int, size: int
) -> tuple[int, ...]:
    """`ids` (default `default`) as distinct neuron ids, `size` of them.

    Static ints: injection and readout index with constants (contiguous: a slice).
    """
    out = tuple(default) if ids is None else tuple(int(i) for i in ids)
    if len(out) != size:
        raise ValueError(f"{name} must name {size} neurons; got {len(out)}: {out}")
    if any(i < 0 or i >= num_neurons for i in out) or len(set(out)) != len(out):
        raise ValueError(
            f"{name} must be distinct neuron ids in [0, {num_neurons}); got {out}"
        )
    return out


def contiguous(ids: tuple[int, ...]) -> bool:
    """Whether `ids` is a run of consecutive neuron ids."""
    return ids == tuple(range(ids[0], ids[0] + len(ids)))


def inject(current: Array, values: Array, ids: tuple[int, ...]) -> Array:
    """Add `values[k]` to `current[ids[k]]` (trailing axes broadcast)."""
    # A contiguous block of ids (the default) is a pad and an add: no scatter.
    if contiguous(ids):
        start, n = ids[0], current.shape[0]
        pad = ((start, n - start - len(ids)),) + ((0, 0),) * (values.ndim - 1)
        return current + jnp.pad(values, pad)
    return current.at[jnp.asarray(ids)].add(values)


def external_current(x: Array, values: Array, ids: tuple[int, ...]) -> Array:
    """The injected current alone, `[N, B]`: what the fused kernel adds to `W x`."""
    zeros = jnp.zeros((x.shape[0], values.shape[-1]), x.dtype)
    return inject(zeros, values, ids)


def read_out(values: Array, ids: tuple[int, ...]) -> Array:
    """`values[ids]` (leading axis; a slice where the ids are contiguous)."""
    if contiguous(ids):
        return values[ids[0] : ids[0] + len(ids)]
    return values[jnp.asarray(ids)]


__all__ = ["contiguous", "external_current", "inject", "neuron_ids", "read_out"]
