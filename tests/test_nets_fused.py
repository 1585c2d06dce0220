"""The fused Pallas step (`eqxevo._src.nets.fused`), in interpret mode on CPU.

Three kinds of evidence: the NumPy reference (float64, edge by edge); the XLA
gather layout, which stores the same values (to float32 rounding, and bit for
bit when XLA contracts no multiply-adds); and lowering for the Triton GPU
backend, which checks on a machine without a GPU that the kernel only uses what
Triton can compile (power-of-two tiles, row gathers, 16-bit rounding without
`nextafter`). On a GPU the same tests run the compiled kernel.
"""

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import ml_dtypes
import numpy as np
import pytest
import reference_nets as ref
from hypothesis import given
from test_nets_sparse import (
    ACT,
    OBS,
    N,
    _policy,
    _step,
    _topology,
    check_steps_against_the_reference,
    evolve_two_generations,
)

from eqxevo._src.nets.fused import next_power_of_2, round_stochastically
from eqxevo._src.nets.layouts import make_layout
from eqxevo._src.nets.plasticity import random_bits, stochastic_round
from eqxevo._src.nets.propagate import propagate
from eqxevo._src.nets.sparse import SparseRateState, SparseSpikingState
from eqxevo.nets import (
    HebbianRule,
    PallasLayout,
    PlasticState,
    SparseRatePolicy,
    SparseSpikingPolicy,
    STDPRule,
    Topology,
    choose_layout,
    sparse_lif,
    sparse_rate,
)

TRACE_DTYPES = ("float32", "float16", "bfloat16")


def _lifetime(policy, key, num_steps):
    """`(actions [T, A], final state, spikes per step [T])` (0 for a rate network)."""

    def body(carry, t):
        state, obs = carry
        action, state = policy(obs, state)
        state = policy.reinforce(action[0] - 0.1, state)
        obs = jnp.concatenate([action, 1.0 - action]) * 0.8 + 0.2 * jnp.sin(t)
        fired = jnp.sum(state.spikes) if hasattr(state, "spikes") else jnp.zeros(())
        return (state, obs), (action, fired)

    init = (policy.initial_state(key), jnp.ones(OBS))
    ts = jnp.arange(num_steps, dtype=jnp.float32)
    (state, _), (actions, fired) = jax.lax.scan(body, init, ts)
    return actions, state, fired


_lifetime_jit = eqx.filter_jit(_lifetime)


def _edge_view(policy, state):
    """Every leaf of a lifetime state, native arrays as edge lists `[E]`."""
    out = {k: v for k, v in vars(state).items() if k != "plastic" and v is not None}
    if state.plastic is not None:
        for name in ("weights", "trace"):
            native = getattr(state.plastic, name)
            out[name] = policy.layout.edge_values(native.astype(jnp.float32))
        out["modulation"] = state.plastic.modulation
        out["step"] = state.plastic.step
    return {k: np.asarray(v) for k, v in out.items()}


# -- the layout ----------------------------------------------------------------------


@st.composite
def topologies(draw):
    n = draw(st.integers(1, 13))
    adj = np.array(draw(st.lists(st.booleans(), min_size=n * n, max_size=n * n)))
    adj = adj.reshape(n, n)
    if not adj.any():
        adj[0, n - 1] = True
    return Topology.from_adjacency(adj, num_edges=int(adj.sum()) + 2)


@eqx.filter_jit
def _propagate_edges(layout, w, x):
    native = layout.native_weights(w)
    return propagate(layout, native, x), layout.edge_values(native)


@given(topology=topologies(), seed=st.integers(0, 2**16))
def test_pallas_propagation_equals_the_numpy_reference(topology, seed):
    rng = np.random.default_rng(seed)
    n, e = topology.num_neurons, topology.num_edges
    w = rng.normal(size=e).astype(np.float32)
    x = rng.normal(size=n).astype(np.float32)
    layout = make_layout(topology, "pallas")
    assert layout.native_shape == (max(1, topology.max_fan_in), next_power_of_2(n))
    got, edges = _propagate_edges(layout, jnp.asarray(w), jnp.asarray(x))
    src, dst, mask = (
        np.asarray(a) for a in (topology.src, topology.dst, topology.mask)
    )
    np.testing.assert_allclose(
        np.asarray(got), ref.propagate(src, dst, mask, w, x, n), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(np.asarray(edges), np.where(mask, w, 0.0))
    # padding columns and slots are masked out and hold no weight
    native_mask = np.asarray(layout.native_mask())
    assert native_mask.sum() == topology.num_active
    assert not native_mask[:, n:].any()


# -- the fused step against the NumPy reference -------------------------------------


@pytest.mark.parametrize("kind", ["rate", "spiking"])
@pytest.mark.parametrize("plasticity", [None, "reward", "neuron"])
def test_fused_policy_step_equals_the_numpy_reference(kind, plasticity):
    policy = _policy(kind, "pallas", plasticity)
    assert isinstance(policy.layout, PallasLayout)
    fired = check_steps_against_the_reference(policy, 6)
    if kind == "spiking":
        assert fired > 0  # the test exercises firing (and the STDP gather of spikes)


# -- the fused step against the XLA gather layout -----------------------------------

# The kernel evaluates the gather layout's expressions in the same order. But
# XLA:CPU contracts `a * b + c` into a fused multiply-add wherever its fusions
# allow, and the kernel's fusions are not the gather path's (the plastic gather
# path, say, materialises `w * x[src]` for the Hebbian increment and so rounds
# it before summing). On an FMA CPU the two therefore agree to float32 rounding
# (as any two XLA programs of the same maths do: PERFORMANCE_NOTES.md, "Bits and
# codegen"); with contraction off they agree bit for bit, 16-bit stochastically
# rounded traces included (the child-process test).
CONFIGS = [
    ("rate", None, "float32"),
    ("rate", "reward", "bfloat16"),
    ("rate", "neuron", "float16"),
    ("spiking", "reward", "float16"),
    ("spiking", "neuron", "bfloat16"),
]


def _lifetimes(kind, plasticity, trace_dtype):
    """`{gather, pallas}` lifetimes of the same genome: actions, spikes, state."""
    views = {}
    for layout in ("gather", "pallas"):
        policy = _policy(kind, layout, plasticity, trace_dtype=trace_dtype, scale=1.5)
        actions, state, fired = _lifetime_jit(policy, jr.key(3), 25)
        views[layout] = {"actions": np.asarray(actions), "fired": np.asarray(fired)}
        views[layout] |= _edge_view(policy, state)
    return views


@pytest.mark.parametrize(
    "kind, plasticity",
    [("rate", None), ("rate", "neuron"), ("spiking", "reward"), ("spiking", "neuron")],
)
def test_fused_lifetime_matches_the_gather_layout(kind, plasticity):
    views = _lifetimes(kind, plasticity, "float32")
    gather, pallas = views["gather"], views["pallas"]
    assert gather.keys() == pallas.keys()
    np.testing.assert_array_equal(pallas["fired"], gather["fired"])
    for name in gather:
        np.testing.assert_allclose(
            pallas[name], gather[name], rtol=1e-5, atol=1e-5, err_msg=name
        )
    if kind == "spiking":
        assert gather["fired"].sum() > 0  # spikes were propagated and gathered


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64"),
    reason="--xla_cpu_max_isa=AVX is an x86 flag",
)
def test_without_multiply_add_contraction_the_fused_lifetime_is_bit_identical():
    """Every configuration, in a child process whose XLA emits no FMA."""
    script = textwrap.dedent(
        """
        import numpy as np
        from test_nets_fused import CONFIGS, _lifetimes
        for config in CONFIGS:
            views = _lifetimes(*config)
            for name, want in views["gather"].items():
                got = views["pallas"][name]
                np.testing.assert_array_equal(got, want, err_msg=f"{config} {name}")
        print(f"{len(CONFIGS)} configurations identical")
        """
    )
    tests = Path(__file__).parent
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX",  # AVX has no FMA: nothing contracted
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join([str(tests), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"{len(CONFIGS)} configurations identical"


@st.composite
def step_cases(draw):
    """A small network, population and plastic state, drawn whole."""
    n = draw(st.integers(2, 11))
    fan_in = draw(st.integers(1, min(4, n - 1)))
    return {
        "n": n,
        "fan_in": fan_in,
        "population": draw(st.sampled_from([1, 2, 3, 4])),
        "block_size": draw(st.sampled_from([None, 1, 2])),
        "kind": draw(st.sampled_from(["rate", "spiking"])),
        "modulation": draw(st.sampled_from([None, "reward", "neuron"])),
        "trace_dtype": draw(st.sampled_from(TRACE_DTYPES)),
        "seed": draw(st.integers(0, 2**16)),
    }


def _random_policy(case, layout):
    key = jr.key(case["seed"])
    topology = Topology.fixed_fan_in(case["n"], case["fan_in"], key=key)
    rule = None
    if case["modulation"] is not None:
        cls = HebbianRule if case["kind"] == "rate" else STDPRule
        rule = cls(
            learning_rate=0.5,
            modulation=case["modulation"],
            modulator=case["n"] - 1 if case["modulation"] == "neuron" else None,
            trace_dtype=case["trace_dtype"],
        )
    cls = SparseRatePolicy if case["kind"] == "rate" else SparseSpikingPolicy
    policy = cls(
        1, 1, topology, layout=layout, plasticity=rule, weight_scale=2.0, key=key
    )
    if layout == "pallas":
        pallas = PallasLayout(topology, block_size=case["block_size"])
        policy = eqx.tree_at(lambda p: p.layout, policy, pallas)
    return policy


def _random_inputs(policy, rng, population):
    """Perturbed genomes and mid-lifetime states (edge lists), drawn with NumPy.

    NumPy, not jax.random: compiling the key arithmetic cost more than the step.
    """
    n, e, p = policy.num_neurons, policy.layout.num_edges, population
    uniform = lambda *shape: rng.uniform(-1.0, 1.0, (p, *shape)).astype(np.float32)
    evolvable = [  # leaves: the same values for every layout's policy
        np.asarray(x) + 0.1 * uniform(*x.shape)
        for x in jax.tree.leaves(eqx.filter(policy, eqx.is_inexact_array))
    ]
    state = {"potential": uniform(n), "obs": uniform(policy.obs_size)}
    state["reward"] = uniform()
    if isinstance(policy, SparseRatePolicy):
        state["rate"] = uniform(n)
    else:
        state["refractory"] = rng.integers(0, 3, (p, n)).astype(np.int32)
        state["spikes"] = (rng.random((p, n)) < 0.5).astype(np.float32)
        state["readout"] = uniform(policy.action_size)
    if policy.rule is not None:
        state |= {
            "weights": 2 * uniform(e),
            "trace": 2 * uniform(e),
            "modulation": uniform(),
            "baseline": uniform(),
            "seed": rng.integers(0, 2**32, p, dtype=np.uint32),
            "step": rng.integers(0, 2**32, p, dtype=np.uint32),
            "pending": rng.random(p) < 0.5,  # a reward's update still to apply
        }
        if not isinstance(policy, SparseRatePolicy):
            state |= {"pre_trace": uniform(n), "post_trace": uniform(n)}
    return evolvable, state


@eqx.filter_jit
def _random_step(policy, evolvable, inputs):
    """One step of a population from the given states; native arrays as edge lists."""
    evolvable_tree, static = eqx.partition(policy, eqx.is_inexact_array)
    evolvable = jax.tree.unflatten(jax.tree.structure(evolvable_tree), evolvable)

    def one(evolvable, s):
        genome = eqx.combine(evolvable, static)
        native = genome.layout.native_weights
        plastic = None
        if genome.rule is not None:
            plastic = PlasticState(
                weights=native(s["weights"]),
                trace=native(s["trace"]).astype(genome.rule.trace_dtype),
                modulation=s["modulation"],
                baseline=s["baseline"],
                seed=s["seed"],
                step=s["step"],
                pending=s["pending"],
            )
        if isinstance(genome, SparseRatePolicy):
            state = SparseRateState(s["potential"], s["rate"], plastic)
        else:
            state = SparseSpikingState(
                s["potential"],
                s["refractory"],
                s["spikes"],
                s["readout"],
                s.get("pre_trace"),
                s.get("post_trace"),
                plastic,
            )
        action, state = genome(s["obs"], state)
        state = genome.reinforce(s["reward"], state)
        out = {"action": action}
        out |= {
            k: v for k, v in vars(state).items() if k != "plastic" and v is not None
        }
        if state.plastic is not None:
            out |= vars(state.plastic)
            for name in ("weights", "trace"):
                x = getattr(state.plastic, name)
                edges = genome.layout.edge_values(x.astype(jnp.float32))
                out[name] = edges.astype(x.dtype)
        return out

    return jax.vmap(one)(evolvable, inputs)


@given(case=step_cases())
def test_one_fused_step_equals_the_gather_layout_from_any_state(case):
    """Any small network, population, block size, rule and trace dtype."""
    gather, pallas = (_random_policy(case, layout) for layout in ("gather", "pallas"))
    rng = np.random.default_rng(case["seed"])
    evolvable, inputs = _random_inputs(pallas, rng, case["population"])
    want = jax.tree.map(np.asarray, _random_step(gather, evolvable, inputs))
    got = jax.tree.map(np.asarray, _random_step(pallas, evolvable, inputs))
    assert got.keys() == want.keys()
    for name in want:
        assert (got[name].shape, got[name].dtype) == (
            want[name].shape,
            want[name].dtype,
        )
    # Float32 rounding apart (see CONFIGS above); spikes, refractory counters and
    # step counters exactly equal (no drawn potential lands within 1e-6 of the
    # threshold). A 16-bit trace equals, or -- where its float32 value moved
    # across a stochastic-rounding threshold -- is one step of its dtype away;
    # only there may a neuron-modulated weight differ by more.
    trace_dtype = jnp.dtype(case["trace_dtype"])
    flipped = np.zeros(want["trace"].shape, bool) if "trace" in want else None
    if flipped is not None and trace_dtype != jnp.float32:
        g, w = (x.astype(np.float32) for x in (got["trace"], want["trace"]))
        flipped = g != w
        finfo = jnp.finfo(trace_dtype)
        step = np.abs(w) * 2.0**-finfo.nmant + float(finfo.smallest_subnormal)
        assert np.all(np.abs(g - w)[flipped] <= 1.01 * step[flipped]), "trace"
        assert flipped.mean() < 0.05  # a flip needs a value within 1e-7 of a threshold
    for name in want:
        g, w = got[name], want[name]
        if not np.issubdtype(w.dtype, np.floating) or name == "spikes":
            np.testing.assert_array_equal(g, w, err_msg=name)
            continue
        if name == "trace" and trace_dtype != jnp.float32:
            continue
        g, w = g.astype(np.float64), w.astype(np.float64)
        if name == "weights":
            g, w = g[~flipped], w[~flipped]
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=name)


# -- stochastic rounding inside the kernel ------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_in_kernel_rounding_equals_stochastic_round_bit_for_bit(dtype):
    """Every 16-bit value, nudged up and down and by random float32 amounts."""
    grid = jax.lax.bitcast_convert_type(
        jnp.arange(2**16, dtype=jnp.uint32).astype(jnp.uint16), dtype
    ).astype(jnp.float32)
    nudges = jnp.asarray([0.0, 1e-3, -1e-3, 0.3, -0.49, 0.5, -0.5, 0.999], jnp.float32)
    spacing = jnp.abs(
        jnp.nextafter(
            grid.astype(dtype), jnp.full_like(grid, jnp.inf).astype(dtype)
        ).astype(jnp.float32)
        - grid
    )
    spacing = jnp.where(jnp.isfinite(spacing), spacing, 1.0)
    values = (grid[:, None] + nudges[None] * spacing[:, None]).ravel()
    raw = jax.lax.bitcast_convert_type(
        jr.bits(jr.key(0), (2**16,), jnp.uint32), jnp.float32
    )
    specials = jnp.asarray(
        [0.0, -0.0, jnp.inf, -jnp.inf, jnp.nan, 1e-45, -1e-45, 65504.0, 65520.0],
        jnp.float32,
    )
    values = jnp.concatenate([values, raw, specials])
    bits = random_bits(jnp.uint32(7), jnp.uint32(3), values.shape)
    got = jax.jit(round_stochastically, static_argnums=1)(values, dtype, bits)
    want = jax.jit(stochastic_round, static_argnums=1)(values, dtype, bits)
    as_bits = lambda a: np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint16))
    finite = np.asarray(jnp.isfinite(want) | jnp.isinf(want))
    np.testing.assert_array_equal(as_bits(got)[finite], as_bits(want)[finite])
    assert np.array_equal(np.isnan(np.asarray(got)), np.isnan(np.asarray(want)))
    # the values exercise both roundings, not only the nearest one
    # (nearest by NumPy: XLA:GPU may fold a jnp round trip to float32 into x)
    np_dtype = ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else np.float16
    with np.errstate(over="ignore", invalid="ignore"):  # inf, nan: not counted
        nearest = np.asarray(values).astype(np_dtype).astype(np.float32)
    moved = np.asarray(got).astype(np.float32) != nearest
    assert 0.05 < moved[np.isfinite(nearest)].mean() < 0.95


# -- populations, selection, lowering ------------------------------------------------


def test_vmap_over_seeds_and_population_equals_a_per_genome_loop():
    """An outer vmap (seeds, as `evolve(num_seeds=...)`) batches the kernel call
    itself; the inner one (the population) runs two programs of one genome."""
    seeds, population = 2, 2
    policy = _policy("spiking", "pallas", "neuron", scale=1.5)
    layout = PallasLayout(_topology(), block_size=1)
    policy = eqx.tree_at(lambda p: p.layout, policy, layout)
    evolvable, static = eqx.partition(policy, eqx.is_inexact_array)
    shape = (seeds, population)
    evolvable = jax.tree.map(
        lambda x: x + 0.1 * jr.normal(jr.key(4), (*shape, *x.shape)), evolvable
    )
    keys = jr.split(jr.key(5), seeds * population).reshape(shape)
    lifetime = lambda e, k: _lifetime(eqx.combine(e, static), k, 10)
    actions, states, fired = eqx.filter_jit(jax.vmap(jax.vmap(lifetime)))(
        evolvable, keys
    )
    assert fired.sum() > 0
    for i, j in np.ndindex(shape):
        pick = lambda x, i=i, j=j: x[i, j]
        genome = eqx.combine(jax.tree.map(pick, evolvable), static)
        a, s, _ = _lifetime_jit(genome, keys[i, j], 10)
        np.testing.assert_allclose(np.asarray(actions[i, j]), np.asarray(a), atol=1e-5)
        for got, want in zip(
            jax.tree.leaves(jax.tree.map(pick, states)),
            jax.tree.leaves(s),
            strict=True,
        ):
            np.testing.assert_allclose(
                np.asarray(got, np.float32), np.asarray(want, np.float32), atol=1e-5
            )


def test_population_blocks_are_the_largest_power_of_two_factor():
    layout = PallasLayout(Topology.fixed_fan_in(12, 3, key=jr.key(0)))
    assert layout.population_block(96, interpret=True) == 32
    assert layout.population_block(7, interpret=True) == 1
    assert layout.population_block(1024, interpret=False) == 256  # 16 x 256 tiles
    capped = PallasLayout(Topology.fixed_fan_in(12, 3, key=jr.key(0)), block_size=8)
    assert capped.population_block(96, interpret=True) == 8


def test_fused_policy_runs_under_evaluate_and_the_strategy_and_compiles_once():
    policy = _policy("spiking", "pallas", "reward", trace_dtype="float16", scale=1.0)
    evolve_two_generations(policy, lambda g, k: _lifetime(g, k, 8)[0])


def test_auto_picks_the_measured_layout_and_pallas_only_when_asked():
    # on GPU a deterministic layout (segment's scatter-add runs on atomics)
    assert choose_layout(256, 2048, 8, platform="gpu") == "gather"
    assert choose_layout(128, 1024, 8, plastic=True, platform="gpu") == "dense"
    assert choose_layout(256, 2048, 8, platform="tpu") == "gather"
    for plastic in (False, True):
        for backend in ("cpu", "gpu", "tpu"):
            picked = choose_layout(64, 512, 8, plastic=plastic, platform=backend)
            assert picked != "pallas"
    topology = Topology.fixed_fan_in(N, 3, key=jr.key(0))
    assert make_layout(topology, "pallas").name == "pallas"
    for factory in (sparse_rate, sparse_lif):
        net = factory(OBS, ACT, num_neurons=N, fan_in=3, layout="pallas", key=jr.key(0))
        assert isinstance(net.layout, PallasLayout)


def test_state_shapes_and_dtypes_are_static_across_steps():
    for kind in ("rate", "spiking"):
        policy = _policy(kind, "pallas", "neuron", trace_dtype="bfloat16")
        state = policy.initial_state(jr.key(0))
        assert state.plastic.trace.shape == (policy.layout.num_slots, 16)
        _, after = jax.eval_shape(
            lambda s, p=policy: _step(p, jnp.ones(OBS), s, jnp.float32(1.0)), state
        )
        assert jax.tree.structure(after) == jax.tree.structure(state)
        for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(state), strict=True):
            assert (x.shape, x.dtype) == (y.shape, y.dtype)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (lambda t: PallasLayout(t, block_size=3), ValueError, "power of two"),
        (lambda t: PallasLayout(t, block_size=0), ValueError, "positive int"),
        (
            lambda t: PallasLayout(t, interpret="yes"),
            (ValueError, TypeError),
            "interpret",
        ),
        (lambda t: make_layout(t, "triton"), ValueError, "'dense', 'pallas'; got"),
    ],
)
def test_bad_kernel_config_raises_a_clear_error(build, error, match):
    with pytest.raises(error, match=match):
        build(Topology.fixed_fan_in(N, 3, key=jr.key(0)))


def test_other_backends_are_refused_by_name(monkeypatch):
    layout = PallasLayout(Topology.fixed_fan_in(N, 3, key=jr.key(0)))
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    with pytest.raises(ValueError, match=r"default backend is 'tpu'.*layout='gather'"):
        layout.use_interpret()


def _triton_dialect() -> bool:
    try:
        from jax._src.lib import triton  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _triton_dialect(), reason="jaxlib without Triton bindings")
@pytest.mark.parametrize(
    "kind, plasticity, trace_dtype",
    [
        ("rate", None, "float32"),
        ("rate", "neuron", "bfloat16"),
        ("spiking", "neuron", "float16"),
    ],
)
def test_fused_kernel_lowers_for_the_triton_gpu_backend(kind, plasticity, trace_dtype):
    """N = 12 pads to 16; P = 8: the kernel's tiles are what Triton accepts."""
    policy = _policy(kind, "pallas", plasticity, trace_dtype=trace_dtype)
    layout = PallasLayout(_topology(), interpret=False)
    policy = eqx.tree_at(lambda p: p.layout, policy, layout)
    states = jax.vmap(policy.initial_state)(jr.split(jr.key(0), 8))
    step = jax.vmap(lambda obs, s: policy(obs, s))
    lowered = jax.jit(step).trace(jnp.ones((8, OBS)), states)
    text = lowered.lower(lowering_platforms=("cuda",)).as_text()
    assert text.count("__gpu$xla.gpu.triton") == 1  # one kernel per step
