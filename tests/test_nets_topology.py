import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import tree_equal
from hypothesis import given

from eqxevo.nets import Topology


def _check_canonical(t: Topology) -> None:
    src, dst, mask = (np.asarray(x) for x in (t.src, t.dst, t.mask))
    n = t.num_neurons
    assert src.dtype == np.int32 and dst.dtype == np.int32 and mask.dtype == bool
    assert np.all(np.diff(dst) >= 0), "dst must be sorted over the whole array"
    active = np.flatnonzero(mask)
    assert np.array_equal(active, np.arange(active.size)), "active edges come first"
    pairs = dst[mask].astype(np.int64) * n + src[mask]
    assert np.all(np.diff(pairs) > 0), "active edges sorted by (dst, src), unique"
    assert np.all((src >= 0) & (src < n) & (dst >= 0) & (dst < n))
    counts = np.bincount(dst[mask], minlength=n)
    assert t.max_fan_in == (counts.max() if active.size else 0)


@given(
    n=st.integers(2, 16),
    data=st.data(),
    self_connections=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_fixed_fan_in_gives_every_neuron_exactly_k_distinct_sources(
    n, data, self_connections, seed
):
    k = data.draw(st.integers(1, n if self_connections else n - 1))
    t = Topology.fixed_fan_in(n, k, self_connections=self_connections, key=jr.key(seed))
    _check_canonical(t)
    assert t.num_edges == t.num_active == n * k and t.max_fan_in == k
    adj = np.asarray(t.adjacency())
    assert np.all(adj.sum(axis=1) == k)
    if not self_connections:
        assert not np.any(np.diag(adj))


@given(n=st.integers(2, 16), p=st.floats(0.05, 1.0), seed=st.integers(0, 2**16))
def test_random_topology_is_sorted_unique_and_padded_to_e_max(n, p, seed):
    t = Topology.random(n, p, key=jr.key(seed))
    _check_canonical(t)
    assert t.num_active <= t.num_edges <= n * (n - 1)
    # E_max depends on (N, p) only, so every key gives the same shapes
    other = Topology.random(n, p, key=jr.key(seed + 1))
    assert other.num_edges == t.num_edges


@given(
    adj=st.integers(1, 12).flatmap(
        lambda n: st.lists(st.booleans(), min_size=n * n, max_size=n * n).map(
            lambda xs: np.array(xs).reshape(n, n)
        )
    ),
    extra=st.integers(0, 5),
)
def test_from_adjacency_round_trips_and_pads(adj, extra):
    count = int(adj.sum())
    t = Topology.from_adjacency(adj, num_edges=max(count, 1) + extra)
    _check_canonical(t)
    assert t.num_active == count and t.num_edges == max(count, 1) + extra
    assert np.array_equal(np.asarray(t.adjacency()), adj)


def test_constructor_puts_any_edge_order_in_canonical_order(key):
    t = Topology.fixed_fan_in(10, 3, key=key)
    perm = np.asarray(jr.permutation(key, t.num_edges))
    shuffled = Topology(np.asarray(t.src)[perm], np.asarray(t.dst)[perm], 10)
    assert tree_equal(shuffled, t)


def test_same_key_gives_identical_topology_and_other_keys_differ():
    a = Topology.random(16, 0.2, key=jr.key(3))
    b = Topology.random(16, 0.2, key=jr.key(3))
    c = Topology.random(16, 0.2, key=jr.key(4))
    assert tree_equal(a, b) and not tree_equal(a, c)
    assert tree_equal(
        Topology.fixed_fan_in(16, 4, key=jr.key(3)),
        Topology.fixed_fan_in(16, 4, key=jr.key(3)),
    )


def test_topology_leaves_are_kept_out_of_evolution(key):
    t = Topology.fixed_fan_in(8, 2, key=key)
    evolvable, static = eqx.partition(t, eqx.is_inexact_array)
    assert jax.tree.leaves(evolvable) == []
    assert len(jax.tree.leaves(static)) == 3


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda k: Topology.fixed_fan_in(8, 8, key=k), "fan_in=8 exceeds the 7"),
        (lambda k: Topology.fixed_fan_in(8, 0, key=k), "fan_in must be a positive"),
        (lambda k: Topology.fixed_fan_in(8, 2, num_edges=15, key=k), "too small"),
        (
            lambda k: Topology.random(8, 0.0, key=k),
            r"p must be a probability in \(0, 1\]",
        ),
        (lambda k: Topology.random(8, 1.5, key=k), "p must be a probability"),
        (
            lambda k: Topology.random(8, 1.0, num_edges=3, key=k),
            "num_edges .* too small",
        ),
        (lambda k: Topology.from_adjacency(np.ones((2, 3))), "square"),
        (lambda k: Topology([0, 0], [1, 1], 2), "duplicate edge 0 -> 1"),
        (lambda k: Topology([0, 5], [1, 1], 2), r"src: neuron ids must be in \[0, 2\)"),
        (lambda k: Topology([0], [1, 1], 2), "same length"),
        (lambda k: Topology([], [], 2), "E_max >= 1"),
    ],
)
def test_bad_topology_config_raises_a_clear_error(key, build, match):
    with pytest.raises(ValueError, match=match):
        build(key)


def test_topology_needs_concrete_arrays():
    with pytest.raises(ValueError, match="concrete arrays"):
        jax.jit(lambda s: Topology(s, jnp.zeros(2, jnp.int32), 2).src)(
            jnp.zeros(2, jnp.int32)
        )
