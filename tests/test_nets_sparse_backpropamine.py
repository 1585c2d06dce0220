"""`BackpropamineRule`: backpropamine on the sparse rate and spiking networks."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import reference_nets as ref
from helpers import tree_equal

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._src.nets.propagate import LAYOUTS
from eqxevo.nets import (
    BackpropamineRule,
    BackpropamineState,
    SparseRatePolicy,
    SparseSpikingPolicy,
    Topology,
    sparse_lif,
    sparse_rate,
)

# One small topology for the whole file (padded: some edge slots are masked out).
N, E_MAX, OBS, ACT, STEPS = 12, 48, 4, 2, 12
TOL = {"rtol": 2e-5, "atol": 2e-5}  # float32 against float64 over a few steps
TOPOLOGY = Topology.random(N, 0.25, num_edges=E_MAX, key=jr.key(0))


def _policy(kind, layout, rule, *, alpha=None, gain=3.0, bias=0.2):
    """A policy with `rule`; alpha (None: a random one per edge), the modulator's
    gain and bias set so that learning changes what it does."""
    if kind == "rate":
        policy = SparseRatePolicy(
            OBS,
            ACT,
            TOPOLOGY,
            layout=layout,
            plasticity=rule,
            weight_scale=2.0,
            key=jr.key(1),
        )
    else:
        policy = SparseSpikingPolicy(
            OBS,
            ACT,
            TOPOLOGY,
            layout=layout,
            plasticity=rule,
            weight_scale=2.0,
            tau=4.0,
            readout_tau=3.0,
            input_ids=(0, 3, 6, 9),
            key=jr.key(1),
        )
    if rule is None:
        return policy
    if alpha is None:
        alpha = jr.uniform(jr.key(2), (E_MAX,), minval=-2.0, maxval=2.0)
    return eqx.tree_at(
        lambda p: (p.rule.alpha, p.rule.modulator_gain, p.rule.modulator_bias),
        policy,
        (jnp.broadcast_to(alpha, (E_MAX,)), jnp.float32(gain), jnp.float32(bias)),
    )


def _observations(num_steps=STEPS):
    keys = jr.split(jr.key(3), num_steps)
    return jax.vmap(lambda k: jr.uniform(k, (OBS,), minval=0.5, maxval=1.5))(keys)


@eqx.filter_jit
def _lifetime(policy, observations):
    """Actions and every state of a lifetime, for the population under vmap."""

    def body(state, obs):
        action, state = policy(obs, state)
        return state, (action, state)

    _, (actions, states) = jax.lax.scan(
        body, policy.initial_state(jr.key(4)), observations
    )
    return actions, states


def _population(policy, size=3):
    """`size` genomes around `policy` (every evolvable leaf perturbed)."""
    evolvable, static = eqx.partition(policy, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(evolvable)
    keys = jr.split(jr.key(5), len(leaves))
    leaves = [
        x + 0.1 * jr.normal(k, (size, *x.shape))
        for x, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree.unflatten(treedef, leaves), static


@eqx.filter_jit
def _population_lifetime(evolvable, static, observations):
    return jax.vmap(lambda e: _lifetime(eqx.combine(e, static), observations))(
        evolvable
    )


# -- alpha = 0: the non-plastic network, bit for bit -------------------------------


CASES = [("rate", layout, "simple") for layout in LAYOUTS]
CASES += [("rate", "segment", "retroactive")]
CASES += [("spiking", "gather", "simple")]


@pytest.mark.parametrize("kind, layout, modulation", CASES)
def test_alpha_zero_is_the_non_plastic_network_bit_for_bit(kind, layout, modulation):
    rule = BackpropamineRule(modulation=modulation)
    plastic = _policy(kind, layout, rule, alpha=0.0)
    fixed = _policy(kind, layout, None)
    observations = _observations(40)
    # a population under vmap: the path evaluation takes (population-last)
    evolvable, static = _population(plastic)
    evolvable = eqx.tree_at(lambda p: p.rule.alpha, evolvable, jnp.zeros((3, E_MAX)))
    actions, states = _population_lifetime(evolvable, static, observations)
    evolvable_fixed = eqx.tree_at(lambda p: p.rule, evolvable, None)
    static_fixed = eqx.tree_at(lambda p: p.rule, static, None)
    static_fixed = eqx.tree_at(lambda p: p.layout, static_fixed, fixed.layout)
    want, _ = _population_lifetime(evolvable_fixed, static_fixed, observations)
    assert np.array_equal(np.asarray(actions), np.asarray(want))
    # the network did learn something, alpha just ignores it
    assert float(jnp.abs(states.plastic.hebb[:, -1]).max()) > 1e-3


# -- the NumPy reference -------------------------------------------------------------


def _reference_lifetime(policy, observations):
    """Actions and edge-list Hebb (and E) after each step, in float64, edge by edge."""
    rule, layout = policy.rule, policy.layout
    src = np.asarray(TOPOLOGY.src)
    dst = np.asarray(TOPOLOGY.dst)
    mask = np.asarray(TOPOLOGY.mask)
    f64 = lambda x: np.asarray(x, np.float64)
    w, alpha = f64(policy.weights), f64(rule.alpha)
    bias, tau, dt = f64(policy.neurons.bias), f64(policy.neurons.tau), policy.neurons.dt
    gain, mbias = float(rule.modulator_gain), float(rule.modulator_bias)
    modulator = N - ACT - 1 if rule.modulator is None else rule.modulator
    retro = rule.modulation == "retroactive"
    eta = float(rule.trace_rate) if retro else 0.0
    spiking = isinstance(policy, SparseSpikingPolicy)
    hebb, trace = np.zeros(E_MAX), np.zeros(E_MAX)
    v, x, readout = np.zeros(N), np.zeros(N), np.zeros(ACT)
    refractory, rates = np.zeros(N, np.int64), np.zeros(N)
    out = []
    del layout
    for obs in np.asarray(observations, np.float64):
        effective = np.where(mask, w + alpha * hebb, 0.0)
        current = ref.propagate(src, dst, mask, effective, x, N)
        current = ref.inject(current, f64(policy.input_weight) * obs, policy.input_ids)
        if spiking:
            n = policy.neurons
            v, refractory, spikes = ref.lif_step(
                v,
                refractory,
                current,
                bias,
                tau,
                dt,
                n.threshold,
                n.reset,
                n.refractory_steps,
            )
            decay = policy.readout_decay
            outputs = spikes[list(policy.output_ids)]
            readout = decay * readout + (1 - decay) * outputs
            action = np.tanh(
                f64(policy.readout_weight) * readout + f64(policy.readout_bias)
            )
            new_rates = decay * rates + (1 - decay) * spikes
            pre, post, activity = rates[src], new_rates[dst], new_rates[modulator]
            rates, x = new_rates, spikes
        else:
            v, new_x = ref.rate_step(v, current, bias, tau, dt)
            action = new_x[list(policy.output_ids)]
            pre, post, activity = x[src], new_x[dst], new_x[modulator]
            x = new_x
        m = math.tanh(gain * activity + mbias)
        coactivity = np.where(mask, pre * post, 0.0)
        bound = rule.hebb_bound
        if retro:
            hebb = np.clip(hebb + m * trace, -bound, bound)
            trace = (1 - eta) * trace + eta * coactivity
        else:
            hebb = np.clip(hebb + m * coactivity, -bound, bound)
        out.append((action, hebb, trace))
    return out


REFERENCE_CASES = [
    ("rate", "segment", "simple"),
    ("rate", "gather", "retroactive"),
    ("spiking", "gather", "simple"),
    ("spiking", "segment", "retroactive"),
]


@pytest.mark.parametrize("kind, layout, modulation", REFERENCE_CASES)
def test_steps_equal_the_numpy_reference(kind, layout, modulation):
    rule = BackpropamineRule(modulation=modulation, hebb_bound=0.3, trace_rate=0.4)
    policy = _policy(kind, layout, rule)
    observations = _observations()
    actions, states = _lifetime(policy, observations)
    want = _reference_lifetime(policy, observations)
    edges = jax.vmap(policy.layout.edge_values)
    hebb = np.asarray(edges(states.plastic.hebb))
    for t, (action, want_hebb, want_trace) in enumerate(want):
        np.testing.assert_allclose(np.asarray(actions[t]), action, **TOL)
        np.testing.assert_allclose(hebb[t], want_hebb, **TOL, err_msg=f"Hebb {t}")
        if modulation == "retroactive":
            trace = np.asarray(policy.layout.edge_values(states.plastic.eligibility[t]))
            np.testing.assert_allclose(trace, want_trace, **TOL, err_msg=f"E {t}")
    assert np.abs(hebb[-1]).max() > 1e-3  # the test exercises learning
    if kind == "spiking":
        assert float(states.spikes.sum()) > 0


# -- bounds, reset, masking ----------------------------------------------------------


def test_hebb_stays_within_its_bound_is_zero_at_birth_and_on_padding():
    # the reference test's rule and shapes: its compiled lifetime is reused
    rule = BackpropamineRule(hebb_bound=0.3, trace_rate=0.4)
    policy = _policy("rate", "segment", rule, gain=0.0, bias=5.0)  # M(t) ~ 1
    birth = policy.initial_state(jr.key(0)).plastic
    assert isinstance(birth, BackpropamineState) and birth.eligibility is None
    assert birth.hebb.shape == policy.layout.native_shape
    assert not np.any(np.asarray(birth.hebb))
    _, states = _lifetime(policy, _observations())
    hebb = np.asarray(states.plastic.hebb)
    assert np.abs(hebb).max() == np.float32(0.3)  # reached, never passed
    assert np.mean(np.abs(hebb[-1]) == np.float32(0.3)) > 0.1
    padding = ~np.asarray(policy.layout.native_mask())
    assert padding.any() and not np.any(hebb[:, padding])
    # a new lifetime starts from nothing learned: the same actions again
    again, _ = _lifetime(policy, _observations())
    first, _ = _lifetime(policy, _observations())
    assert np.array_equal(np.asarray(again), np.asarray(first))


def test_arguments_are_checked_and_the_modulator_defaults_below_the_outputs():
    policy = _policy("rate", "segment", BackpropamineRule())
    assert policy.rule.modulator_id(N, ACT) == N - ACT - 1
    assert policy.rule.alpha.shape == (E_MAX,)
    alpha = np.linspace(-1.0, 1.0, E_MAX).tolist()  # one per edge slot, from TOML
    rule = BackpropamineRule(alpha_init=alpha)
    policy = SparseRatePolicy(OBS, ACT, TOPOLOGY, plasticity=rule, key=jr.key(0))
    np.testing.assert_array_equal(policy.rule.alpha, np.float32(alpha))
    with pytest.raises(ValueError, match="alpha_init has 3 values; the network has"):
        SparseRatePolicy(
            OBS,
            ACT,
            TOPOLOGY,
            plasticity=BackpropamineRule(alpha_init=[0.0, 1.0, 2.0]),
            key=jr.key(0),
        )
    with pytest.raises(ValueError, match=r"plasticity\.modulator=12 is not a neuron"):
        _policy("rate", "segment", BackpropamineRule(modulator=12))
    tiny = Topology.fixed_fan_in(2, 1, key=jr.key(0))
    with pytest.raises(ValueError, match=r"default N - action_size - 1 = -1"):
        SparseRatePolicy(1, 2, tiny, plasticity=BackpropamineRule(), key=jr.key(0))
    with pytest.raises(ValueError, match="trace_rate must be a number in"):
        BackpropamineRule(modulation="retroactive", trace_rate=1.5)


def test_the_fused_kernel_is_refused_with_the_layouts_that_work():
    with pytest.raises(
        ValueError, match=r"layout='pallas'.*BackpropamineRule.*'gather'"
    ):
        SparseRatePolicy(
            OBS,
            ACT,
            TOPOLOGY,
            layout="pallas",
            plasticity=BackpropamineRule(),
            key=jr.key(0),
        )


# -- the factories and the config path -----------------------------------------------


@pytest.mark.parametrize("factory", [sparse_rate, sparse_lif], ids=lambda f: f.__name__)
def test_a_backpropamine_table_builds_and_resolves_to_itself(factory):
    table = {"rule": "backpropamine", "hebb_bound": 0.5, "modulation": "retroactive"}
    options = {"num_neurons": 10, "fan_in": 3, "plasticity": table}
    net = factory(3, 2, **options, key=jr.key(0))
    assert isinstance(net.rule, BackpropamineRule)
    assert net.rule.hebb_bound == 0.5 and net.rule.alpha.shape == (30,)
    effective = factory.effective_options(options)
    assert effective["plasticity"] == table | {"alpha_init": 0.0, "trace_rate": 0.1}
    assert factory.effective_options(effective) == effective
    assert tree_equal(factory(3, 2, **effective, key=jr.key(0)), net)
    with pytest.raises(ValueError, match=r"plasticity\.rule must be one of"):
        factory(3, 2, plasticity={"rule": "oja"}, key=jr.key(0))


def test_the_default_rule_s_table_is_unchanged():
    # a config written before rule kinds existed resolves to the same table
    effective = sparse_rate.effective_options({"plasticity": True})["plasticity"]
    assert "rule" not in effective and effective["trace_decay"] == 0.9


def test_an_experiment_file_with_a_backpropamine_table_builds(tmp_path):
    path = tmp_path / "bandit.toml"
    path.write_text(
        '[net]\nname = "sparse_rate"\n[net.options]\nnum_neurons = 12\n'
        'fan_in = 4\nplasticity = { rule = "backpropamine", hebb_bound = 1.0 }\n'
        '[strategy]\nname = "snes"\npopulation_size = 8\n'
    )
    built = experiment.build(config.load(path))
    assert isinstance(built.genome.rule, BackpropamineRule)
    assert built.experiment.net.options["plasticity"]["rule"] == "backpropamine"
    again = experiment.build(built.experiment)
    assert again.experiment == built.experiment
    assert tree_equal(again.genome, built.genome)
