import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

import eqxevo
from eqxevo import rollout
from eqxevo.nets import MLPPolicy
from eqxevo.testing import check_env, check_policy

gymnax_env = pytest.importorskip("eqxevo._src.envs.gymnax")
GymnaxEnv = gymnax_env.GymnaxEnv


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_gymnax_envs_pass_the_testing_kit(name, key):
    env = GymnaxEnv(name)
    check_env(env, key=key)
    check_policy(MLPPolicy(env.obs_size, env.action_size, 4, 1, key=key), env, key=key)


def test_discrete_actions_are_the_argmax_of_the_policy_outputs(key):
    env = GymnaxEnv("CartPole-v1")
    assert (env.obs_size, env.action_size, env.discrete) == (4, 2, True)
    params = env.default_params()
    _, state = env.reset(key, params)
    # CartPole pushes right (+x velocity) for action 1, left for action 0.
    _, right, *_ = env.step(key, state, jnp.array([-0.5, 0.9]), params)
    _, left, *_ = env.step(key, state, jnp.array([0.9, -0.5]), params)
    assert float(right.x_dot) > float(state.x_dot) > float(left.x_dot)


def test_box_actions_map_the_unit_interval_onto_the_bounds():
    env = GymnaxEnv("Pendulum-v1")
    assert (env.action_size, env.low, env.high) == (1, (-2.0,), (2.0,))
    for unit, torque in ((-1.0, -2.0), (0.0, 0.0), (1.0, 2.0), (3.0, 2.0)):
        mapped = env.to_gymnax_action(jnp.array([unit], jnp.float32))
        np.testing.assert_allclose(mapped, [torque], atol=1e-6)


def test_normalize_obs_maps_bounded_dimensions_onto_the_unit_interval(key):
    env = GymnaxEnv("MountainCarContinuous-v0", normalize_obs=True)
    raw = GymnaxEnv("MountainCarContinuous-v0")
    params = env.default_params()
    (obs, _), (raw_obs, _) = env.reset(key, params), raw.reset(key, params)
    # position in [-1.2, 0.6], velocity in [-0.07, 0.07]
    expected = (np.asarray(raw_obs) - [-0.3, 0.0]) / [0.9, 0.07]
    np.testing.assert_allclose(obs, expected, rtol=1e-5, atol=1e-6)
    low, high = jnp.array([-1.2, -0.07]), jnp.array([0.6, 0.07])
    np.testing.assert_allclose(env.to_observation(low), [-1.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(env.to_observation(high), [1.0, 1.0], atol=1e-6)
    # steps see the same map
    step_obs = env.step(key, raw.reset(key, params)[1], jnp.zeros(1), params)[0]
    raw_step = raw.step(key, raw.reset(key, params)[1], jnp.zeros(1), params)[0]
    np.testing.assert_allclose(step_obs, env.to_observation(raw_step), rtol=1e-6)
    # CartPole: x (+-4.8) and the angle (+-0.419) scale; the velocities, bounded
    # only by float32's largest value, pass through
    cart = GymnaxEnv("CartPole-v1", normalize_obs=True)
    got = cart.to_observation(jnp.array([4.8, 3.0, -0.41887903, -2.0]))
    np.testing.assert_allclose(got, [1.0, 3.0, -1.0, -2.0], rtol=1e-5)
    assert GymnaxEnv("CartPole-v1").to_observation(jnp.array([4.8, 0, 0, 0]))[0] == 4.8


def test_normalize_obs_must_be_a_bool():
    with pytest.raises(TypeError, match="normalize_obs"):
        GymnaxEnv("CartPole-v1", normalize_obs="yes")


def test_params_are_arrays_and_the_state_type_is_stable(key):
    env = GymnaxEnv("CartPole-v1")
    params = env.default_params()
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(params))
    _, state = env.reset(key, params)
    _, after, reward, done, info = env.step(key, state, jnp.zeros(2), params)
    signature = lambda t: [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(t)]
    assert signature(state) == signature(after)
    assert reward.dtype == jnp.float32 and done.dtype == jnp.bool_
    assert {"terminated", "truncated"} <= set(info)


def test_unknown_names_are_rejected_with_the_registry():
    with pytest.raises(ValueError, match="CartPole-v1"):
        GymnaxEnv("CartPole-v99")


def test_without_gymnax_eqxevo_imports_and_the_adapter_says_how_to_install():
    code = textwrap.dedent(
        """
        import sys
        sys.modules["gymnax"] = None  # as if gymnax were not installed
        import eqxevo, eqxevo.envs
        try:
            eqxevo.envs.GymnaxEnv
        except ImportError as err:
            print(err)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert 'pip install "eqxevo[rl]"' in out.stdout


@pytest.mark.slow
def test_cartpole_is_solved_by_snes_with_an_mlp(key):
    """Mean return >= 475 over 16 evaluation episodes (CartPole-v1's threshold)."""
    env = GymnaxEnv("CartPole-v1")
    params = env.default_params()

    def episode_return(policy, key):
        return rollout(key, policy, env, params, 500, reset_on_done=False)[0]

    def fitness(policy, key):
        return jnp.mean(jax.vmap(lambda k: episode_return(policy, k))(jr.split(key, 2)))

    policy = MLPPolicy(4, 2, 16, 1, key=jr.key(0))
    strategy = eqxevo.Strategy("snes", policy, 32, maximize=True)
    result = eqxevo.evolve(
        jr.key(1), strategy, fitness, num_generations=20, chunk_size=20
    )
    solution = strategy.mean(result.state)
    returns = eqx.filter_jit(jax.vmap(lambda k: episode_return(solution, k)))(
        jr.split(jr.key(2), 16)
    )
    assert float(jnp.mean(returns)) >= 475.0, returns
