"""Propagation through a sparse topology, in three layouts behind one interface.

All three compute the input current of every neuron,
`I[i] = sum over active edges e with dst[e] == i of w[e] * x[src[e]]`,
and differ only in how the per-edge values are stored (their *native* format):

- `SegmentLayout` ("segment"): `[E]`, one value per edge slot; gathers `x[src]`
  and reduces with `segment_sum` over the sorted `dst` (`indices_are_sorted=True`).
- `GatherLayout` ("gather"): `[K, N]`, slot-major fixed in-degree (K is the largest
  fan-in; shorter rows are masked); gathers `x[src[k]]` per slot and sums over
  slots, with no scatter at all.
- `DenseLayout` ("dense"): `[N, N]` masked weight matrix `W[post, pre]`; a
  matrix-vector product.

A fourth layout, `PallasLayout` ("pallas", in `fused.py`), stores values like
"gather" and runs a sparse policy's whole step (propagation, neuron update,
eligibility traces) as one Pallas kernel: Triton on GPU, interpret mode on CPU.

`make_layout(topology, "auto")` picks one by the measured rule in `choose_layout`.
A genome always stores its weights as `[E]` (the search space does not depend on
the layout); `native_weights` converts them once per lifetime, and plastic weights
and eligibility traces live in the native format so no step converts anything.

The layouts' `_`-prefixed methods take arrays with a trailing batch axis (see
`batching.population_last`): rates `[N, B]`, native values `[*native, B]`.
"""

import abc
from collections.abc import Callable
from typing import ClassVar, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._types import Array, Bool, Float, Int
from .batching import population_last
from .topology import Topology

LayoutName = Literal["segment", "gather", "dense", "pallas"]
# The XLA layouts (every platform); "pallas" is the fused kernel (fused.py).
LAYOUTS: tuple[str, ...] = ("segment", "gather", "dense")


def _masked(mask: Array, values: Array) -> Array:
    # where, not multiply: a masked-out edge has no effect even with an inf/NaN weight
    return jnp.where(mask, values, jnp.zeros((), values.dtype))


class AbstractLayout(eqx.Module):
    """How per-edge values are stored and propagated; built from a `Topology`.

    Index arrays are integer/boolean leaves (shared by a population, never evolved).
    """

    name: ClassVar[str]
    # Whether a population runs with its axis last (see `batching.population_last`).
    population_last: ClassVar[bool]
    num_neurons: eqx.AbstractVar[int]
    num_edges: eqx.AbstractVar[int]

    @property
    @abc.abstractmethod
    def native_shape(self) -> tuple[int, ...]:
        """Shape of one genome's per-edge values in this layout."""

    def native_weights(self, weights: Float[Array, " edges"]) -> Float[Array, "..."]:
        """Edge-list values `[E]` in the native format; masked-out edges become 0."""
        return self._native(weights[:, None])[..., 0]

    @abc.abstractmethod
    def edge_values(self, native: Float[Array, "..."]) -> Float[Array, " edges"]:
        """Native values back as `[E]` (0 on masked-out edge slots)."""

    @abc.abstractmethod
    def native_mask(self) -> Bool[Array, "..."]:
        """True where a native entry is an active edge."""

    # -- trailing-batch internals -------------------------------------------------

    @abc.abstractmethod
    def _native(self, weights: Array) -> Array:
        """`native_weights` for `[E, B]` values: `[*native, B]`."""

    @abc.abstractmethod
    def _pre(self, x: Array) -> Array:
        """`x[src]` per native entry, `[*native, B]` or broadcastable to it."""

    @abc.abstractmethod
    def _post(self, x: Array) -> Array:
        """`x[dst]` per native entry, `[*native, B]` or broadcastable to it."""

    @abc.abstractmethod
    def _collect(self, values: Array) -> Array:
        """Sum native `[*native, B]` values into their destination neurons `[N, B]`."""

    def _propagate(self, weights: Array, x: Array) -> Array:
        """Currents `[N, B]` from native weights `[*native, B]` and rates `[N, B]`."""
        return self._collect(weights * self._pre(x))

    def _propagate_pre(self, weights: Array, x: Array) -> tuple[Array, Array]:
        """`(currents, pre)`: propagation plus the presynaptic values it gathered."""
        pre = self._pre(x)
        return self._collect(weights * pre), pre


class SegmentLayout(AbstractLayout):
    """Edge list `[E]`: gather `x[src]`, `segment_sum` over the sorted `dst`."""

    name: ClassVar[str] = "segment"
    population_last: ClassVar[bool] = True
    src: Int[Array, " edges"]
    dst: Int[Array, " edges"]
    mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    num_edges: int = eqx.field(static=True)

    def __init__(self, topology: Topology):
        self.src, self.dst, self.mask = topology.src, topology.dst, topology.mask
        self.num_neurons = topology.num_neurons
        self.num_edges = topology.num_edges

    @property
    def native_shape(self) -> tuple[int, ...]:
        return (self.num_edges,)

    def native_weights(self, weights: Float[Array, " edges"]) -> Float[Array, " edges"]:
        return _masked(self.mask, weights)

    def edge_values(self, native: Float[Array, " edges"]) -> Float[Array, " edges"]:
        return _masked(self.mask, native)

    def native_mask(self) -> Bool[Array, " edges"]:
        return self.mask

    def _native(self, weights: Array) -> Array:
        return _masked(self.mask[:, None], weights)

    def _pre(self, x: Array) -> Array:
        return x[self.src]

    def _post(self, x: Array) -> Array:
        return x[self.dst]

    def _collect(self, values: Array) -> Array:
        return jax.ops.segment_sum(
            values, self.dst, self.num_neurons, indices_are_sorted=True
        )


class GatherLayout(AbstractLayout):
    """Fixed in-degree `[K, N]`: per slot k, gather `x[src[k]]`; sum over slots."""

    name: ClassVar[str] = "gather"
    population_last: ClassVar[bool] = True
    src: Int[Array, "slots neurons"]
    edge: Int[Array, "slots neurons"]
    mask: Bool[Array, "slots neurons"]
    edge_slot: Int[Array, " edges"]
    edge_dst: Int[Array, " edges"]
    edge_mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    num_edges: int = eqx.field(static=True)
    num_slots: int = eqx.field(static=True)

    def __init__(self, topology: Topology):
        n, e = topology.num_neurons, topology.num_edges
        k = max(1, topology.max_fan_in)
        src = np.asarray(topology.src)
        dst = np.asarray(topology.dst)
        mask = np.asarray(topology.mask)
        active = np.flatnonzero(mask)
        # Active edges are sorted by dst: an edge's slot is its rank within its dst.
        starts = np.searchsorted(dst[active], np.arange(n))
        slot = np.zeros(e, np.int64)
        slot[active] = np.arange(active.size) - starts[dst[active]]
        table_src = np.zeros((k, n), np.int64)
        table_edge = np.zeros((k, n), np.int64)
        table_mask = np.zeros((k, n), bool)
        table_src[slot[active], dst[active]] = src[active]
        table_edge[slot[active], dst[active]] = active
        table_mask[slot[active], dst[active]] = True
        self.src = jnp.asarray(table_src, jnp.int32)
        self.edge = jnp.asarray(table_edge, jnp.int32)
        self.mask = jnp.asarray(table_mask)
        self.edge_slot = jnp.asarray(slot, jnp.int32)
        self.edge_dst = jnp.asarray(dst, jnp.int32)
        self.edge_mask = jnp.asarray(mask)
        self.num_neurons, self.num_edges, self.num_slots = n, e, k

    @property
    def native_shape(self) -> tuple[int, ...]:
        return (self.num_slots, self.num_neurons)

    def native_weights(
        self, weights: Float[Array, " edges"]
    ) -> Float[Array, "slots neurons"]:
        return self._native(weights[:, None])[..., 0]

    def edge_values(
        self, native: Float[Array, "slots neurons"]
    ) -> Float[Array, " edges"]:
        return _masked(self.edge_mask, native[self.edge_slot, self.edge_dst])

    def _native(self, weights: Array) -> Array:
        return _masked(self.mask[..., None], weights[self.edge])

    def native_mask(self) -> Bool[Array, "slots neurons"]:
        return self.mask

    def _pre(self, x: Array) -> Array:
        return x[self.src]

    def _post(self, x: Array) -> Array:
        return x[None]

    def _collect(self, values: Array) -> Array:
        # A loop over slots: each iteration adds one contiguous [N, B] slab. XLA's
        # fused reduction over the leading axis of [K, N, B] was up to 20x slower.
        def body(k: Array, acc: Array) -> Array:
            return acc + values[k]

        return lax.fori_loop(0, self.num_slots, body, jnp.zeros_like(values[0]))

    def _propagate(self, weights: Array, x: Array) -> Array:
        def body(k: Array, acc: Array) -> Array:
            return acc + weights[k] * x[self.src[k]]

        init = jnp.zeros(x.shape[:1] + weights.shape[2:], x.dtype)
        return lax.fori_loop(0, self.num_slots, body, init)


class DenseLayout(AbstractLayout):
    """Masked weight matrix `[N, N]` (`[post, pre]`): a matrix-vector product."""

    name: ClassVar[str] = "dense"
    # A batched matrix-vector product wants the population axis first: JAX's
    # default vmap already does the right thing.
    population_last: ClassVar[bool] = False
    mask: Bool[Array, "neurons neurons"]
    src: Int[Array, " edges"]
    dst: Int[Array, " edges"]
    edge_mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    num_edges: int = eqx.field(static=True)

    def __init__(self, topology: Topology):
        self.src, self.dst, self.edge_mask = topology.src, topology.dst, topology.mask
        self.mask = topology.adjacency()
        self.num_neurons = topology.num_neurons
        self.num_edges = topology.num_edges

    @property
    def native_shape(self) -> tuple[int, ...]:
        return (self.num_neurons, self.num_neurons)

    def native_weights(
        self, weights: Float[Array, " edges"]
    ) -> Float[Array, "neurons neurons"]:
        return self._native(weights[:, None])[..., 0]

    def edge_values(
        self, native: Float[Array, "neurons neurons"]
    ) -> Float[Array, " edges"]:
        return _masked(self.edge_mask, native[self.dst, self.src])

    def _native(self, weights: Array) -> Array:
        n = self.num_neurons
        values = _masked(self.edge_mask[:, None], weights)
        # add, not set: padding slots point at (N-1, 0) and must not overwrite an
        # active edge there.
        zeros = jnp.zeros((n, n, weights.shape[-1]), weights.dtype)
        return zeros.at[self.dst, self.src].add(values)

    def native_mask(self) -> Bool[Array, "neurons neurons"]:
        return self.mask

    def _pre(self, x: Array) -> Array:
        return x[None, :]

    def _post(self, x: Array) -> Array:
        return x[:, None]

    def _collect(self, values: Array) -> Array:
        return jnp.sum(values, axis=1)

    def _propagate_pre(self, weights: Array, x: Array) -> tuple[Array, Array]:
        return self._propagate(weights, x), self._pre(x)

    def _propagate(self, weights: Array, x: Array) -> Array:
        if weights.shape[-1] == 1 and x.shape[-1] == 1:
            return (weights[..., 0] @ x[..., 0])[..., None]
        return jnp.einsum("ijb,jb->ib", weights, x)


# -- choosing a layout ------------------------------------------------------------

# Measured crossovers on CPU (docs/performance.md "Layouts"; reproduce with
# `eqxevo bench --only layouts`): segment wins up to these fan-ins, gather above
# them; dense never won on CPU at densities up to 25% (N = 64 ... 4096).
SEGMENT_MAX_FAN_IN_CPU = 16
SEGMENT_MAX_FAN_IN_CPU_PLASTIC = 4
# ... and segment again at very large fan-in without plasticity (K = 512 and 1024
# at N = 4096; gather won at K = 246 and 256): the threshold sits between.
GATHER_MAX_FAN_IN_CPU = 384
# gather's slots (K * N) beyond this multiple of E_max count as ragged
RAGGED_SLOTS = 1.25


def choose_layout(
    num_neurons: int,
    num_edges: int,
    max_fan_in: int,
    *,
    plastic: bool = False,
    platform: str | None = None,
) -> str:
    """The layout `"auto"` picks for a topology, by the measured rule.

    On CPU (measured): `"segment"` when the fan-in K is at most 16 (4 with
    plasticity), else `"gather"`, except `"segment"` again for K above 384
    without plasticity; at every measured point the pick is within 0.9x
    of the fastest layout. A ragged in-degree (K * N > 1.25 E_max) always gets
    `"segment"` (gather would store mostly padding). On GPU (not measured yet):
    `"pallas"`, the fused kernel, which like `"gather"` has no scatter (so it
    avoids the vmapped-`segment_sum` and scatter-add slowdowns listed in
    PERFORMANCE_NOTES.md) and runs a whole step in one launch. On TPU (not
    measured): `"gather"`. Pass `layout=` to override; the XLA layouts are the
    fallback.

    Arguments:
        num_neurons: N.
        num_edges: E_max.
        max_fan_in: K (the gather layout stores `K * N` slots).
        plastic: whether per-edge weights and traces are updated every step.
        platform: `"cpu"`, `"gpu"`, `"tpu"`; default `jax.default_backend()`.

    Returns:
        `"segment"`, `"gather"` or `"pallas"` (never `"dense"`).
    """
    # A ragged in-degree (max fan-in far above the mean) would make gather's
    # K * N slots mostly padding: the edge list is the only compact layout then.
    if max(1, max_fan_in) * num_neurons > RAGGED_SLOTS * num_edges:
        return "segment"
    platform = platform or jax.default_backend()
    if platform == "gpu":
        return "pallas"
    if platform != "cpu":
        return "gather"
    if plastic:
        return "segment" if max_fan_in <= SEGMENT_MAX_FAN_IN_CPU_PLASTIC else "gather"
    if SEGMENT_MAX_FAN_IN_CPU < max_fan_in <= GATHER_MAX_FAN_IN_CPU:
        return "gather"
    return "segment"


_LAYOUT_CLASSES: dict[str, Callable[[Topology], AbstractLayout]] = {
    "segment": SegmentLayout,
    "gather": GatherLayout,
    "dense": DenseLayout,
}


def _propagate_trailing(layout: AbstractLayout, data: tuple[Array, Array]) -> Array:
    weights, x = data
    return layout._propagate(weights, x)


def propagate(
    layout: AbstractLayout,
    weights: Float[Array, "..."],
    rates: Float[Array, " neurons"],
) -> Float[Array, " neurons"]:
    """Input currents `I[i] = sum_{e: dst=i} w[e] * rates[src[e]]` for one genome.

    Arguments:
        layout: a layout from `make_layout`.
        weights: native weights (`layout.native_weights(w)`), shape
            `layout.native_shape`.
        rates: presynaptic activity `[N]`.

    Under `jax.vmap` over genomes, layouts with `population_last` run once for the
    whole population with its axis last (see `batching.population_last`).
    """
    if weights.shape != layout.native_shape:
        raise ValueError(
            f"weights: expected the {layout.name} layout's native shape "
            f"{layout.native_shape}; got {weights.shape}. Convert an edge list with "
            "layout.native_weights(w)."
        )
    fn = population_last(_propagate_trailing, enabled=layout.population_last)
    return fn(layout, (weights, rates))


__all__ = [
    "LAYOUTS",
    "AbstractLayout",
    "DenseLayout",
    "GatherLayout",
    "LayoutName",
    "SegmentLayout",
    "choose_layout",
    "propagate",
]
