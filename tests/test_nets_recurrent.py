import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxevo
from eqxevo.nets import RecurrentPolicy


def _reference(policy, obs, hidden):
    a = policy.leak
    drive = (
        np.asarray(policy.recurrent_weight) @ hidden
        + np.asarray(policy.input_weight) @ obs
    )
    hidden = (1 - a) * hidden + a * np.tanh(drive + np.asarray(policy.bias))
    action = np.tanh(
        np.asarray(policy.readout_weight) @ hidden + np.asarray(policy.readout_bias)
    )
    return action, hidden


@pytest.mark.parametrize("tau", [1.0, 4.0])
def test_recurrent_policy_steps_equal_the_numpy_reference(key, tau):
    policy = RecurrentPolicy(4, 2, 8, tau=tau, key=key)
    assert policy.leak == pytest.approx(1.0 / tau)
    state = policy.initial_state(key)
    hidden = np.zeros(8)
    step = eqx.filter_jit(lambda p, o, s: p(o, s))
    for t in range(5):
        obs = jr.normal(jr.fold_in(key, t), (4,))
        action, state = step(policy, obs, state)
        want_action, hidden = _reference(policy, np.asarray(obs, np.float64), hidden)
        np.testing.assert_allclose(
            np.asarray(action), want_action, rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            np.asarray(state.hidden), hidden, rtol=1e-5, atol=1e-5
        )
    assert np.all(np.abs(np.asarray(action)) <= 1.0)


def test_recurrent_policy_is_a_genome(key):
    policy = RecurrentPolicy(4, 2, 6, key=key)
    strategy = eqxevo.Strategy("snes", policy, 8)
    population, _ = strategy.ask(key, strategy.init(key))
    assert strategy.num_params == 6 * 6 + 6 * 4 + 6 + 2 * 6 + 2

    def fitness(genome, key):
        action, _ = genome(jnp.ones(4), genome.initial_state(key))
        return jnp.sum(action)

    values, _ = eqxevo.evaluate(key, fitness, population)
    assert values.shape == (8,)


@pytest.mark.parametrize(
    "kwargs", [{"hidden_size": 0}, {"obs_size": 0}, {"tau": 0.0}, {"dt": -1.0}]
)
def test_bad_recurrent_config_raises_a_clear_error(key, kwargs):
    args = {"obs_size": 4, "action_size": 2, "hidden_size": 4} | kwargs
    with pytest.raises(ValueError, match="must be"):
        RecurrentPolicy(**args, key=key)
