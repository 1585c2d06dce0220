"""`PlasticMLPPolicy` and `neuromodulated_hebb`: backpropamine (Miconi et al. 2019)."""

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import small_experiment, tree_equal
from hypothesis import given, settings
from reference_envs import CounterEnv

import eqxevo
from eqxevo import GenomeLayout, experiment, record
from eqxevo._src.nets.factories import mlp
from eqxevo._src.rollout import lifetime_step, start_lifetime
from eqxevo.nets import MLPPolicy, PlasticMLPPolicy
from eqxevo.testing import check_policy

# -- the NumPy reference ------------------------------------------------------------


def reference_step(policy, obs, hebb, eligibility):
    """One step of a `PlasticMLPPolicy` (tanh activations), in float64 NumPy."""
    weights = [np.asarray(w, np.float64) for w in policy.mlp.weights]
    biases = [np.asarray(b, np.float64) for b in policy.mlp.biases]
    alpha = {
        layer: np.asarray(a, np.float64)
        for layer, a in zip(policy.layers, policy.alpha, strict=True)
    }
    h, coactivity, h_last = obs, [], obs
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        if i == len(weights) - 1:
            h_last = h
        if i in alpha:
            w = w + alpha[i] * hebb[policy.layers.index(i)]
        out = np.tanh(h @ w + b)
        if i in alpha:
            coactivity.append(np.outer(h, out))
        h = out
    m = np.tanh(
        h_last @ np.asarray(policy.modulator_weight, np.float64)
        + float(policy.modulator_bias)
    )
    bound = policy.hebb_bound
    if policy.modulation == "simple":
        hebb = [
            np.clip(x + m * c, -bound, bound)
            for x, c in zip(hebb, coactivity, strict=True)
        ]
        return h, hebb, eligibility
    eta = float(np.clip(policy.trace_rate, 0.0, 1.0))
    hebb = [
        np.clip(x + m * e, -bound, bound)
        for x, e in zip(hebb, eligibility, strict=True)
    ]
    eligibility = [
        (1 - eta) * e + eta * c for e, c in zip(eligibility, coactivity, strict=True)
    ]
    return h, hebb, eligibility


def randomised(policy, seed, scale=1.0):
    """`policy` with random alphas and modulator weights (so plasticity acts),
    drawn with NumPy: JAX would compile its draws anew for every shape."""
    rng = np.random.default_rng(seed)

    def normal(scale, shape):
        return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)

    alpha = tuple(normal(scale, a.shape) for a in policy.alpha)
    weight = normal(2.0, policy.modulator_weight.shape)
    return eqx.tree_at(lambda p: (p.alpha, p.modulator_weight), policy, (alpha, weight))


_step = eqx.filter_jit(lambda policy, obs, state: policy(obs, state))


# Shapes drawn from those the other tests build too: a policy's first build
# at a new shape compiles its random draws, which costs more than the test.
@settings(max_examples=3)
@given(
    sizes=st.tuples(
        st.sampled_from([2, 4]), st.integers(1, 2), st.just(4), st.integers(0, 2)
    ),
    layer_bits=st.integers(1, 7),
    modulation=st.sampled_from(["simple", "retroactive"]),
    seed=st.integers(0, 2**16),
)
def test_steps_equal_the_numpy_reference(sizes, layer_bits, modulation, seed):
    obs_size, action_size, width, depth = sizes
    layers = [i for i in range(depth + 1) if layer_bits >> i & 1] or [depth]
    key = jr.key(seed)
    policy = PlasticMLPPolicy(
        obs_size,
        action_size,
        width,
        depth,
        layers=layers,
        modulation=modulation,
        hebb_bound=0.5,
        trace_rate=0.3,
        key=key,
    )
    policy = randomised(policy, seed)
    state = policy.initial_state(key)
    rng = np.random.default_rng(seed)
    hebb = [np.zeros(a.shape) for a in policy.alpha]
    eligibility = [np.zeros(a.shape) for a in policy.alpha]
    for _ in range(4):
        obs = jnp.asarray(2.0 * rng.standard_normal(obs_size), jnp.float32)
        action, state = _step(policy, obs, state)
        want, hebb, eligibility = reference_step(
            policy, np.asarray(obs, np.float64), hebb, eligibility
        )
        np.testing.assert_allclose(np.asarray(action), want, rtol=1e-5, atol=1e-5)
        for got, ref in zip(state.hebb, hebb, strict=True):
            np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
        if modulation == "retroactive":
            for got, ref in zip(state.eligibility, eligibility, strict=True):
                np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-5, atol=1e-5)
        else:
            assert state.eligibility == ()
    # plasticity acted: the Hebbian traces moved (so the comparison tested them)
    assert any(np.any(np.asarray(h) != 0) for h in state.hebb)


# -- alpha = 0, bounds, resets --------------------------------------------------------


@pytest.mark.parametrize("modulation", ["simple", "retroactive"])
def test_alpha_zero_reproduces_the_mlp_bit_for_bit(key, seed, modulation):
    env = CounterEnv()
    params = env.default_params()
    plastic = PlasticMLPPolicy(2, 1, 4, 2, modulation=modulation, key=key)
    # a busy modulator: Hebb moves, and alpha = 0 must keep it from acting
    plastic = eqx.tree_at(
        lambda p: p.modulator_bias, plastic, jnp.asarray(3.0, jnp.float32)
    )
    run_key = jr.fold_in(key, 1)
    got = record(run_key, plastic, env, params, 30)
    want = record(run_key, plastic.mlp, env, params, 30)
    assert np.array_equal(np.asarray(got.actions), np.asarray(want.actions))
    # not because alpha was never read: with alpha != 0 the actions differ
    moved = record(run_key, randomised(plastic, seed), env, params, 30)
    assert not np.array_equal(np.asarray(moved.actions), np.asarray(want.actions))


def test_hebb_is_zero_at_birth_and_stays_within_its_bounds(key, seed):
    env = CounterEnv()
    params = env.default_params()
    policy = PlasticMLPPolicy(2, 1, 4, 1, hebb_bound=0.25, key=key)
    policy = randomised(policy, seed, scale=3.0)

    @eqx.filter_jit
    def lifetime(key):
        """Hebb at birth and at every step of the lifetime `rollout` runs."""
        carry, keys = start_lifetime(policy, env, params, key)

        def body(carry, _):
            carry = lifetime_step(policy, env, params, keys, True, False, carry)[0]
            return carry, carry.policy_state.hebb

        return carry.policy_state.hebb, jax.lax.scan(body, carry, length=12)[1]

    for lifetime_key in jr.split(key, 2):
        birth, later = lifetime(lifetime_key)
        assert all(not np.any(np.asarray(h)) for h in birth)
        # the lifetime learned, up to the bound and no further; the next
        # lifetime starts from zero again
        assert max(float(jnp.max(jnp.abs(h))) for h in later) == 0.25


# -- the protocol, the genome, the config -------------------------------------------


def test_plastic_mlp_meets_the_policy_protocol_and_compiles_once(key, seed):
    env = CounterEnv()
    policy = PlasticMLPPolicy(2, 1, 4, 1, modulation="retroactive", key=key)
    policy = randomised(policy, seed)
    check_policy(policy, env, key=key)  # one compilation, vmap, rollout

    @eqx.debug.assert_max_traces(max_traces=1)
    def act(policy, obs, state):
        return policy(obs, state)

    act = eqx.filter_jit(act)
    state = policy.initial_state(key)
    for t in range(3):  # other weights, observations and states: one trace
        other = randomised(policy, seed + t)
        _, state = act(other, jnp.full(2, float(t)), state)


def test_the_plastic_mlp_is_a_genome(key):
    def num_params(policy):
        return GenomeLayout.from_genome(policy).num_params

    mlp_params = 2 * 4 + 4 + 4 * 1 + 1
    policy = PlasticMLPPolicy(2, 1, 4, 1, layers=[-1], key=key)
    # alpha of the output layer only, the modulator's 4 weights and its bias
    assert num_params(policy) == mlp_params + 4 * 1 + 5
    retroactive = PlasticMLPPolicy(2, 1, 4, 1, modulation="retroactive", key=key)
    # alpha of every weight, the modulator and eta
    assert num_params(retroactive) == mlp_params + (2 * 4 + 4 * 1) + 5 + 1


def test_the_mlp_factory_builds_the_plastic_mlp_from_its_options(key):
    assert type(mlp(2, 1, 4, 1, key=key)) is MLPPolicy
    assert tree_equal(mlp(2, 1, 4, 1, key=key), MLPPolicy(2, 1, 4, 1, key=key))
    table = {"layers": [1], "hebb_bound": 2.0}
    plastic = mlp(2, 1, 4, 1, plasticity=table, key=key)
    assert isinstance(plastic, PlasticMLPPolicy)
    assert plastic.layers == (1,) and plastic.hebb_bound == 2.0
    assert tree_equal(plastic, PlasticMLPPolicy(2, 1, 4, 1, **table, key=key))
    default = mlp(2, 1, 4, 1, plasticity=True, key=key)
    assert isinstance(default, PlasticMLPPolicy) and default.layers == (0, 1)
    # (beartype, on in the tests, refuses the type before the factory's own check)
    with pytest.raises((TypeError, ValueError), match="plasticity"):
        mlp(2, 1, plasticity="yes", key=key)  # pyright: ignore[reportArgumentType]


def test_effective_options_list_the_whole_plasticity_table():
    assert mlp.effective_options({}) == {"width": 32, "depth": 2}
    options = {"width": 4, "depth": 1, "plasticity": True}
    effective = mlp.effective_options(options)
    assert effective["plasticity"] == {
        "layers": [0, 1],
        "hebb_bound": 1.0,
        "modulation": "simple",
        "alpha_init": 0.0,
        "trace_rate": 0.1,
    }
    assert mlp.effective_options(effective) == effective
    key = jr.key(0)
    assert tree_equal(mlp(2, 1, **effective, key=key), mlp(2, 1, **options, key=key))


def test_the_mlp_config_with_plasticity_builds_a_plastic_mlp():
    built = experiment.build(
        small_experiment(
            "net.options.width=4",
            "net.options.plasticity.modulation=retroactive",
            "net.options.plasticity.layers=[1]",
        )
    )
    assert isinstance(built.genome, PlasticMLPPolicy)
    assert built.genome.layers == (1,) and built.genome.modulation == "retroactive"
    # the resolved config.toml holds the whole table, and builds the same genome
    written = built.experiment.net.options
    assert written["plasticity"]["hebb_bound"] == 1.0  # a default, written out
    assert tree_equal(
        mlp(2, 2, **written, key=jr.key(0)),
        mlp(2, 2, width=4, depth=1, plasticity=written["plasticity"], key=jr.key(0)),
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"layers": [3]}, "layers entry must be < 3"),
        ({"layers": [-4]}, "layers entry must be an int >= -3"),
        ({"layers": [1, 1]}, "each once"),
        ({"layers": "all"}, "layers"),
        ({"hebb_bound": 0.0}, "hebb_bound must be"),
        ({"modulation": "dopamine"}, "modulation"),
        ({"modulation": "retroactive", "trace_rate": 1.5}, "trace_rate must be in"),
        ({"alpha_init": float("nan")}, "alpha_init must be finite"),
    ],
)
def test_bad_plasticity_arguments_raise_a_clear_error(key, kwargs, match):
    # beartype (on in the tests) refuses a wrong type before the check does
    with pytest.raises((TypeError, ValueError), match=match):
        PlasticMLPPolicy(2, 1, 4, 2, **kwargs, key=key)


# -- a hand-wired plastic MLP on gymnax's BernoulliBandit-misc --------------------


def hand_wired_bandit_learner(alpha=0.01, step=0.1, gain=1000.0):
    """A plastic MLP that counts the evidence for arm 0 in one Hebbian weight.

    The arms pay with probabilities (0.1, 0.9) or (0.9, 0.1): a win on an arm or
    a loss on the other is the same evidence. Observations are
    `[last reward r, last arm one-hot o0, o1, time in [-1, 1]]`. The hidden
    layer (gain A) computes u = [won on arm 0], v = [lost on arm 1] (as +-1), g =
    [first step] and a constant c = 1, so e = u + v + 1.5 + 0.5 g is +1 (the last
    pull was evidence for arm 0), -1 (for arm 1) or 0 (no pull yet). The
    modulator is M = tanh(atanh(step) e) = step e; the plastic output synapse c ->
    out0 then accumulates Hebb += M c out0 = step e tanh(1) (out0 stays within
    1% of tanh(1)): Hebb counts the evidence, in steps of 0.076, up to the bound
    1. Output 0 reads alpha Hebb plus the latest evidence at the same scale;
    output 1 is tanh(1): the argmax follows the sign of all the evidence, which
    is the greedy Bayesian choice.
    """
    # every leaf is set below: trace the constructor for the structure alone
    policy = eqx.filter_eval_shape(
        lambda: PlasticMLPPolicy(4, 2, width=4, depth=1, layers=[1], key=jr.key(0))
    )
    a = gain
    w0 = np.zeros((4, 4), np.float32)
    b0 = np.zeros(4, np.float32)
    w0[:, 0], b0[0] = [a, a, 0, 0], -1.5 * a  # u: won on arm 0
    w0[:, 1], b0[1] = [-a, 0, a, 0], -0.5 * a  # v: lost on arm 1
    w0[:, 2], b0[2] = [0, 0, 0, -a], -0.99 * a  # g: the first step (time = -1)
    b0[3] = 20.0  # c: constant 1
    evidence, evidence_bias = np.array([1.0, 1.0, 0.5, 0.0], np.float32), 1.5
    latest = alpha * step * np.tanh(1.0)  # one pull's evidence at Hebb's scale
    w1 = np.zeros((4, 2), np.float32)
    w1[:, 0] = latest * evidence
    b1 = np.array([1.0 + latest * evidence_bias, 1.0], np.float32)
    alpha_out = np.zeros((4, 2), np.float32)
    alpha_out[3, 0] = alpha
    modulator = np.arctanh(step)
    values = (
        (jnp.asarray(w0), jnp.asarray(w1)),
        (jnp.asarray(b0), jnp.asarray(b1)),
        (jnp.asarray(alpha_out),),
        jnp.asarray(modulator * evidence, jnp.float32),
        jnp.asarray(modulator * evidence_bias, jnp.float32),
    )
    return eqx.tree_at(
        lambda p: (
            p.mlp.weights,
            p.mlp.biases,
            p.alpha,
            p.modulator_weight,
            p.modulator_bias,
        ),
        policy,
        values,
    )


def test_a_hand_wired_plastic_mlp_learns_the_bernoulli_bandit():
    """>= 87 over 100-pull lifetimes (greedy Bayes about 89.4, the best policy
    without memory, win-stay lose-shift, about 81.7): the plastic MLP, whose
    only memory is Hebb, can hold the solution."""
    gymnax = pytest.importorskip("eqxevo._src.envs.gymnax")
    env = gymnax.GymnaxEnv("BernoulliBandit-misc")
    fitness = eqxevo.LifetimeFitness(env, env.default_params(), 100)
    learner = hand_wired_bandit_learner()
    # the same network with plasticity off: what the observation alone allows
    reflex = eqx.tree_at(lambda p: p.alpha, learner, (jnp.zeros((4, 2)),))
    keys = jr.split(jr.key(2024), 512)  # held out: no weight was fitted to them
    lifetimes = eqx.filter_jit(
        lambda genome, keys: jax.vmap(lambda k: fitness(genome, k)[0])(keys)
    )
    learned = float(jnp.mean(lifetimes(learner, keys)))
    reflexive = float(jnp.mean(lifetimes(reflex, keys)))  # the same program
    assert learned >= 87.0, learned
    assert reflexive < 83.0, reflexive
