"""`Topology`: a fixed-size edge list sorted by destination, shared by a population.

See docs/networks.md ("Topology") for the canonical edge order the layouts rely on.
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import positive_int
from .._types import Array, Bool, Int, PRNGKey


def _rng(key: PRNGKey) -> np.random.Generator:
    """A NumPy generator seeded by a JAX key.

    Topologies are drawn on the host with NumPy: a draw is then instant for any N
    (a jitted JAX draw compiles once per shape, which dominated small tests).
    """
    data = jr.key_data(key) if jnp.issubdtype(key.dtype, jr.key(0).dtype) else key
    return np.random.default_rng(np.asarray(data, np.uint32).ravel().tolist())


def _concrete(name: str, value: Any) -> np.ndarray:
    try:
        return np.asarray(value)
    except jax.errors.TracerArrayConversionError as err:
        raise ValueError(
            f"{name}: a Topology is built from concrete arrays, outside jit/vmap "
            "(it computes static sizes such as the largest fan-in); got a tracer"
        ) from err


def _possible_edges(num_neurons: int, p: Any, self_connections: bool) -> int:
    """The number of edges `Topology.random` may draw; checks `p`."""
    if not (isinstance(p, int | float) and 0.0 < p <= 1.0):
        raise ValueError(f"p must be a probability in (0, 1]; got {p!r}")
    pairs = num_neurons * (num_neurons if self_connections else num_neurons - 1)
    if pairs == 0:
        raise ValueError("num_neurons=1 without self_connections has no possible edge")
    return pairs


class Topology(eqx.Module):
    """A directed edge list of fixed size `E_max`, sorted by destination.

    Build one with `Topology.fixed_fan_in`, `Topology.random` or
    `Topology.from_adjacency`; the constructor itself takes edge arrays in any order
    and puts them in canonical order, which the layouts rely on: active edges
    first, sorted by `(dst, src)`, then padding edges `0 -> N-1` (masked out), so
    `dst` is sorted over the whole array and an edge id is stable.

    Arguments:
        src, dst: integer arrays of length `E_max`, the edge `src[e] -> dst[e]`.
        num_neurons: N; every id is in `[0, N)`.
        mask: which edges exist (default: all). Masked-out edges are padding: they
            never carry a signal, whatever weight they are given.

    Attributes:
        src, dst: int32 `[E_max]`, `dst` sorted (non-decreasing).
        mask: bool `[E_max]`.
        num_neurons: N (static).
        max_fan_in: largest number of active edges into one neuron (static); the
            width of the fixed in-degree layout.

    Raises:
        ValueError: ids out of range, mismatched lengths, or an edge that appears
            twice among the active edges (weights of duplicates could not be told
            apart by the dense layout).
    """

    src: Int[Array, " edges"]
    dst: Int[Array, " edges"]
    mask: Bool[Array, " edges"]
    num_neurons: int = eqx.field(static=True)
    max_fan_in: int = eqx.field(static=True)

    def __init__(
        self,
        src: Any,
        dst: Any,
        num_neurons: int,
        mask: Any = None,
    ):
        num_neurons = positive_int("num_neurons", num_neurons)
        src_np = _concrete("src", src).astype(np.int64).ravel()
        dst_np = _concrete("dst", dst).astype(np.int64).ravel()
        if src_np.shape != dst_np.shape:
            raise ValueError(
                f"src and dst must have the same length; got {src_np.shape[0]} and "
                f"{dst_np.shape[0]}"
            )
        if src_np.size == 0:
            raise ValueError("a Topology needs E_max >= 1 edge slots; got 0")
        mask_np = (
            np.ones(src_np.shape, bool)
            if mask is None
            else _concrete("mask", mask).astype(bool).ravel()
        )
        if mask_np.shape != src_np.shape:
            raise ValueError(
                f"mask must have the same length as src ({src_np.shape[0]}); got "
                f"{mask_np.shape[0]}"
            )
        for name, ids in (("src", src_np), ("dst", dst_np)):
            active = ids[mask_np]
            if active.size and (active.min() < 0 or active.max() >= num_neurons):
                raise ValueError(
                    f"{name}: neuron ids must be in [0, {num_neurons}); got values in "
                    f"[{active.min()}, {active.max()}]"
                )
        a_src, a_dst = src_np[mask_np], dst_np[mask_np]
        order = np.lexsort((a_src, a_dst))  # by dst, then src (the last key leads)
        a_src, a_dst = a_src[order], a_dst[order]
        # one int per (dst, src): after the sort a duplicate is next to its twin
        pairs = a_dst * num_neurons + a_src
        if pairs.size > 1 and np.any(pairs[1:] == pairs[:-1]):
            dup = int(np.argmax(pairs[1:] == pairs[:-1]))
            raise ValueError(
                f"duplicate edge {int(a_src[dup])} -> {int(a_dst[dup])}: each active "
                "edge may appear once"
            )
        num_edges, num_active = src_np.size, a_src.size
        pad = num_edges - num_active
        self.src = jnp.asarray(
            np.concatenate([a_src, np.zeros(pad, np.int64)]), jnp.int32
        )
        self.dst = jnp.asarray(
            np.concatenate([a_dst, np.full(pad, num_neurons - 1, np.int64)]), jnp.int32
        )
        self.mask = jnp.asarray(np.arange(num_edges) < num_active)
        self.num_neurons = num_neurons
        counts = np.bincount(a_dst, minlength=num_neurons)
        self.max_fan_in = int(counts.max()) if num_active else 0

    # -- sizes ------------------------------------------------------------------

    @property
    def num_edges(self) -> int:
        """E_max, the fixed number of edge slots."""
        return int(self.src.shape[0])

    @property
    def num_active(self) -> int:
        """Number of active (unmasked) edges; needs a concrete topology."""
        return int(np.sum(np.asarray(self.mask)))

    @property
    def density(self) -> float:
        """Active edges over N^2."""
        return self.num_active / self.num_neurons**2

    def adjacency(self) -> Bool[Array, "neurons neurons"]:
        """The boolean adjacency matrix `[post, pre]` of the active edges (host)."""
        n = self.num_neurons
        mask = np.asarray(self.mask)
        adj = np.zeros((n, n), bool)
        adj[np.asarray(self.dst)[mask], np.asarray(self.src)[mask]] = True
        return jnp.asarray(adj)

    # -- constructors -------------------------------------------------------------

    @classmethod
    def from_adjacency(
        cls, adjacency: Any, *, num_edges: int | None = None
    ) -> "Topology":
        """A topology from a square adjacency matrix (`adjacency[post, pre] != 0`).

        Arguments:
            adjacency: `[N, N]` array; nonzero entry `[i, j]` is the edge `j -> i`.
            num_edges: E_max (default: the number of edges). Must be at least the
                number of nonzero entries.
        """
        adj = _concrete("adjacency", adjacency)
        if adj.ndim != 2 or adj.shape[0] != adj.shape[1] or adj.shape[0] < 1:
            raise ValueError(
                f"adjacency must be a non-empty square matrix [N, N]; got shape "
                f"{adj.shape}"
            )
        dst, src = np.nonzero(adj)
        return cls._padded(src, dst, adj.shape[0], num_edges, "adjacency")

    @classmethod
    def fixed_fan_in(
        cls,
        num_neurons: int,
        fan_in: int,
        *,
        num_edges: int | None = None,
        self_connections: bool = False,
        key: PRNGKey,
    ) -> "Topology":
        """Every neuron receives exactly `fan_in` edges from distinct random sources.

        Arguments:
            num_neurons: N.
            fan_in: K, edges into each neuron.
            num_edges: E_max (default `N * K`, the number drawn).
            self_connections: whether `i -> i` may be drawn.
            key: the draw's key.
        """
        num_neurons = positive_int("num_neurons", num_neurons)
        fan_in = positive_int("fan_in", fan_in)
        pool = num_neurons if self_connections else num_neurons - 1
        if fan_in > pool:
            raise ValueError(
                f"fan_in={fan_in} exceeds the {pool} possible sources of a neuron "
                f"(num_neurons={num_neurons}, self_connections={self_connections}); "
                f"allowed: 1 <= fan_in <= {pool}"
            )
        if num_edges is None:
            num_edges = cls.default_num_edges(num_neurons, fan_in=fan_in)
        rng = _rng(key)
        src = np.stack(
            [rng.choice(pool, fan_in, replace=False) for _ in range(num_neurons)]
        )
        dst = np.repeat(np.arange(num_neurons), fan_in).reshape(num_neurons, fan_in)
        if not self_connections:
            # sources drawn from N - 1 ids; shifting those >= i up by one skips
            # neuron i itself and keeps the draw uniform over the others
            src = src + (src >= dst)
        return cls._padded(src.ravel(), dst.ravel(), num_neurons, num_edges, "fan_in")

    @classmethod
    def random(
        cls,
        num_neurons: int,
        p: float,
        *,
        num_edges: int | None = None,
        self_connections: bool = False,
        key: PRNGKey,
    ) -> "Topology":
        """Each possible edge exists independently with probability `p`.

        Arguments:
            num_neurons: N.
            p: connection probability, in (0, 1].
            num_edges: E_max (default: `default_num_edges`, from N and p only; a
                draw above it raises, with probability about 3e-5).
            self_connections: whether `i -> i` may be drawn.
            key: the draw's key.
        """
        num_neurons = positive_int("num_neurons", num_neurons)
        _possible_edges(num_neurons, p, self_connections)  # checks p
        if num_edges is None:
            num_edges = cls.default_num_edges(
                num_neurons, p=p, self_connections=self_connections
            )
        adj = _rng(key).random((num_neurons, num_neurons)) < p
        if not self_connections:
            np.fill_diagonal(adj, False)
        dst, src = np.nonzero(adj)
        return cls._padded(src, dst, num_neurons, num_edges, "p")

    @staticmethod
    def default_num_edges(
        num_neurons: int,
        *,
        fan_in: int | None = None,
        p: float | None = None,
        self_connections: bool = False,
    ) -> int:
        """The E_max `fixed_fan_in` (given `fan_in`) or `random` (given `p`) takes
        when `num_edges` is not set; it depends on the sizes, never on the draw.

        `fixed_fan_in`: `N * K`. `random`: the expected number of edges plus four
        standard deviations, at most every possible edge.
        """
        num_neurons = positive_int("num_neurons", num_neurons)
        if (fan_in is None) == (p is None):
            raise ValueError(
                f"give fan_in or p, not both; got fan_in={fan_in!r}, p={p!r}"
            )
        if fan_in is not None:
            return num_neurons * positive_int("fan_in", fan_in)
        assert p is not None
        pairs = _possible_edges(num_neurons, p, self_connections)
        mean = p * pairs
        return max(1, min(pairs, math.ceil(mean + 4.0 * math.sqrt(mean * (1 - p)))))

    @classmethod
    def _padded(
        cls,
        src: np.ndarray,
        dst: np.ndarray,
        num_neurons: int,
        num_edges: int | None,
        what: str,
    ) -> "Topology":
        count = int(src.size)
        if num_edges is None:
            num_edges = max(count, 1)
        num_edges = positive_int("num_edges", num_edges)
        if count > num_edges:
            raise ValueError(
                f"num_edges (E_max) = {num_edges} is too small: the {what} draw has "
                f"{count} edges; pass num_edges >= {count}"
            )
        pad = num_edges - count
        mask = np.arange(num_edges) < count
        # padding ids are placeholders: the constructor sets canonical ones
        src = np.concatenate([src, np.zeros(pad, np.int64)])
        dst = np.concatenate([dst, np.zeros(pad, np.int64)])
        return cls(src, dst, num_neurons, mask)


__all__ = ["Topology"]
