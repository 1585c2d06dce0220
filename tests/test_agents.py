import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import rollout
from eqxevo.agents import BraitenbergAgent, ForagerAgent, RandomAgent, TasteLearnerAgent
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
    near_a = jnp.array([-0.5, -0.5, -3.0, -3.0, 0.0])
    for taste, sign in ((1.0, 1.0), (-1.0, -1.0)):
        _, state = agent(near_a.at[4].set(taste), agent.initial_state(jr.key(0)))
        assert float(state.belief) * sign > 0.1
    # No learning: the belief (a fixed reflex) never moves.
    fixed = TasteLearnerAgent(learning_rate=0.0, initial_belief=1.0)
    _, state = fixed(near_a.at[4].set(-1.0), fixed.initial_state(jr.key(0)))
    assert float(state.belief) == 1.0


def test_a_digesting_taste_learner_credits_where_it_was_when_it_ate():
    # Food tastes 5 steps after it is eaten: the taste now is that of where the
    # agent was 5 steps ago (near A), not where it is (near B).
    agent = TasteLearnerAgent(learning_rate=0.5, digestion=5)
    near_a = jnp.array([-0.5, -0.5, -3.0, -3.0, 0.0])
    near_b = jnp.array([-3.0, -3.0, -0.5, -0.5, 0.0])
    state = agent.initial_state(jr.key(0))
    for w in range(5):  # eats A, walks slowly (no jump) to B: nothing tasted
        _, state = agent(near_a + (w / 5) * (near_b - near_a), state)
        assert float(state.belief) == 0.0
    _, state = agent(near_b.at[4].set(1.0), state)  # A's taste arrives
    assert float(state.belief) > 0.1


def test_a_new_season_flips_the_belief_and_what_it_ate():
    # A relocation (a reading jumps by more than `jump`) ends a season: with
    # flip = -1 the belief and the remembered meals change sign, so a taste of
    # last season's A credits B now; flip = 1 ignores the jump.
    near_a = jnp.array([-0.5, -0.5, -3.0, -3.0, 0.0])
    jumped = near_a.at[0].set(-2.0)
    for flip, sign in ((-1.0, -1.0), (1.0, 1.0)):
        agent = TasteLearnerAgent(learning_rate=0.5, digestion=1, flip=flip)
        state = agent.initial_state(jr.key(0))
        _, state = agent(near_a, state)  # eats near A, believes nothing yet
        _, state = agent(near_a.at[4].set(1.0), state)  # A tasted good
        assert float(state.belief) > 0.1
        _, state = agent(jumped, state)  # the patches moved
        assert float(state.belief) * sign > 0.1
    # The first step sees no jump whatever it reads.
    agent = TasteLearnerAgent(initial_belief=1.0)
    _, state = agent(near_a, agent.initial_state(jr.key(0)))
    assert float(state.belief) == 1.0


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
    taste_learner = TasteLearnerAgent(digestion=env.digestion)
    learner = mean_fitness(taste_learner, env, key, 3000, 8, params)
    fixed = TasteLearnerAgent(0.0, 1.0, flip=1.0)  # toward A, whatever the season
    fixed = mean_fitness(fixed, env, key, 3000, 8, params)
    # 0.025 per step at most (eat_rate * nutrition at a patch's centre).
    assert float(learner) > float(fixed) + 0.25 * 0.025 * 3000


# -- the bandit agents against NumPy ------------------------------------------------


def numpy_bandit_choices(raw_obs, rule, reward_prob=0.1):
    """The arm each rule pulls after each raw observation `[reward, one-hot last
    arm, time]`: win-stay lose-shift, or the greedy Bayesian posterior (float64)."""
    choices, evidence, last_time = [], 0.0, np.inf
    for reward, arm0, arm1, time in np.asarray(raw_obs, np.float64):
        arm = 1 if arm1 > arm0 else 0
        if rule == "wsls":
            choices.append(arm if reward > 0.5 else 1 - arm)
            continue
        # H: arm 0 pays 1 - p. Its odds multiply by (1 - p) / p per vote.
        if time <= last_time:
            evidence = 0.0  # a reset observation: a new episode, no pull in it
        else:
            evidence += 1.0 if (arm == 0) == (reward > 0.5) else -1.0
        last_time = time
        p = reward_prob
        posterior = 1.0 / (1.0 + ((1 - p) / p) ** -evidence)
        mean_0 = posterior * (1 - p) + (1 - posterior) * p
        mean_1 = posterior * p + (1 - posterior) * (1 - p)
        choices.append(0 if mean_0 >= mean_1 else 1)
    return np.asarray(choices)


@pytest.fixture(scope="module")
def bandit():
    gymnax_env = pytest.importorskip("eqxevo._src.envs.gymnax")
    return gymnax_env.GymnaxEnv


@pytest.mark.parametrize(("rule", "normalize_obs"), [("wsls", True), ("bayes", False)])
def test_bandit_agents_pull_the_arm_the_numpy_rule_picks(bandit, rule, normalize_obs):
    from eqxevo import record
    from eqxevo.agents import GreedyBayesAgent, WinStayLoseShiftAgent

    env = bandit("BernoulliBandit-misc", normalize_obs=normalize_obs)
    params = env.default_params()
    center, scale = np.zeros(4), np.ones(4)
    affine = {}
    if normalize_obs:  # the agents undo the wrapper's map onto [-1, 1]
        center, scale = np.asarray(env.obs_center), np.asarray(env.obs_scale)
        affine = {"obs_center": env.obs_center, "obs_scale": env.obs_scale}
    agent = (
        WinStayLoseShiftAgent(**affine)
        if rule == "wsls"
        else GreedyBayesAgent(params.reward_prob, **affine)
    )
    # 250 pulls: two resets (100-pull episodes), so a new bandit mid-lifetime
    trajectory = record(jr.key(3), agent, env, params, 250)
    raw = np.asarray(trajectory.observations, np.float64) / scale + center
    want = numpy_bandit_choices(raw, rule)
    chosen = np.argmax(np.asarray(trajectory.actions), axis=1)
    np.testing.assert_array_equal(chosen, want)
    # the wrapper pulled that arm: the next observation reports it
    pulled = np.argmax(raw[1:, 1:3], axis=1)
    continuing = raw[1:, 3] > raw[:-1, 3]  # not the first observation of an episode
    np.testing.assert_array_equal(pulled[continuing], want[:-1][continuing])
    assert int(np.sum(~continuing)) == 2
    # both rules mostly pull the better arm (p = 0.1: it pays 0.9)
    assert float(np.mean(np.asarray(trajectory.rewards))) > 0.7


def test_greedy_bayes_rejects_a_reward_prob_outside_the_unit_interval():
    from eqxevo.agents import GreedyBayesAgent, WinStayLoseShiftAgent

    with pytest.raises(ValueError, match=r"reward_prob must be in \(0, 1\); got 1.0"):
        GreedyBayesAgent(1.0)
    with pytest.raises(ValueError, match="obs_center and obs_scale must be 4"):
        WinStayLoseShiftAgent(obs_center=(0.0, 0.0), obs_scale=(1.0, 1.0))
