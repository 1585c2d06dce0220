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
    for i, layer in enumerate(policy.mlp.layers):
        h = np.asarray(layer.weight) @ h + np.asarray(layer.bias)
        h = np.tanh(h)  # hidden activation and final activation are both tanh
        del i
    np.testing.assert_allclose(
        np.asarray(policy(obs, None)[0]), h, rtol=1e-5, atol=1e-6
    )


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
