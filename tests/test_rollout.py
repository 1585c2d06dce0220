import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import tree_equal
from hypothesis import given
from reference_envs import CounterEnv, CounterParams

import eqxevo
from eqxevo import record, rollout, testing
from eqxevo.agents import RandomAgent
from eqxevo.envs import Chemotaxis
from eqxevo.nets import AbstractPolicy, MLPPolicy


class Accumulator(AbstractPolicy):
    """Acts with (sum of rewards reinforced so far); the state counts and sums."""

    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=1)

    def initial_state(self, key):
        del key
        return jnp.zeros((2,), jnp.float32)  # (number of reinforce calls, sum)

    def __call__(self, obs, state):
        del obs
        return 0.01 * state[1:2], state

    def reinforce(self, reward, state):
        return state + jnp.stack([jnp.ones((), jnp.float32), reward])


class Linear(AbstractPolicy):
    """A one-weight stateless genome for CounterEnv."""

    weight: jax.Array
    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=1)

    def __init__(self, key):
        self.weight = jr.normal(key, (1, 2), jnp.float32)

    def initial_state(self, key):
        del key

    def __call__(self, obs, state):
        return jnp.tanh(self.weight @ obs), state


ENV = CounterEnv()
PARAMS = ENV.default_params()


def test_auto_reset_counts_episodes_and_keeps_the_lifetime_state(key):
    trajectory = record(key, Accumulator(), ENV, PARAMS, 7)
    # Episodes of 3 steps: done at steps 2 and 5, the env resets after each.
    np.testing.assert_array_equal(trajectory.dones, [0, 0, 1, 0, 0, 1, 0])
    times = np.asarray(trajectory.observations[:, 0])
    np.testing.assert_array_equal(times, [0, 1, 2, 0, 1, 2, 0])
    # The policy's state is never reset: its action is 0.01 * every reward so far.
    rewards = np.asarray(trajectory.rewards)
    expected_actions = 0.01 * np.concatenate([[0.0], np.cumsum(rewards)[:-1]])
    np.testing.assert_allclose(trajectory.actions[:, 0], expected_actions, rtol=1e-6)
    np.testing.assert_allclose(rewards, 1.0 + expected_actions, rtol=1e-6)
    summary = trajectory.summary
    assert int(summary["num_episodes"]) == 2 and int(summary["steps_alive"]) == 3
    assert int(summary["steps"]) == 7
    np.testing.assert_allclose(summary["mean_time"], np.mean([1, 2, 3, 1, 2, 3, 1]))
    assert float(summary["final_time"]) == 1.0  # the last step's info


def test_reset_policy_on_done_restarts_the_lifetime_state(key):
    trajectory = record(key, Accumulator(), ENV, PARAMS, 7, reset_policy_on_done=True)
    # After each episode the accumulated reward starts again from zero.
    assert float(trajectory.actions[3, 0]) == 0.0
    assert float(trajectory.actions[6, 0]) == 0.0
    assert float(trajectory.actions[2, 0]) > 0.0


def test_without_reset_the_lifetime_is_one_episode(key):
    fitness, summary = rollout(key, Accumulator(), ENV, PARAMS, 10, reset_on_done=False)
    trajectory = record(key, Accumulator(), ENV, PARAMS, 10, reset_on_done=False)
    assert int(summary["steps"]) == 3 and int(summary["num_episodes"]) == 1
    assert int(summary["steps_alive"]) == 3
    # the info of the last step the environment ran, not of a frozen one
    np.testing.assert_allclose(summary["mean_time"], 2.0)
    assert float(summary["final_time"]) == 3.0
    np.testing.assert_allclose(fitness, np.sum(trajectory.rewards[:3]), rtol=1e-6)
    assert np.all(np.asarray(trajectory.rewards[3:]) == 0.0)
    # The environment is frozen after its episode ended.
    frozen = np.asarray(trajectory.env_states.time)
    np.testing.assert_array_equal(frozen, [0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3])


def test_record_follows_the_documented_key_schedule(key):
    """A Python loop over the module docstring's schedule reproduces `record`."""
    policy, num_steps = Accumulator(), 6
    init_key, run_key = jr.split(key)
    reset_key, policy_key = jr.split(init_key)
    env_keys, reset_keys, _ = jr.split(run_key, 3)
    obs, state = ENV.reset(reset_key, PARAMS)
    policy_state = policy.initial_state(policy_key)
    rewards, noises = [], []
    for t in range(num_steps):
        action, policy_state = policy(obs, policy_state)
        obs, state, reward, done, _ = ENV.step(
            jr.fold_in(env_keys, t), state, action, PARAMS
        )
        policy_state = policy.reinforce(reward, policy_state)
        rewards.append(float(reward))
        noises.append(float(state.noise))
        if bool(done):
            obs, state = ENV.reset(jr.fold_in(reset_keys, t), PARAMS)
    trajectory = record(key, policy, ENV, PARAMS, num_steps)
    np.testing.assert_allclose(trajectory.rewards, rewards, rtol=1e-6)
    np.testing.assert_array_equal(trajectory.env_states.noise[1:], noises)


def test_rollout_equals_record_on_an_arena_env(key):
    env = Chemotaxis()
    policy = MLPPolicy(2, 2, 4, 1, key=key)
    params = env.default_params()
    fitness, summary = rollout(key, policy, env, params, 30)
    trajectory = record(key, policy, env, params, 30)
    assert tree_equal(summary, trajectory.summary)
    np.testing.assert_allclose(fitness, np.sum(trajectory.rewards), rtol=1e-5)
    # where the body ended and, on average, where it was (L0's info: x, y)
    positions = np.asarray(trajectory.env_states.position[1:])
    np.testing.assert_array_equal(
        [summary["final_x"], summary["final_y"]], positions[-1]
    )
    np.testing.assert_allclose(
        summary["mean_x"], positions[:, 0].mean(), rtol=1e-5, atol=1e-6
    )


@given(key=testing.keys())
def test_same_key_gives_bit_identical_fitness_and_summary(key):
    env = Chemotaxis()
    agent = RandomAgent(2)
    a = rollout(key, agent, env, env.default_params(), 20)
    b = rollout(key, agent, env, env.default_params(), 20)
    assert tree_equal(a, b)
    c = rollout(jr.fold_in(key, 1), agent, env, env.default_params(), 20)
    assert not tree_equal(a[0], c[0])


def test_rollout_memory_is_flat_in_the_lifetime_length(key):
    env, policy, params = ENV, Linear(key), PARAMS

    dynamic, static = eqx.partition(policy, eqx.is_array)

    def compiled(num_steps):
        def run(dynamic, key):
            return rollout(key, eqx.combine(dynamic, static), env, params, num_steps)

        return jax.jit(run).lower(dynamic, key).compile()

    short, long = compiled(10), compiled(10_000)
    short_mem, long_mem = short.memory_analysis(), long.memory_analysis()
    if short_mem is None or long_mem is None:  # pragma: no cover - backend without it
        pytest.skip("this backend reports no memory analysis")
    assert long_mem.temp_size_in_bytes == short_mem.temp_size_in_bytes
    assert long_mem.output_size_in_bytes == short_mem.output_size_in_bytes
    # Nothing the rollout returns grows with T either.
    out = jax.eval_shape(lambda: rollout(key, policy, env, params, 10_000))
    assert all(x.shape == () for x in jax.tree.leaves(out))


def test_rollout_compiles_once_across_keys_genomes_and_variants(key):
    env = Chemotaxis()

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def run(policy, params, key):
        return rollout(key, policy, env, params, 15)

    for i, scale in enumerate((0.5, 0.3, 0.8)):
        policy = MLPPolicy(2, 2, 4, 1, key=jr.fold_in(key, i))
        params = eqx.tree_at(
            lambda p: p.length_scale, env.default_params(), jnp.asarray(scale)
        )
        run(policy, params, jr.fold_in(key, 10 + i))


def test_rollout_is_an_eqxevo_fitness_function_with_aux(key):
    strategy = eqxevo.Strategy("snes", Linear(key), 4, maximize=True)
    result = eqxevo.evolve(
        key,
        strategy,
        lambda genome, k: rollout(k, genome, ENV, PARAMS, 10),
        num_generations=2,
    )
    aux = result.history["aux"]
    assert set(aux) >= {"total_reward", "num_episodes", "steps_alive", "mean_time"}
    np.testing.assert_allclose(aux["total_reward"], result.history["best"], rtol=1e-6)


@pytest.mark.parametrize("num_steps", [0, -1, 2.5, True])
def test_num_steps_must_be_a_positive_int(key, num_steps):
    # beartype rejects a float before the function runs; the function names it.
    with pytest.raises((ValueError, TypeError), match="num_steps"):
        rollout(key, Accumulator(), ENV, PARAMS, num_steps)


def test_info_entries_must_be_scalars(key):
    class VectorInfo(CounterEnv):
        def step(self, key, state, action, params):
            out = super().step(key, state, action, params)
            return (*out[:4], {"bad": jnp.zeros(3)})

    with pytest.raises(ValueError, match="bad"):
        rollout(key, Accumulator(), VectorInfo(), PARAMS, 3)


@given(num_steps=st.integers(1, 9), episode=st.integers(1, 4))
def test_episode_counts_match_the_episode_length(num_steps, episode):
    params = CounterParams(jnp.asarray(episode, jnp.int32))
    _, summary = rollout(jr.key(0), Accumulator(), ENV, params, num_steps)
    assert int(summary["num_episodes"]) == num_steps // episode
    assert int(summary["steps_alive"]) == min(episode, num_steps)
