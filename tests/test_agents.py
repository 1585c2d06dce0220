import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import rollout
from eqxevo.agents import (
    BraitenbergAgent,
    ForagerAgent,
    RandomAgent,
    TasteLearnerAgent,
)
from eqxevo.envs import Chemotaxis, Foraging, LongHorizon, LongHorizonParams


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


def test_taste_learner_credits_the_taste_to_the_nearer_resource():
    agent = TasteLearnerAgent(learning_rate=0.5)
    near_a = jnp.array([-0.5, -0.5, -3.0, -3.0, 0.0, 0.0])
    for taste, sign in ((1.0, 1.0), (-1.0, -1.0)):
        _, belief = agent(near_a.at[5].set(taste), jnp.zeros((), jnp.float32))
        assert float(belief) * sign > 0.1
    # No learning: the belief (a fixed reflex) never moves.
    fixed = TasteLearnerAgent(learning_rate=0.0, initial_belief=1.0)
    _, belief = fixed(near_a.at[5].set(-1.0), fixed.initial_state(jr.key(0)))
    assert float(belief) == 1.0


@eqx.filter_jit
def mean_fitness(agent, env, key, num_steps, num_seeds=16, params=None):
    params = env.default_params() if params is None else params
    keys = jr.split(key, num_seeds)
    return jnp.mean(
        jax.vmap(lambda k: rollout(k, agent, env, params, num_steps)[0])(keys)
    )


def test_steering_by_the_gradient_pays_on_chemotaxis(key):
    # The same vehicle with its steering cut (gain 0) runs blind: one program
    # (one agent type) scores both.
    env = Chemotaxis()
    steering = mean_fitness(BraitenbergAgent(), env, key, 300)
    blind = mean_fitness(BraitenbergAgent(gain=0.0), env, key, 300)
    assert float(steering) > 2 * float(blind)


def test_homeostatic_steering_pays_on_foraging(key):
    env = Foraging()
    forager = mean_fitness(ForagerAgent(2), env, key, 1500)
    blind = mean_fitness(ForagerAgent(2, gain=0.0), env, key, 1500)
    assert float(forager) > float(blind) + 0.1 * 1500


def test_lifetime_learning_pays_on_long_horizon(key):
    """L4: learning which resource nourishes beats the same agent without learning."""
    env = LongHorizon()
    params = LongHorizonParams(season_length=600)
    learner = mean_fitness(TasteLearnerAgent(), env, key, 3000, 8, params)
    fixed = mean_fitness(TasteLearnerAgent(0.0, 1.0), env, key, 3000, 8, params)
    assert float(learner) > float(fixed) + 0.1 * 3000
