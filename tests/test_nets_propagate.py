import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import reference_nets as ref
from hypothesis import given

from eqxevo._src.nets.layouts import DETERMINISTIC_GPU_FLAG, make_layout
from eqxevo._src.nets.propagate import LAYOUTS, propagate
from eqxevo.nets import (
    DenseLayout,
    GatherLayout,
    SegmentLayout,
    Topology,
    choose_layout,
)

# Shapes are fixed (N = 12 neurons, E_max = 48 slots) so that every example
# reuses the same compiled programs; the topology, mask and values vary.
N, E_MAX = 12, 48
TOL = {"rtol": 1e-5, "atol": 1e-5}  # float32 sums of <= 12 products of O(1) values


@st.composite
def topologies(draw):
    adj = np.array(draw(st.lists(st.booleans(), min_size=N * N, max_size=N * N)))
    adj = adj.reshape(N, N)
    while adj.sum() > E_MAX:  # keep the drawn graph within E_max slots
        adj[np.unravel_index(np.flatnonzero(adj)[0], adj.shape)] = False
    if not adj.any():
        adj[0, 1] = True
    return Topology.from_adjacency(adj, num_edges=E_MAX)


@eqx.filter_jit
def _propagate_edges(layout, w, x):
    """Propagation from edge-list weights; jitted so examples reuse compilations."""
    native = layout.native_weights(w)
    return propagate(layout, native, x), layout.edge_values(native)


@eqx.filter_jit
def _round_trip(layout, w):
    native = layout.native_weights(w)
    return native, layout.edge_values(native)


values = st.integers(0, 2**16).map(
    lambda s: np.random.default_rng(s).normal(size=E_MAX + N)
)


@given(topology=topologies(), v=values)
def test_every_layout_equals_the_numpy_reference(topology, v):
    w, x = v[:E_MAX].astype(np.float32), v[E_MAX:].astype(np.float32)
    src, dst, mask = (
        np.asarray(a) for a in (topology.src, topology.dst, topology.mask)
    )
    expected = ref.propagate(src, dst, mask, w, x, N)
    for name in LAYOUTS:
        layout = make_layout(topology, name)
        got, _ = _propagate_edges(layout, jnp.asarray(w), jnp.asarray(x))
        np.testing.assert_allclose(np.asarray(got), expected, **TOL, err_msg=name)


@given(
    topology=topologies(),
    v=values,
    bad=st.sampled_from([np.inf, -np.inf, np.nan, 1e30]),
)
def test_masked_out_edges_have_no_effect_whatever_their_weight(topology, v, bad):
    w, x = jnp.asarray(v[:E_MAX], jnp.float32), jnp.asarray(v[E_MAX:], jnp.float32)
    poisoned = jnp.where(topology.mask, w, jnp.float32(bad))
    for name in LAYOUTS:
        layout = make_layout(topology, name)
        clean, _ = _propagate_edges(layout, w, x)
        dirty, edges = _propagate_edges(layout, poisoned, x)
        assert np.array_equal(np.asarray(clean), np.asarray(dirty)), name
        assert np.all(np.isfinite(np.asarray(edges)))


@given(topology=topologies(), v=values)
def test_native_format_round_trips_to_the_edge_list(topology, v):
    w = jnp.asarray(v[:E_MAX], jnp.float32)
    for name in LAYOUTS:
        layout = make_layout(topology, name)
        native, back = _round_trip(layout, w)
        assert native.shape == layout.native_shape
        np.testing.assert_array_equal(np.asarray(back), np.where(topology.mask, w, 0.0))
        mask = np.asarray(layout.native_mask())
        assert mask.shape == layout.native_shape and mask.sum() == topology.num_active


@pytest.mark.parametrize("name", LAYOUTS)
def test_vmap_over_genomes_equals_a_per_genome_loop(key, name):
    topology = Topology.random(N, 0.3, num_edges=E_MAX, key=key)
    layout = make_layout(topology, name)
    wkey, xkey = jr.split(key)
    w = jax.vmap(layout.native_weights)(jr.normal(wkey, (4, E_MAX)))
    x = jr.normal(xkey, (4, N))
    one = eqx.filter_jit(propagate)
    batched = eqx.filter_jit(eqx.filter_vmap(propagate, in_axes=(None, 0, 0)))
    loop = np.stack([np.asarray(one(layout, w[i], x[i])) for i in range(4)])
    np.testing.assert_allclose(np.asarray(batched(layout, w, x)), loop, **TOL)
    # shared rates, per-genome weights (the unbatched-argument path of the rule)
    shared = eqx.filter_jit(eqx.filter_vmap(propagate, in_axes=(None, 0, None)))
    loop = np.stack([np.asarray(one(layout, w[i], x[0])) for i in range(4)])
    np.testing.assert_allclose(np.asarray(shared(layout, w, x[0])), loop, **TOL)


def test_layout_index_arrays_are_shared_not_evolved(key):
    topology = Topology.fixed_fan_in(N, 3, key=key)
    for name in LAYOUTS:
        layout = make_layout(topology, name)
        leaves = jax.tree.leaves(layout)
        assert leaves and not any(jnp.issubdtype(x.dtype, jnp.floating) for x in leaves)


def test_gather_layout_width_is_the_largest_fan_in(key):
    topology = Topology.random(N, 0.3, num_edges=E_MAX, key=key)
    layout = GatherLayout(topology)
    assert layout.native_shape == (max(1, topology.max_fan_in), N)
    assert SegmentLayout(topology).native_shape == (E_MAX,)
    assert DenseLayout(topology).native_shape == (N, N)


def test_auto_follows_the_documented_rule():
    # docs/performance.md, "Layouts": segment up to K = 16 (4 plastic), else
    # gather, and segment again above K = 384 without plasticity
    for n, k, plastic, expected in [
        (64, 8, False, "segment"),
        (64, 16, False, "segment"),
        (256, 32, False, "gather"),
        (4096, 41, False, "gather"),
        (4096, 512, False, "segment"),
        (64, 4, True, "segment"),
        (64, 8, True, "gather"),
        (1024, 256, True, "gather"),
    ]:
        got = choose_layout(n, n * k, k, plastic=plastic, platform="cpu")
        assert got == expected, (n, k, plastic)
    # ragged in-degree (E much smaller than N * max fan-in): never the gather layout
    assert choose_layout(1024, 10_000, 200, platform="cpu") == "segment"
    # GPU: deterministic layouts only (measured on an H100: segment's scatter-add
    # gave other bits for the same key), dense up to 128 neurons, ragged or not
    for plastic in (False, True):
        assert choose_layout(64, 512, 8, plastic=plastic, platform="gpu") == "dense"
        assert choose_layout(128, 1024, 8, plastic=plastic, platform="gpu") == "dense"
        assert choose_layout(256, 2048, 8, plastic=plastic, platform="gpu") == "gather"
    assert choose_layout(1024, 10_000, 200, platform="gpu") == "gather"
    assert choose_layout(100, 150, 90, platform="gpu") == "dense"
    # TPU (unmeasured): gather
    assert choose_layout(256, 2048, 8, platform="tpu") == "gather"
    topology = Topology.fixed_fan_in(N, 3, key=jr.key(0))
    assert make_layout(topology, "auto").name == choose_layout(N, 3 * N, 3)


def test_the_segment_layout_on_a_gpu_is_named_nondeterministic(monkeypatch, key):
    # XLA:GPU's scatter-add runs on atomics: on an H100 the same key gave other
    # bits at L0/L2/L4 unless XLA_FLAGS held the deterministic-ops flag.
    topology = Topology.fixed_fan_in(N, 3, key=key)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.warns(RuntimeWarning, match="xla_gpu_deterministic_ops=true"):
        make_layout(topology, "segment")
    for name in ("auto", "dense", "gather"):
        make_layout(topology, name)  # no warning: warnings are errors here
    assert make_layout(topology, "auto").name == "dense"
    monkeypatch.setenv("XLA_FLAGS", DETERMINISTIC_GPU_FLAG)
    make_layout(topology, "segment")
    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    monkeypatch.delenv("XLA_FLAGS")
    make_layout(topology, "segment")


def test_unknown_layout_and_wrong_native_shape_raise(key):
    topology = Topology.fixed_fan_in(N, 3, key=key)
    with pytest.raises(ValueError, match="layout must be one of 'auto', 'segment'"):
        make_layout(topology, "csr")
    layout = make_layout(topology, "gather")
    with pytest.raises(ValueError, match="native shape"):
        propagate(layout, jnp.zeros(topology.num_edges), jnp.zeros(N))
