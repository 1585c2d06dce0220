import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxevo
from eqxevo import Strategy
from eqxevo.nets import MLPPolicy


def test_mlp_policy_is_stateless_and_bounded(key):
    policy = MLPPolicy(5, 3, width=8, depth=2, key=key)
    action, state = policy(jnp.ones(5) * 10.0, policy.initial_state(key))
    assert action.shape == (3,) and state is None
    assert np.all(np.abs(np.asarray(action)) <= 1.0)


def test_mlp_policy_matches_numpy_reference(key):
    policy = MLPPolicy(4, 2, width=6, depth=2, key=key)
    obs = jr.normal(key, (4,))
    h = np.asarray(obs)
    for weight, bias in zip(policy.weights, policy.biases, strict=True):
        h = h @ np.asarray(weight) + np.asarray(bias)
        h = np.tanh(h)  # hidden activation and final activation are both tanh
    np.testing.assert_allclose(
        np.asarray(policy(obs, None)[0]), h, rtol=1e-5, atol=1e-6
    )


def test_mlp_policy_stores_weights_in_out_from_equinox_initialisation(key):
    """(in, out) weights: the transposes of `eqx.nn.MLP`'s with the same key,
    so the initial policy is the same function."""
    policy = MLPPolicy(3, 2, width=5, depth=2, key=key)
    mlp = eqx.nn.MLP(3, 2, 5, 2, key=key)
    assert [w.shape for w in policy.weights] == [(3, 5), (5, 5), (5, 2)]
    for weight, bias, layer in zip(
        policy.weights, policy.biases, mlp.layers, strict=True
    ):
        np.testing.assert_array_equal(np.asarray(weight), np.asarray(layer.weight).T)
        np.testing.assert_array_equal(np.asarray(bias), np.asarray(layer.bias))


def test_mlp_policy_depth_zero_is_one_layer(key):
    policy = MLPPolicy(3, 2, width=5, depth=0, key=key)
    assert [w.shape for w in policy.weights] == [(3, 2)]
    obs = jnp.arange(3.0)
    expected = np.tanh(
        np.asarray(obs) @ np.asarray(policy.weights[0]) + np.asarray(policy.biases[0])
    )
    np.testing.assert_allclose(np.asarray(policy(obs, None)[0]), expected, rtol=1e-6)


def test_mlp_policy_is_a_genome(key):
    policy = MLPPolicy(4, 2, width=6, depth=1, key=key)
    strategy = Strategy("snes", policy, 8)
    population, _ = strategy.ask(key, strategy.init(key))
    # evaluate maps only the evolvable leaves (the activation function is static)
    fitness, actions = eqxevo.evaluate(
        key,
        lambda p, k: (jnp.sum(p(jnp.ones(4), None)[0]), p(jnp.ones(4), None)[0]),
        population,
    )
    assert fitness.shape == (8,) and actions.shape == (8, 2)


@pytest.mark.parametrize("bad", [{"obs_size": 0}, {"width": -1}, {"depth": -1}])
def test_mlp_policy_rejects_bad_sizes(key, bad):
    kwargs = {"obs_size": 4, "action_size": 2, "width": 4, "depth": 1} | bad
    with pytest.raises((ValueError, TypeError)):
        MLPPolicy(**kwargs, key=key)


def test_the_mlp_factory_without_plasticity_is_exactly_mlp_policy(key):
    """`[net] name = "mlp"` builds the same genome, leaf for leaf and bit for bit,
    as before it took `plasticity`: existing configs and checkpoints stand."""
    from helpers import tree_equal

    from eqxevo._src.nets.factories import mlp

    want = MLPPolicy(4, 2, 6, 1, key=key)
    for plasticity in (None, False):
        got = mlp(4, 2, 6, 1, plasticity=plasticity, key=key)
        assert type(got) is MLPPolicy and tree_equal(got, want)
