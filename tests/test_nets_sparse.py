import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import reference_nets as ref
from helpers import tree_equal

import eqxevo
from eqxevo._src.nets.propagate import LAYOUTS
from eqxevo.nets import (
    AbstractPolicy,
    HebbianRule,
    SparseRatePolicy,
    SparseSpikingPolicy,
    STDPRule,
    Topology,
)

# One topology shape for the whole file (N = 12, E_max = 48, padded: some slots
# are masked out), so compiled programs are shared between tests.
N, E_MAX, OBS, ACT = 12, 48, 4, 2
TOL = {"rtol": 2e-5, "atol": 2e-5}  # float32 vs float64 over one step


def _topology(seed: int = 0) -> Topology:
    return Topology.random(N, 0.25, num_edges=E_MAX, key=jr.key(seed))


def _rule(kind: str, plasticity: str | None, trace_dtype: str = "float32"):
    if plasticity is None:
        return None
    cls = HebbianRule if kind == "rate" else STDPRule
    kwargs = {"modulator": 5} if plasticity == "neuron" else {}
    coefficients = (0.7, 0.1, -0.2, 0.05) if kind == "rate" else (1.0, 0.8)
    return cls(
        *coefficients,
        learning_rate=0.3,
        modulation=plasticity,
        weight_bounds=(-1.5, 1.5),
        trace_dtype=trace_dtype,
        **kwargs,
    )


def _policy(kind, layout, plasticity, *, seed=0, trace_dtype="float32", scale=2.0):
    cls = SparseRatePolicy if kind == "rate" else SparseSpikingPolicy
    extra = {"tau": 4.0} if kind == "spiking" else {}  # fires within a few steps
    return cls(
        OBS,
        ACT,
        _topology(),
        layout=layout,
        plasticity=_rule(kind, plasticity, trace_dtype),
        weight_scale=scale,
        input_ids=(0, 3, 6, 9) if kind == "spiking" else None,  # non-contiguous path
        key=jr.key(seed),
        **extra,
    )


def _params(policy) -> dict:
    """Edge-list numpy view of a policy, for reference_nets."""
    topology = _topology()
    p = {
        "src": np.asarray(topology.src),
        "dst": np.asarray(topology.dst),
        "mask": np.asarray(topology.mask),
        "weights": np.asarray(policy.weights, np.float64),
        "bias": np.asarray(policy.neurons.bias, np.float64),
        "tau": np.asarray(policy.neurons.tau, np.float64),
        "dt": policy.neurons.dt,
        "input_weight": np.asarray(policy.input_weight, np.float64),
        "input_ids": policy.input_ids,
        "output_ids": policy.output_ids,
    }
    if isinstance(policy, SparseSpikingPolicy):
        p |= {
            "threshold": policy.neurons.threshold,
            "reset": policy.neurons.reset,
            "refractory_steps": policy.neurons.refractory_steps,
            "readout_decay": policy.readout_decay,
            "readout_weight": np.asarray(policy.readout_weight, np.float64),
            "readout_bias": np.asarray(policy.readout_bias, np.float64),
        }
    rule = policy.rule
    if rule is not None:
        p |= {
            "learning_rate": float(rule.learning_rate),
            "bounds": rule.weight_bounds,
            "modulation": rule.modulation,
            "modulator": rule.modulator,
            "baseline_decay": rule.baseline_decay,
            "reward_bound": rule.reward_bound,
        }
        if isinstance(rule, HebbianRule):
            p |= {k: float(getattr(rule, k)) for k in "abcd"} | {
                "trace_decay": rule.trace_decay
            }
        else:
            p |= {
                "a_plus": float(rule.a_plus),
                "a_minus": float(rule.a_minus),
                "tau_plus": rule.tau_plus,
                "tau_minus": rule.tau_minus,
                "tau_eligibility": rule.tau_eligibility,
            }
    return p


def _state(policy, state) -> dict:
    """Edge-list numpy view of a lifetime state."""
    s = {
        k: np.asarray(v, np.float64 if k != "refractory" else np.int64)
        for k, v in vars(state).items()
        if k != "plastic" and v is not None
    }
    if state.plastic is not None:
        to_edges = policy.layout.edge_values
        s["weights"] = np.asarray(to_edges(state.plastic.weights), np.float64)
        s["trace"] = np.asarray(
            to_edges(state.plastic.trace.astype(jnp.float32)), np.float64
        )
        s["baseline"] = float(state.plastic.baseline)
    return s


@eqx.filter_jit
def _step(policy, obs, state, reward):
    action, state = policy(obs, state)
    return action, policy.reinforce(reward, state)


_settled = eqx.filter_jit(lambda policy, state: policy.settled(state))


CONFIGS = [
    (kind, layout, plasticity)
    for kind in ("rate", "spiking")
    for layout in LAYOUTS
    for plasticity in (None, "reward", "neuron")
]


def check_steps_against_the_reference(policy, num_steps: int) -> float:
    """Step `policy` (and reinforce it) `num_steps` times beside the NumPy
    reference, asserting equal actions and states; returns the spikes fired."""
    p = _params(policy)
    state = policy.initial_state(jr.key(1))
    got = _state(policy, state)
    fired = 0.0
    for t in range(num_steps):
        obs = jr.uniform(jr.fold_in(jr.key(2), t), (OBS,), minval=0.5, maxval=1.5)
        reward = jnp.float32(0.5 - 0.2 * t)
        spiking = isinstance(policy, SparseSpikingPolicy)
        ref_step = ref.spiking_policy_step if spiking else ref.rate_policy_step
        want_action, want = ref_step(p, np.asarray(obs, np.float64), got)
        if policy.rule is not None and policy.rule.modulation == "reward":
            want = ref.reinforce(p, want, float(reward), seen=t)
        action, state = _step(policy, obs, state, reward)
        # the next step applies the reward's update first; `settled` shows it now
        got = _state(policy, _settled(policy, state))
        assert action.shape == (ACT,)
        np.testing.assert_allclose(np.asarray(action), want_action, **TOL)
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_allclose(got[name], want[name], **TOL, err_msg=name)
        fired += got.get("spikes", np.zeros(1)).sum()
    return fired


@pytest.mark.parametrize("kind, layout, plasticity", CONFIGS)
def test_policy_step_equals_the_numpy_reference(kind, layout, plasticity):
    fired = check_steps_against_the_reference(_policy(kind, layout, plasticity), 8)
    if kind == "spiking":
        assert fired > 0  # the test exercises firing


def _lifetime(policy, key, num_steps=40):
    def body(carry, t):
        state, obs = carry
        action, state = policy(obs, state)
        state = policy.reinforce(action[0] - 0.1, state)
        obs = jnp.concatenate([action, 1.0 - action]) * 0.8 + 0.2 * jnp.sin(t)
        return (state, obs), action

    init = (policy.initial_state(key), jnp.ones(OBS))
    ts = jnp.arange(num_steps, dtype=jnp.float32)
    (state, _), actions = jax.lax.scan(body, init, ts)
    return actions, policy.settled(state)


_lifetime_jit = eqx.filter_jit(_lifetime)


@pytest.mark.parametrize(
    "kind, plasticity", [("rate", "neuron"), ("spiking", "reward")]
)
def test_all_layouts_agree_over_a_scanned_plastic_lifetime(kind, plasticity):
    results = {}
    for layout in LAYOUTS:
        policy = _policy(kind, layout, plasticity, scale=1.0)
        actions, state = _lifetime_jit(policy, jr.key(3))
        weights = policy.layout.edge_values(state.plastic.weights)
        results[layout] = (np.asarray(actions), np.asarray(weights))
    for layout in LAYOUTS[1:]:
        for got, want in zip(results[layout], results["segment"], strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=layout)


def _population(policy, size, key):
    evolvable, static = eqx.partition(policy, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(evolvable)
    keys = jr.split(key, len(leaves))
    leaves = [
        x + 0.1 * jr.normal(k, (size, *x.shape))
        for x, k in zip(leaves, keys, strict=True)
    ]
    return eqx.combine(jax.tree.unflatten(treedef, leaves), static)


@pytest.mark.parametrize(
    "kind, layout, plasticity",
    [
        ("rate", "segment", "neuron"),
        ("rate", "gather", "reward"),
        ("rate", "dense", None),
        ("spiking", "gather", "neuron"),
    ],
)
def test_vmap_over_the_population_equals_a_per_genome_loop(kind, layout, plasticity):
    policy = _policy(kind, layout, plasticity, scale=1.0)
    population = _population(policy, 3, jr.key(4))
    evolvable, static = eqx.partition(population, eqx.is_inexact_array)

    @eqx.filter_jit
    def batched(evolvable, keys):
        return jax.vmap(lambda e, k: _lifetime(eqx.combine(e, static), k))(
            evolvable, keys
        )

    keys = jr.split(jr.key(5), 3)
    actions, states = batched(evolvable, keys)
    for i in range(3):
        genome = eqx.combine(jax.tree.map(lambda x, i=i: x[i], evolvable), static)
        a, s = _lifetime_jit(genome, keys[i])
        np.testing.assert_allclose(
            np.asarray(actions[i]), np.asarray(a), rtol=1e-5, atol=1e-5
        )
        for got, want in zip(
            jax.tree.leaves(jax.tree.map(lambda x, i=i: x[i], states)),
            jax.tree.leaves(s),
            strict=True,
        ):
            np.testing.assert_allclose(
                np.asarray(got, np.float32),
                np.asarray(want, np.float32),
                rtol=1e-5,
                atol=1e-5,
            )


@pytest.mark.parametrize("trace_dtype", ["float32", "bfloat16"])
def test_same_key_gives_a_bit_identical_lifetime(trace_dtype):
    a = _lifetime_jit(
        _policy("rate", "segment", "neuron", trace_dtype=trace_dtype), jr.key(6)
    )
    b = _lifetime_jit(
        _policy("rate", "segment", "neuron", trace_dtype=trace_dtype), jr.key(6)
    )
    assert tree_equal(a, b)


@pytest.mark.parametrize("kind, layout, plasticity", CONFIGS)
def test_state_shapes_and_dtypes_are_static_across_steps(kind, layout, plasticity):
    policy = _policy(kind, layout, plasticity)
    state = policy.initial_state(jr.key(0))
    out = jax.eval_shape(
        lambda s: _step(policy, jnp.ones(OBS), s, jnp.float32(1.0)), state
    )
    action, after = out
    assert action.shape == (ACT,) and action.dtype == jnp.float32
    assert jax.tree.structure(after) == jax.tree.structure(state)
    for x, y in zip(jax.tree.leaves(after), jax.tree.leaves(state), strict=True):
        assert (x.shape, x.dtype) == (y.shape, y.dtype)
    assert isinstance(policy, AbstractPolicy)


def evolve_two_generations(policy, actions) -> eqxevo.Strategy:
    """Two SNES generations of `policy` under `eqxevo.evaluate`, with a fitness
    (the sum of `actions(genome, key)[:, 0]`) that may be traced only once."""
    strategy = eqxevo.Strategy("snes", policy, 4, maximize=True)
    state = strategy.init(jr.key(0))

    @eqx.debug.assert_max_traces(max_traces=1)
    def fitness(genome, key):
        return jnp.sum(actions(genome, key)[:, 0])

    for generation in range(2):
        ask_key, eval_key, tell_key = eqxevo.generation_keys(jr.key(1), generation)
        population, state = strategy.ask(ask_key, state)
        # topology and layout arrays are shared: never given a population axis
        assert population.layout.src.shape == policy.layout.src.shape
        assert population.weights.shape == (4, policy.layout.num_edges)
        values, _ = eqxevo.evaluate(eval_key, fitness, population)
        assert values.shape == (4,) and bool(jnp.all(jnp.isfinite(values)))
        state, _ = strategy.tell(tell_key, population, values, state)
    return strategy


@pytest.mark.slow
def test_policy_evolves_under_strategy_with_a_shared_topology_and_compiles_once():
    policy = _policy("rate", "gather", "reward", trace_dtype="bfloat16", scale=1.0)
    strategy = evolve_two_generations(policy, lambda g, k: _lifetime(g, k, 20)[0])
    # layout and topology are not part of the search space
    num_rule = 5
    assert strategy.num_params == E_MAX + OBS + 2 * N + num_rule


def test_bfloat16_traces_stay_close_to_float32_over_a_lifetime():
    f32 = _lifetime_jit(_policy("rate", "segment", "neuron", scale=0.5), jr.key(7), 200)
    b16 = _lifetime_jit(
        _policy("rate", "segment", "neuron", scale=0.5, trace_dtype="bfloat16"),
        jr.key(7),
        200,
    )
    np.testing.assert_allclose(np.asarray(b16[0]), np.asarray(f32[0]), atol=0.02)


@pytest.mark.parametrize(
    "build, error, match",
    [
        (
            lambda t: SparseRatePolicy(4, 2, t, input_ids=(0, 1, 2, 99), key=jr.key(0)),
            ValueError,
            r"input_ids must be distinct neuron ids in \[0, 12\)",
        ),
        (
            lambda t: SparseRatePolicy(4, 2, t, output_ids=(1,), key=jr.key(0)),
            ValueError,
            "output_ids must name 2 neurons",
        ),
        (
            lambda t: SparseRatePolicy(4, 2, t, plasticity=STDPRule(), key=jr.key(0)),
            TypeError,
            "HebbianRule",  # our TypeError, or beartype's under the test hook
        ),
        (
            lambda t: SparseSpikingPolicy(
                4,
                2,
                t,
                plasticity=STDPRule(modulation="neuron", modulator=12),
                key=jr.key(0),
            ),
            ValueError,
            "modulator=12 is not a neuron id",
        ),
        (
            lambda t: SparseRatePolicy(4, 2, t, layout="sparse", key=jr.key(0)),
            ValueError,
            "layout must be one of",
        ),
        (lambda t: SparseRatePolicy(0, 2, t, key=jr.key(0)), ValueError, "obs_size"),
    ],
)
def test_bad_policy_config_raises_a_clear_error(build, error, match):
    with pytest.raises(error, match=match):
        build(_topology())
