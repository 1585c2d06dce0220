from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import reference_nets as ref
from hypothesis import given

from eqxevo._app.bench.net_sweeps import state_bytes
from eqxevo._src.nets.plasticity import (
    random_bits,
    reward_modulation,
    stochastic_round,
    three_factor_update,
    update_trace,
    widen,
)
from eqxevo.nets import (
    HebbianRule,
    SparseRatePolicy,
    SparseSpikingPolicy,
    STDPRule,
    Topology,
)

E = 64
rngs = st.integers(0, 2**16).map(lambda s: np.random.default_rng(s))


@given(rng=rngs)
def test_hebbian_and_stdp_increments_equal_the_numpy_reference(rng):
    pre, post, pre_t, post_t = (rng.normal(size=E).astype(np.float32) for _ in range(4))
    s_pre, s_post = (rng.integers(0, 2, E).astype(np.float32) for _ in range(2))
    a, b, c, d = rng.normal(size=4)
    hebb = HebbianRule(a, b, c, d)
    np.testing.assert_allclose(
        np.asarray(hebb.increment(jnp.asarray(pre), jnp.asarray(post))),
        ref.hebbian_increment(pre, post, a, b, c, d),
        rtol=1e-5,
        atol=1e-5,
    )
    stdp = STDPRule(abs(a), abs(b))
    got = stdp.increment(*map(jnp.asarray, (pre_t, s_pre, post_t, s_post)))
    want = ref.stdp_increment(pre_t, s_pre, post_t, s_post, abs(a), abs(b))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


_three_factor = jax.jit(three_factor_update, static_argnums=4)


@given(rng=rngs, modulation=st.floats(-10, 10), bound=st.floats(0.1, 3.0))
def test_three_factor_update_is_bounded_masked_and_equals_the_reference(
    rng, modulation, bound
):
    w = rng.uniform(-bound, bound, E).astype(np.float32)
    e = (3 * rng.normal(size=E)).astype(np.float32)
    mask = rng.random(E) < 0.7
    bounds = (-bound, bound)
    got = np.asarray(
        _three_factor(
            jnp.asarray(w),
            jnp.asarray(e),
            jnp.float32(modulation),
            jnp.float32(0.1),
            bounds,
            jnp.asarray(mask),
        )
    )
    want = ref.three_factor(w, e, modulation, 0.1, bounds, mask)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(got) <= bound + 1e-6) and np.all(got[~mask] == 0.0)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_stochastic_rounding_is_unbiased_and_picks_a_neighbour(dtype):
    values = jnp.linspace(-3.0, 3.0, 97, dtype=jnp.float32) + 1e-3
    draws = 2000
    bits = jax.vmap(lambda s: random_bits(jnp.uint32(7), s, values.shape))(
        jnp.arange(draws, dtype=jnp.uint32)
    )
    rounded = jax.jit(jax.vmap(lambda b: stochastic_round(values, dtype, b)))(bits)
    up = jnp.nextafter(
        values.astype(dtype), jnp.full_like(values, jnp.inf).astype(dtype)
    )
    down = jnp.nextafter(
        values.astype(dtype), jnp.full_like(values, -jnp.inf).astype(dtype)
    )
    near = values.astype(dtype)
    ok = (rounded == near) | (rounded == up) | (rounded == down)
    assert bool(jnp.all(ok))
    mean = np.asarray(rounded.astype(jnp.float32)).mean(axis=0)
    spacing = np.asarray(up.astype(jnp.float32) - down.astype(jnp.float32)) / 2
    # the mean of 2000 Bernoulli roundings is within 5 standard errors of the value
    np.testing.assert_array_less(
        np.abs(mean - np.asarray(values)), 5 * spacing / np.sqrt(draws) + 1e-7
    )


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_sixteen_bit_traces_decay_without_stalling(dtype):
    """bfloat16 round-to-nearest keeps 1.0 * 0.999 == 1.0; stochastic rounding not."""

    def run(rounding):
        def body(carry, step):
            e = carry
            if rounding == "nearest":
                return (0.999 * e.astype(jnp.float32)).astype(dtype), None
            bits = random_bits(jnp.uint32(1), step, (256,))
            return update_trace(e, jnp.zeros(256), 0.999, bits), None

        steps = jnp.arange(1000, dtype=jnp.uint32)
        return jax.jit(lambda e: jax.lax.scan(body, e, steps)[0])(jnp.ones(256, dtype))

    exact = 0.999**1000
    stochastic = float(jnp.mean(run("stochastic").astype(jnp.float32)))
    assert abs(stochastic - exact) < 0.01 * exact + 0.005
    if dtype == jnp.bfloat16:
        assert float(jnp.mean(run("nearest").astype(jnp.float32))) == 1.0


def test_random_bits_are_deterministic_and_differ_across_steps_and_seeds():
    a = random_bits(jnp.uint32(1), jnp.uint32(5), (4, 8))
    assert a.shape == (4, 8) and a.dtype == jnp.uint32
    assert bool(jnp.all(a == random_bits(jnp.uint32(1), jnp.uint32(5), (4, 8))))
    assert float(jnp.mean(a == random_bits(jnp.uint32(1), jnp.uint32(6), (4, 8)))) < 0.1
    assert float(jnp.mean(a == random_bits(jnp.uint32(2), jnp.uint32(5), (4, 8)))) < 0.1
    assert len(np.unique(np.asarray(a))) == 32


@pytest.mark.parametrize("layout", ["segment", "gather", "dense"])
def test_sixteen_bit_traces_halve_the_trace_memory_per_genome(key, layout):
    topology = Topology.fixed_fan_in(16, 4, key=key)
    sizes = {}
    for dtype in ("float32", "float16", "bfloat16"):
        for cls, rule in (
            (SparseRatePolicy, HebbianRule),
            (SparseSpikingPolicy, STDPRule),
        ):
            policy = cls(
                4,
                2,
                topology,
                layout=layout,
                plasticity=rule(trace_dtype=dtype),
                key=key,
            )
            state = policy.initial_state(key)
            assert state.plastic.trace.dtype == jnp.dtype(dtype)
            sizes[cls.__name__, dtype] = state_bytes(state)
    for name in ("SparseRatePolicy", "SparseSpikingPolicy"):
        full = sizes[name, "float32"]
        for dtype in ("float16", "bfloat16"):
            half = sizes[name, dtype]
            assert half["trace_bytes"] * 2 == full["trace_bytes"]
            assert full["state_bytes"] - half["state_bytes"] == half["trace_bytes"]


@pytest.mark.parametrize(
    "build, match",
    [
        (
            lambda: HebbianRule(trace_dtype="float64"),
            "trace_dtype must be one of 'float32'",
        ),
        (lambda: HebbianRule(trace_dtype="int8"), "trace_dtype must be one of"),
        (lambda: HebbianRule(modulation="dopamine"), "modulation"),
        (lambda: HebbianRule(modulation="neuron"), "needed by modulation='neuron'"),
        (lambda: HebbianRule(modulator=3), "only used with modulation='neuron'"),
        (lambda: HebbianRule(weight_bounds=(1.0, -1.0)), "low < high"),
        (lambda: HebbianRule(trace_decay=1.0), r"trace_decay must be in \[0, 1\)"),
        (lambda: HebbianRule(baseline_decay=1.5), "baseline_decay"),
        (lambda: STDPRule(tau_plus=0.0), "tau_plus must be a finite number > 0"),
    ],
)
def test_bad_rule_config_raises_a_clear_error(build, match):
    # ValueError from eqxevo; a TypeError from beartype where an annotation
    # (a Literal) already rejects the value under the test suite's type checking
    with pytest.raises((ValueError, TypeError), match=match):
        build()


def test_rule_coefficients_are_evolvable_leaves():
    import equinox as eqx

    leaves = jax.tree.leaves(eqx.filter(HebbianRule(), eqx.is_inexact_array))
    assert len(leaves) == 5  # A, B, C, D, learning rate
    leaves = jax.tree.leaves(eqx.filter(STDPRule(), eqx.is_inexact_array))
    assert len(leaves) == 3  # a_plus, a_minus, learning rate


@given(
    rewards=st.lists(
        st.one_of(st.floats(-1e3, 1e3, width=32), st.sampled_from([-100.0, 1.0])),
        min_size=1,
        max_size=40,
    ),
    beta=st.one_of(st.none(), st.floats(0.0, 0.999)),
    bound=st.one_of(st.none(), st.floats(0.1, 10.0)),
)
def test_reward_modulation_is_the_bounded_prediction_error_of_the_reference(
    rewards, beta, bound
):
    rule = HebbianRule(baseline_decay=beta, reward_bound=bound)
    step = jax.jit(lambda r, b, n: reward_modulation(rule, r, b, n))
    baseline, got_baseline = 0.0, jnp.float32(0.0)
    for seen, reward in enumerate(rewards):
        r = reward if bound is None else float(np.clip(reward, -bound, bound))
        if beta is None:
            want = r
        else:
            want = r - (baseline / (1 - beta**seen) if seen else r)
            baseline = beta * baseline + (1 - beta) * r
        got, got_baseline = step(jnp.float32(reward), got_baseline, jnp.uint32(seen))
        scale = 1.0 if bound is None else bound
        np.testing.assert_allclose(float(got), want, rtol=1e-4, atol=1e-4 * scale)
        if bound is not None:
            assert abs(float(got)) <= 2 * bound * (1 + 1e-5)
    np.testing.assert_allclose(float(got_baseline), baseline, rtol=1e-4, atol=1e-3)


def test_rules_default_to_a_bounded_reward_prediction_error():
    for rule in (HebbianRule(), STDPRule()):
        assert rule.baseline_decay == 0.99 and rule.reward_bound == 1.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("inf"), float("nan")])
def test_bad_reward_bound_raises_a_clear_error(bad):
    with pytest.raises(ValueError, match="reward_bound must be a finite number > 0"):
        HebbianRule(reward_bound=bad)


def _fraction_at_bound(rule: HebbianRule, reward: float, steps: int = 2000) -> float:
    """Drive a plastic rate network with noisy input and a constant reward."""
    topology = Topology.fixed_fan_in(32, 4, key=jax.random.key(0))
    policy = SparseRatePolicy(4, 2, topology, plasticity=rule, key=jax.random.key(1))

    @jax.jit
    def lifetime(state):
        def step(state, t):
            obs = jax.random.normal(jax.random.fold_in(jax.random.key(2), t), (4,))
            _, state = policy(obs, state)
            return policy.reinforce(jnp.float32(reward), state), None

        return jax.lax.scan(step, state, jnp.arange(steps))[0]

    state = policy.settled(lifetime(policy.initial_state(jax.random.key(3))))
    weights = state.plastic.weights
    edges = np.asarray(policy.layout.edge_values(weights))[np.asarray(topology.mask)]
    lo, hi = rule.weight_bounds
    return float(np.mean((edges <= lo) | (edges >= hi)))


def test_a_constant_reward_does_not_drive_plastic_weights_to_their_bound():
    # The L4 finding (docs/studies.md) in miniature: with m = r a reward of
    # constant sign makes the three-factor rule plain Hebbian learning, which
    # runs every weight into the bound; the prediction error m = r - baseline
    # vanishes when nothing better or worse than expected happens.
    old = HebbianRule(learning_rate=0.01, baseline_decay=None, reward_bound=None)
    assert _fraction_at_bound(old, 0.5) > 0.9
    assert _fraction_at_bound(HebbianRule(learning_rate=0.01), 0.5) == 0.0
    # and a penalty of -100 (an L4 death) is felt as -1, not as -100
    assert _fraction_at_bound(HebbianRule(learning_rate=0.01), -100.0) == 0.0


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_widening_by_bits_equals_numpys_conversion_of_every_16_bit_value(dtype):
    patterns = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    values = jax.lax.bitcast_convert_type(jnp.asarray(patterns), dtype)
    got = np.asarray(jax.jit(widen)(values))
    want = patterns.view(ml_dtypes.bfloat16 if dtype == jnp.bfloat16 else np.float16)
    want = want.astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    # signed zeros and every nan keep their sign
    assert np.array_equal(np.signbit(got), np.signbit(want))


def _converts(jaxpr: Any) -> list:
    """(from, to) dtypes of every convert_element_type, nested jaxprs included."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    out = []
    for eqn in inner.eqns:
        if eqn.primitive.name == "convert_element_type":
            out.append((eqn.invars[0].aval.dtype, eqn.params["new_dtype"]))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out.extend(_converts(sub))
    return out


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_stochastic_rounding_widens_nothing_a_compiler_could_fold(dtype):
    # XLA:GPU rewrites float32 -> 16-bit -> float32 as the identity by default
    # (xla_allow_excess_precision), which made stochastic rounding round to
    # nearest on an H200; the rounding now widens 16-bit values by their bits.
    values, bits = jnp.full((4,), 1.001, jnp.float32), jnp.arange(4, dtype=jnp.uint32)
    jaxpr = jax.make_jaxpr(stochastic_round, static_argnums=1)(values, dtype, bits)
    widened = [(a, b) for a, b in _converts(jaxpr) if a == dtype and b == jnp.float32]
    assert widened == []
    assert (jnp.dtype(jnp.float32), jnp.dtype(dtype)) in _converts(jaxpr)
