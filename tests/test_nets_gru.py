"""`GRUPolicy`: Equinox's GRU cell with a tanh readout."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from reference_envs import CounterEnv

from eqxevo import GenomeLayout, experiment
from eqxevo._app import config
from eqxevo._src.nets.gru import GRUState
from eqxevo.nets import GRUPolicy
from eqxevo.testing import check_policy


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def reference_step(policy, obs, hidden):
    """One GRU step and readout (Cho et al. 2014, Equinox's gate order r, z, n)."""
    cell = policy.cell
    w_ih, w_hh = np.asarray(cell.weight_ih, np.float64), np.asarray(cell.weight_hh)
    b, b_n = np.asarray(cell.bias, np.float64), np.asarray(cell.bias_n, np.float64)
    i_r, i_z, i_n = np.split(w_ih @ obs + b, 3)
    h_r, h_z, h_n = np.split(w_hh @ hidden, 3)
    r = _sigmoid(i_r + h_r)
    z = _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * (h_n + b_n))
    hidden = (1.0 - z) * n + z * hidden
    action = np.tanh(
        np.asarray(policy.readout_weight) @ hidden + np.asarray(policy.readout_bias)
    )
    return action, hidden


def test_gru_steps_equal_the_numpy_reference(key):
    policy = GRUPolicy(2, 1, 4, key=key)
    # a readout that is not zero-biased, so the reference checks it too
    policy = eqx.tree_at(lambda p: p.readout_bias, policy, jnp.array([0.3]))
    state = policy.initial_state(key)
    assert isinstance(state, GRUState) and not np.any(np.asarray(state.hidden))
    hidden = np.zeros(4)
    step = eqx.filter_jit(lambda p, o, s: p(o, s))
    for t in range(5):
        obs = 2.0 * jr.normal(jr.fold_in(key, t), (2,))
        action, state = step(policy, obs, state)
        want, hidden = reference_step(policy, np.asarray(obs, np.float64), hidden)
        assert action.shape == (1,) and state.hidden.shape == (4,)
        np.testing.assert_allclose(np.asarray(action), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(
            np.asarray(state.hidden), hidden, rtol=1e-5, atol=1e-6
        )
    assert np.any(hidden != 0)


def test_gru_policy_meets_the_protocol_and_is_a_genome(key):
    policy = GRUPolicy(2, 1, 4, key=key)
    check_policy(policy, CounterEnv(), key=key)  # bounded, one compilation, vmap
    # the cell's 3 gates (input and hidden weights, biases, bias_n), the readout
    gates = 3 * 4 * 2 + 3 * 4 * 4 + 3 * 4 + 4
    assert GenomeLayout.from_genome(policy).num_params == gates + 1 * 4 + 1


def test_gru_config_builds_the_policy():
    items = ["net.name=gru", "net.options.hidden_size=4", "strategy.population_size=8"]
    built = experiment.build(config.load(None, items))
    assert isinstance(built.genome, GRUPolicy) and built.genome.hidden_size == 4
    assert built.experiment.net.options == {"hidden_size": 4}


@pytest.mark.parametrize("kwargs", [{"hidden_size": 0}, {"obs_size": 0}])
def test_bad_gru_sizes_raise_a_clear_error(key, kwargs):
    args = {"obs_size": 4, "action_size": 2, "hidden_size": 4} | kwargs
    with pytest.raises(ValueError, match="must be a positive int"):
        GRUPolicy(**args, key=key)
