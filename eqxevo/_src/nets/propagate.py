"""Propagation layouts: how per-edge values are stored and summed into neurons.

See docs/networks.md ("Propagation layouts") for the layouts and how one is picked.
"""

import abc
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
    # where, not multiply: a masked-out edge stays 0 even with an inf/NaN weight
    return jnp.where(mask, values, jnp.zeros((), values.dtype))


class AbstractLayout(eqx.Module):
    """How per-edge values are stored and propagated; built from a `Topology`.

    A genome keeps its weights as an edge list `[E]`; a layout stores per-edge
    values in its *native* shape (`native_shape`) and sums them into neurons.
    Index arrays are integer/boolean leaves (shared by a population, never evolved).

    A layout provides `native_shape`, `edge_values`, `native_mask` (one genome)
    and `to_native`, `pre`, `post`, `collect` (population-last: every array has
    a trailing batch axis B, see `batching.population_last`); `currents` and
    `currents_and_pre` follow from those, and a layout may override them with a
    faster route.
    """

    name: ClassVar[str]
    # Whether a population runs with its axis last (see `batching.population_last`).
    population_last: ClassVar[bool]
    num_neurons: eqx.AbstractVar[int]
    num_edges: eqx.AbstractVar[int]

    # -- one genome -----------------------------------------------------------------

    @property
    @abc.abstractmethod
    def native_shape(self) -> tuple[int, ...]:
        """Shape of one genome's per-edge values in this layout."""

    def native_weights(self, weights: Float[Array, " edges"]) -> Float[Array, "..."]:
        """Edge-list values `[E]` in the native shape; masked-out edges become 0."""
        return self.to_native(weights[:, None])[..., 0]

    @abc.abstractmethod
    def edge_values(self, native: Float[Array, "..."]) -> Float[Array, " edges"]:
        """Native values back as an edge list `[E]` (0 on masked-out edge slots)."""

    @abc.abstractmethod
    def native_mask(self) -> Bool[Array, "..."]:
        """`[*native]`: True where a native entry is an active edge."""

    # -- population-last (a trailing batch axis B on every array) -------------------

    @abc.abstractmethod
    def to_native(
        self, weights: Float[Array, "edges batch"]
    ) -> Float[Array, "*native batch"]:
        """Edge-list values `[E, B]` in the native shape `[*native, B]`."""

    @abc.abstractmethod
    def pre(self, x: Float[Array, "neurons batch"]) -> Float[Array, "..."]:
        """`x[src]` per native entry: `[*native, B]` or broadcastable to it."""

    @abc.abstractmethod
    def post(self, x: Float[Array, "neurons batch"]) -> Float[Array, "..."]:
        """`x[dst]` per native entry: `[*native, B]` or broadcastable to it."""

    @abc.abstractmethod
    def collect(
        self, values: Float[Array, "*native batch"]
    ) -> Float[Array, "neurons batch"]:
        """Sum native values `[*native, B]` into their destination neurons `[N, B]`."""

    def currents(
        self,
        weights: Float[Array, "*native #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> Float[Array, " neurons #batch"]:
        """Input currents `[N, B]` from native weights and rates `[N, B]`."""
        return self.collect(weights * self.pre(x))

    def currents_and_pre(
        self,
        weights: Float[Array, "*native #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> tuple[Float[Array, " neurons #batch"], Float[Array, "..."]]:
        """`(currents(weights, x), pre(x))`: plasticity needs the gathered `pre` too."""
        pre = self.pre(x)
        return self.collect(weights * pre), pre


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

    def edge_values(self, native: Float[Array, " edges"]) -> Float[Array, " edges"]:
        return _masked(self.mask, native)

    def native_mask(self) -> Bool[Array, " edges"]:
        return self.mask

    def to_native(
        self, weights: Float[Array, "edges batch"]
    ) -> Float[Array, "edges batch"]:
        return _masked(self.mask[:, None], weights)

    def pre(self, x: Float[Array, "neurons batch"]) -> Float[Array, "edges batch"]:
        return x[self.src]

    def post(self, x: Float[Array, "neurons batch"]) -> Float[Array, "edges batch"]:
        return x[self.dst]

    def collect(
        self, values: Float[Array, "edges batch"]
    ) -> Float[Array, "neurons batch"]:
        # canonical topologies sort dst over the whole array (padding included)
        return jax.ops.segment_sum(
            values, self.dst, self.num_neurons, indices_are_sorted=True
        )


class GatherLayout(AbstractLayout):
    """Fixed in-degree `[K, N]`: per slot k, gather `x[src[k]]`; sum over slots.

    K is the largest fan-in; a neuron with fewer inputs has masked-out slots.
    """

    name: ClassVar[str] = "gather"
    population_last: ClassVar[bool] = True
    src: Int[Array, "slots neurons"]  # source neuron of slot (k, i)
    edge: Int[Array, "slots neurons"]  # edge-list id of slot (k, i)
    mask: Bool[Array, "slots neurons"]
    edge_slot: Int[Array, " edges"]  # slot k of edge e (its dst is the column)
    edge_dst: Int[Array, " edges"]
    edge_mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    num_edges: int = eqx.field(static=True)
    num_slots: int = eqx.field(static=True)

    def __init__(self, topology: Topology):
        n, e = topology.num_neurons, topology.num_edges
        k = max(1, topology.max_fan_in)  # one slot even without edges: static shapes
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

    def edge_values(self, native: Float[Array, "slots cols"]) -> Float[Array, " edges"]:
        return _masked(self.edge_mask, native[self.edge_slot, self.edge_dst])

    def native_mask(self) -> Bool[Array, "slots cols"]:
        return self.mask

    def to_native(
        self, weights: Float[Array, "edges batch"]
    ) -> Float[Array, "slots cols batch"]:
        return _masked(self.mask[..., None], weights[self.edge])

    def pre(self, x: Float[Array, "neurons batch"]) -> Float[Array, "slots cols batch"]:
        return x[self.src]

    def post(self, x: Float[Array, "neurons batch"]) -> Float[Array, "1 neurons batch"]:
        return x[None]

    def collect(
        self, values: Float[Array, "slots neurons batch"]
    ) -> Float[Array, "neurons batch"]:
        # A loop over slots: each iteration adds one contiguous [N, B] slab. XLA's
        # fused reduction over the leading axis of [K, N, B] was up to 20x slower.
        def body(k: Array, acc: Array) -> Array:
            return acc + values[k]

        return lax.fori_loop(0, self.num_slots, body, jnp.zeros_like(values[0]))

    def currents(
        self,
        weights: Float[Array, "slots neurons #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> Float[Array, " neurons #batch"]:
        # as collect(weights * pre(x)), without materialising the [K, N, B] product
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

    def edge_values(
        self, native: Float[Array, "neurons neurons"]
    ) -> Float[Array, " edges"]:
        return _masked(self.edge_mask, native[self.dst, self.src])

    def native_mask(self) -> Bool[Array, "neurons neurons"]:
        return self.mask

    def to_native(
        self, weights: Float[Array, "edges batch"]
    ) -> Float[Array, "neurons neurons batch"]:
        n = self.num_neurons
        values = _masked(self.edge_mask[:, None], weights)
        # add, not set: padding slots point at (N-1, 0) and must not overwrite an
        # active edge there.
        zeros = jnp.zeros((n, n, weights.shape[-1]), weights.dtype)
        return zeros.at[self.dst, self.src].add(values)

    def pre(self, x: Float[Array, "neurons batch"]) -> Float[Array, "1 neurons batch"]:
        return x[None, :]

    def post(self, x: Float[Array, "neurons batch"]) -> Float[Array, "neurons 1 batch"]:
        return x[:, None]

    def collect(
        self, values: Float[Array, "neurons neurons batch"]
    ) -> Float[Array, "neurons batch"]:
        return jnp.sum(values, axis=1)

    def currents(
        self,
        weights: Float[Array, "neurons neurons #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> Float[Array, " neurons #batch"]:
        # one genome (B = 1, the per-genome vmap path): a plain matrix-vector product
        if weights.shape[-1] == 1 and x.shape[-1] == 1:
            return (weights[..., 0] @ x[..., 0])[..., None]
        return jnp.einsum("ijb,jb->ib", weights, x)

    def currents_and_pre(
        self,
        weights: Float[Array, "neurons neurons #batch"],
        x: Float[Array, " neurons #batch"],
    ) -> tuple[Float[Array, " neurons #batch"], Float[Array, "1 neurons #batch"]]:
        return self.currents(weights, x), self.pre(x)


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
# On GPU segment's scatter-add runs on atomics: the same key gave other bits on an
# H100, so "auto" picks a deterministic layout there: dense up to this many
# neurons (0.77-0.98x of segment at the N = 64/128 milestones on an H100; ahead of
# gather at N = 64 on an H200), gather above (ahead of dense from N = 256, H200).
DENSE_MAX_NEURONS_GPU = 128


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
    of the fastest layout. A ragged in-degree (K * N > 1.25 E_max) gets
    `"segment"` (gather would store mostly padding). On GPU a deterministic
    layout, never `"segment"` (its scatter-add runs on XLA:GPU's atomics, so the
    same key gave other bits on an NVIDIA H100; docs/performance.md): `"dense"` up
    to 128 neurons, else `"gather"`. On TPU (not measured): `"gather"`. Pass
    `layout=` to override.

    Arguments:
        num_neurons: N.
        num_edges: E_max.
        max_fan_in: K (the gather layout stores `K * N` slots).
        plastic: whether per-edge weights and traces are updated every step.
        platform: `"cpu"`, `"gpu"`, `"tpu"`; default `jax.default_backend()`.

    Returns:
        `"segment"`, `"gather"` or (GPU) `"dense"`; never `"pallas"`.
    """
    platform = platform or jax.default_backend()
    if platform == "gpu":
        return "dense" if num_neurons <= DENSE_MAX_NEURONS_GPU else "gather"
    # A ragged in-degree (max fan-in far above the mean) would make gather's
    # K * N slots mostly padding: the edge list is the only compact layout then.
    if max(1, max_fan_in) * num_neurons > RAGGED_SLOTS * num_edges:
        return "segment"
    if platform != "cpu":
        return "gather"
    if plastic:
        return "segment" if max_fan_in <= SEGMENT_MAX_FAN_IN_CPU_PLASTIC else "gather"
    if SEGMENT_MAX_FAN_IN_CPU < max_fan_in <= GATHER_MAX_FAN_IN_CPU:
        return "gather"
    return "segment"


def _propagate_trailing(layout: AbstractLayout, data: tuple[Array, Array]) -> Array:
    weights, x = data
    return layout.currents(weights, x)


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
