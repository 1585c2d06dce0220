import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import rollout
from eqxevo.baselines import BraitenbergAgent, ForagerAgent, RandomAgent
from eqxevo.envs import Chemotaxis, Foraging


def test_random_agent_draws_uniform_commands_from_its_state(key):
    agent = RandomAgent(obs_size=2, action_size=3)
    state = agent.initial_state(key)
    actions = []
    for _ in range(200):
        action, state = agent(jnp.zeros(2), state)
        actions.append(action)
    actions = np.asarray(actions)
    assert actions.shape == (200, 3)
    assert np.all(np.abs(actions) <= 1.0) and abs(actions.mean()) < 0.1
    assert len(np.unique(actions[:, 0])) == 200


def test_braitenberg_turns_toward_the_stronger_sensor():
    agent = BraitenbergAgent(gain=2.0, base_speed=0.5)
    # obs = (left, right) log readings; stronger on the right -> the left wheel
    # runs faster, which turns the body clockwise (to the right).
    (left, right), _ = agent(jnp.array([-2.0, -1.9]), None)
    assert float(left) > float(right)
    (left, right), _ = agent(jnp.array([-1.0, -1.0]), None)
    assert float(left) == float(right) == 0.5


def test_forager_heads_for_the_reserve_it_lacks():
    agent = ForagerAgent(num_resources=2, gain=2.0, base_speed=0.5)
    # Resource 0 is stronger on the right, resource 1 on the left.
    fields = jnp.array([-2.0, -1.5, -1.5, -2.0])
    hungry_for_0 = jnp.concatenate([fields, jnp.array([-0.3, 0.0])])
    hungry_for_1 = jnp.concatenate([fields, jnp.array([0.0, -0.3])])
    (l0, r0), _ = agent(hungry_for_0, None)
    (l1, r1), _ = agent(hungry_for_1, None)
    assert float(l0) > float(r0) and float(l1) < float(r1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomAgent(0),
        lambda: BraitenbergAgent(obs_size=1),
        lambda: ForagerAgent(num_resources=0),
    ],
)
def test_bad_sizes_raise(make):
    with pytest.raises(ValueError):
        make()


@eqx.filter_jit
def mean_fitness(agent, env, key, num_steps, num_seeds=16):
    params = env.default_params()
    keys = jr.split(key, num_seeds)
    return jnp.mean(
        jax.vmap(lambda k: rollout(agent, env, params, k, num_steps)[0])(keys)
    )


def test_braitenberg_beats_random_on_chemotaxis(key):
    env = Chemotaxis()
    braitenberg = mean_fitness(BraitenbergAgent(), env, key, 300)
    random = mean_fitness(RandomAgent(2), env, key, 300)
    assert float(braitenberg) > 2 * float(random)


def test_forager_beats_random_on_foraging(key):
    env = Foraging()
    forager = mean_fitness(ForagerAgent(2), env, key, 1500)
    random = mean_fitness(RandomAgent(6), env, key, 1500)
    assert float(forager) > float(random) + 0.1 * 1500
