"""`PerSynapseHebbianRule`: the ABCD rule with per-edge coefficients (Najarro &
Risi 2020), and `modulation = "none"`."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import reference_nets as ref
from helpers import tree_equal

from eqxevo._src.nets.per_synapse import normalise_weights
from eqxevo.nets import (
    HebbianRule,
    PerSynapseHebbianRule,
    SparseRatePolicy,
    Topology,
    sparse_rate,
)

N, E_MAX, OBS, ACT, STEPS = 12, 48, 4, 2, 6
TOL = {"rtol": 2e-5, "atol": 2e-5}  # float32 against float64 over a few steps
TOPOLOGY = Topology.random(N, 0.25, num_edges=E_MAX, key=jr.key(0))
MASK = np.asarray(TOPOLOGY.mask)


def _coefficients(seed=0):
    """Per-edge A, B, C, D and eta, different on every edge."""
    keys = jr.split(jr.key(seed), 5)
    a, b, c, d = (jr.uniform(k, (E_MAX,), minval=-1.0, maxval=1.0) for k in keys[:4])
    eta = jr.uniform(keys[4], (E_MAX,), minval=0.05, maxval=0.3)
    return {"a": a, "b": b, "c": 0.5 * c, "d": 0.1 * d, "learning_rate": eta}


def _policy(layout, rule):
    return SparseRatePolicy(
        OBS,
        ACT,
        TOPOLOGY,
        layout=layout,
        plasticity=rule,
        weight_scale=2.0,
        key=jr.key(1),
    )


@eqx.filter_jit
def _lifetime(policy, observations, rewards):
    def body(state, inputs):
        obs, reward = inputs
        action, state = policy(obs, state)
        state = policy.reinforce(reward, state)
        return state, (action, policy.settled(state))  # the reward's update shown

    init = policy.initial_state(jr.key(2))
    _, (actions, states) = jax.lax.scan(body, init, (observations, rewards))
    return actions, states


def _inputs(num_steps=STEPS):
    keys = jr.split(jr.key(3), num_steps)
    obs = jax.vmap(lambda k: jr.uniform(k, (OBS,), minval=0.5, maxval=1.5))(keys)
    return obs, jnp.linspace(1.0, -0.5, num_steps)


def _reference_lifetime(policy, observations, rewards):
    """Actions and edge-list weights after each step and reinforce, in float64."""
    rule = policy.rule
    src, dst = np.asarray(TOPOLOGY.src), np.asarray(TOPOLOGY.dst)
    f64 = lambda x: np.broadcast_to(np.asarray(x, np.float64), (E_MAX,))
    a, b, c, d = (f64(getattr(rule, k)) for k in "abcd")
    eta = f64(rule.learning_rate)
    bias = np.asarray(policy.neurons.bias, np.float64)
    tau = np.asarray(policy.neurons.tau, np.float64)
    normalise = getattr(rule, "normalise", False)
    lo, hi = rule.weight_bounds
    w = np.where(MASK, np.clip(np.asarray(policy.weights, np.float64), lo, hi), 0.0)
    trace, v, x, baseline = np.zeros(E_MAX), np.zeros(N), np.zeros(N), 0.0

    def update(w, m):
        w = ref.three_factor(w, trace, m, eta, rule.weight_bounds, MASK)
        return w / np.abs(w).max() if normalise else w

    out = []
    for t, (obs, reward) in enumerate(zip(observations, rewards, strict=True)):
        current = ref.propagate(src, dst, MASK, w, x, N)
        obs = np.asarray(obs, np.float64)
        current = ref.inject(
            current, np.asarray(policy.input_weight) * obs, policy.input_ids
        )
        v, new_x = ref.rate_step(v, current, bias, tau, policy.neurons.dt)
        increment = ref.hebbian_increment(x[src], new_x[dst], a, b, c, d)
        trace = np.where(MASK, rule.trace_decay * trace + increment, 0.0)
        if rule.modulation == "none":
            w = update(w, 1.0)
        elif rule.modulation == "neuron":
            w = update(w, new_x[rule.modulator])
        else:  # the reward prediction error, as reference_nets.reinforce
            r = float(np.clip(reward, -1.0, 1.0))
            m = r - baseline / (1 - 0.99**t) if t else 0.0
            baseline = 0.99 * baseline + 0.01 * r
            w = update(w, m)
        x = new_x
        out.append((new_x[list(policy.output_ids)], w))
    return out


CASES = [
    ("segment", PerSynapseHebbianRule(**_coefficients())),  # Najarro & Risi's
    ("gather", PerSynapseHebbianRule(**_coefficients())),
    ("dense", PerSynapseHebbianRule(**_coefficients())),
    (
        "gather",
        PerSynapseHebbianRule(
            **_coefficients(1),
            modulation="neuron",
            modulator=5,
            trace_decay=0.5,
            normalise=False,
        ),
    ),
    ("segment", PerSynapseHebbianRule(**_coefficients(2), modulation="reward")),
    (
        "segment",
        HebbianRule(0.7, 0.1, -0.2, 0.05, learning_rate=0.3, modulation="none"),
    ),
]


@pytest.mark.parametrize(
    "layout, rule",
    CASES,
    ids=["nr-segment", "nr-gather", "nr-dense", "neuron", "reward", "shared-none"],
)
def test_steps_equal_the_numpy_reference(layout, rule):
    policy = _policy(layout, rule)
    observations, rewards = _inputs()
    actions, states = _lifetime(policy, observations, rewards)
    weights = np.asarray(jax.vmap(policy.layout.edge_values)(states.plastic.weights))
    want = _reference_lifetime(policy, np.asarray(observations), np.asarray(rewards))
    for t, (action, want_weights) in enumerate(want):
        np.testing.assert_allclose(np.asarray(actions[t]), action, **TOL)
        np.testing.assert_allclose(weights[t], want_weights, **TOL, err_msg=str(t))
    start = np.asarray(policy.weights) * MASK
    assert np.abs(weights[-1] - np.clip(start, -2, 2)).max() > 1e-2  # it learnt
    if getattr(rule, "normalise", False):
        assert np.abs(weights).max(axis=1) == pytest.approx(1.0)


def test_equal_coefficients_on_every_edge_are_the_shared_rule():
    shared = HebbianRule(0.7, 0.1, -0.2, 0.05, learning_rate=0.3, modulation="none")
    per_edge = PerSynapseHebbianRule(
        0.7, 0.1, -0.2, 0.05, learning_rate=0.3, trace_decay=0.9, normalise=False
    )
    observations, rewards = _inputs(20)
    got, got_states = _lifetime(_policy("gather", per_edge), observations, rewards)
    want, want_states = _lifetime(_policy("gather", shared), observations, rewards)
    # equal to float32 rounding (XLA contracts multiply-adds where its fusions
    # allow, and the two programs fuse differently)
    close = {"rtol": 1e-6, "atol": 1e-6}
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), **close)
    got_weights = np.asarray(got_states.plastic.weights)
    want_weights = np.asarray(want_states.plastic.weights)
    np.testing.assert_allclose(got_weights, want_weights, **close)
    assert np.abs(got_weights[-1] - got_weights[0]).max() > 1e-2  # it learnt


def test_normalisation_divides_each_genome_by_its_largest_weight():
    weights = jnp.stack(
        [
            jnp.array([[0.5, -2.0], [1.0, 0.0]]),
            jnp.zeros((2, 2)),
            jnp.array([[0.0, 0.25], [-0.125, 0.0]]),
        ],
        axis=-1,
    )  # [K, N, B]: three genomes, the population last
    out = np.asarray(normalise_weights(weights))
    np.testing.assert_array_equal(out[..., 0], [[0.25, -1.0], [0.5, 0.0]])
    np.testing.assert_array_equal(out[..., 1], np.zeros((2, 2)))  # all 0 stays 0
    np.testing.assert_array_equal(out[..., 2], [[0.0, 1.0], [-0.5, 0.0]])


def test_coefficients_become_one_per_edge_and_bad_ones_are_refused():
    policy = _policy("segment", PerSynapseHebbianRule(b=0.5))
    for name in ("a", "b", "c", "d", "learning_rate"):
        assert getattr(policy.rule, name).shape == (E_MAX,)
    assert float(policy.rule.b[7]) == 0.5 and policy.rule.modulation == "none"
    with pytest.raises(ValueError, match="a has 3 values; the network has 48"):
        _policy("segment", PerSynapseHebbianRule(a=[1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="one value per edge slot"):
        PerSynapseHebbianRule(a=np.ones((2, 2)))
    with pytest.raises(ValueError, match="learning_rate must be finite"):
        PerSynapseHebbianRule(learning_rate=float("nan"))
    with pytest.raises(ValueError, match="normalise must be true or false"):
        PerSynapseHebbianRule(normalise=1)
    with pytest.raises(ValueError, match="trace_decay must be in"):
        PerSynapseHebbianRule(trace_decay=1.0)


@pytest.mark.parametrize(
    "rule",
    [PerSynapseHebbianRule(), HebbianRule(modulation="none")],
    ids=["per-synapse", "unmodulated"],
)
def test_the_fused_kernel_is_refused(rule):
    with pytest.raises(ValueError, match=r"layout='pallas'.*use layout 'auto'"):
        _policy("pallas", rule)


def test_a_per_synapse_table_builds_and_resolves_to_itself():
    table = {"rule": "per_synapse_hebbian", "learning_rate": 0.05, "c": -0.1}
    options = {"num_neurons": 10, "fan_in": 3, "plasticity": table}
    net = sparse_rate(3, 2, **options, key=jr.key(0))
    assert isinstance(net.rule, PerSynapseHebbianRule)
    assert net.rule.learning_rate.shape == (30,)
    effective = sparse_rate.effective_options(options)
    resolved = effective["plasticity"]
    assert resolved["rule"] == "per_synapse_hebbian" and resolved["normalise"] is True
    assert resolved["modulation"] == "none" and resolved["trace_decay"] == 0.0
    assert sparse_rate.effective_options(effective) == effective
    assert tree_equal(sparse_rate(3, 2, **effective, key=jr.key(0)), net)


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_weights_at_birth_are_drawn_every_lifetime_from_the_declared_law(
    distribution,
):
    """Najarro & Risi's condition: no weights in the genome, fresh ones at every
    birth, from the declared distribution, on the topology's edges only."""
    s = 0.25
    rule = PerSynapseHebbianRule(initial_weights=distribution, initial_scale=s)
    policy = _policy("segment", rule)
    assert policy.weights.shape == (0,)  # nothing to evolve but the rule
    born = jax.vmap(lambda k: policy.initial_state(k).plastic.weights)(
        jr.split(jr.key(1), 2000)
    )
    again = policy.initial_state(jr.key(1)).plastic.weights
    first = policy.initial_state(jr.split(jr.key(1), 2000)[0]).plastic.weights
    np.testing.assert_array_equal(born[0], first)
    assert not np.array_equal(again, born[1])
    values = np.asarray(born)[:, MASK]
    assert np.all(np.asarray(born)[:, ~MASK] == 0.0)
    n = values.size
    assert abs(values.mean()) < 4 * s / np.sqrt(n)
    if distribution == "uniform":
        assert np.all(np.abs(values) <= s)
        assert values.std() == pytest.approx(s / np.sqrt(3), rel=0.02)
    else:
        assert values.std() == pytest.approx(s, rel=0.02)
    # a different lifetime, different weights; the evolved default is unchanged
    evolved = _policy("segment", PerSynapseHebbianRule())
    assert evolved.weights.shape == (E_MAX,)


def test_bad_initial_weight_laws_are_refused():
    with pytest.raises(ValueError, match="initial_weights must be one of 'evolved'"):
        PerSynapseHebbianRule(initial_weights="xavier")
    with pytest.raises(ValueError, match="initial_scale must be a finite number > 0"):
        PerSynapseHebbianRule(initial_weights="uniform", initial_scale=0.0)
