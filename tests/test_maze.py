import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from eqxevo import LifetimeFitness
from eqxevo._src.agents.maze import MazeMemory
from eqxevo._src.references import references, score_references
from eqxevo.agents import (
    MazeExploreExploitAgent,
    MazeOracleAgent,
    MazeWallFollowerAgent,
)
from eqxevo.envs import privileged

gymnax_env = pytest.importorskip("eqxevo._src.envs.gymnax")
ENV = gymnax_env.GymnaxEnv("MetaMaze-misc")
PARAMS = ENV.default_params()
OPEN = np.asarray(ENV.gymnax_env.env_map, bool)
CELLS = np.argwhere(OPEN)  # (row, column) of every open cell, gymnax's order


def steps_to_reward() -> np.ndarray:
    """`[goal row, goal column, row, column]`: the fewest steps from a cell until
    the goal pays, by relaxing every open cell against its four neighbours until
    nothing changes (a Bellman-Ford over the map, not the agents' queue)."""
    rows, cols = OPEN.shape
    dist = np.full((rows, cols, rows, cols), np.inf)
    dist[CELLS[:, 0], CELLS[:, 1], CELLS[:, 0], CELLS[:, 1]] = 0.0
    while True:
        padded = np.pad(dist, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.inf)
        around = np.minimum.reduce(
            [
                padded[..., :-2, 1:-1],
                padded[..., 2:, 1:-1],
                padded[..., 1:-1, :-2],
                padded[..., 1:-1, 2:],
            ]
        )
        new = np.where(OPEN, np.minimum(dist, around + 1.0), np.inf)
        if np.array_equal(new, dist):
            break
        dist = new
    # On the goal itself only stepping into it pays: into a wall (1 step, the
    # agent stays), else out and back (2).
    for r, c in CELLS:
        walled = not OPEN[r - 1 : r + 2, c - 1 : c + 2][
            [0, 1, 1, 2], [1, 0, 2, 1]
        ].all()
        dist[r, c, r, c] = 1.0 if walled else 2.0
    return dist


STEPS = steps_to_reward()

# The privileged observation is built here as `privileged(ENV)` builds it,
# `[obs, ENV.privileged(state, params)]`: `Privileged._observe` fails jaxtyping's
# check under pytest (its return's size differs from its argument's, both
# annotated " obs").


def observe(env, state):
    """`env`'s privileged observation of a gymnax state."""
    with jax.numpy_dtype_promotion("standard"):
        obs = env.to_observation(env.gymnax_env.get_obs(state, PARAMS))
    return jnp.concatenate([obs, env.privileged(state, PARAMS)])


def play(agent, state, key, num_steps, env=ENV):
    """`agent` told where it is (and the goal) from `state` on: the privileged
    observations it saw, its actions, rewards and dones (no reset after a done)."""

    def step(carry, t):
        obs, state, memory = carry
        action, memory = agent(obs, memory)
        _, state, reward, done, _ = env.step(jr.fold_in(key, t), state, action, PARAMS)
        return (observe(env, state), state, memory), (obs, action, reward, done)

    init = (observe(env, state), state, agent.initial_state(key))
    return jax.lax.scan(step, init, jnp.arange(num_steps))[1]


def test_oracle_reaches_every_goal_from_every_cell_in_the_fewest_steps():
    oracle = MazeOracleAgent()
    starts, goals = np.meshgrid(np.arange(len(CELLS)), np.arange(len(CELLS)))
    starts, goals = CELLS[starts.ravel()], CELLS[goals.ravel()]
    horizon = int(STEPS[np.isfinite(STEPS)].max()) + 2
    _, reset = ENV.reset(jr.key(0), PARAMS)

    @jax.jit
    @jax.vmap
    def rewards(start, goal, key):
        state = reset.replace(pos=start, goal=goal)
        return play(oracle, state, key, horizon)[2]

    keys = jr.split(jr.key(1), len(starts))
    paid = np.asarray(rewards(jnp.asarray(starts), jnp.asarray(goals), keys)) > 0.0
    want = STEPS[goals[:, 0], goals[:, 1], starts[:, 0], starts[:, 1]]
    # the first reward comes with step `want`, none before
    np.testing.assert_array_equal(np.argmax(paid, axis=1) + 1, want)
    assert paid.any(axis=1).all()


def lifetimes(agent, num, seed, env=ENV):
    """`num` 200-step episodes of `agent` (reset as a rollout resets)."""
    keys = jr.split(jr.key(seed), num)

    @jax.jit
    @jax.vmap
    def one(key):
        reset_key, run_key = jr.split(key)
        return play(agent, env.reset(reset_key, PARAMS)[1], run_key, 200, env)

    return one(keys)


@pytest.mark.parametrize("agent", [MazeOracleAgent(), MazeExploreExploitAgent()])
def test_every_trip_after_the_goal_is_known_is_a_shortest_path(agent):
    runs = map(np.asarray, lifetimes(agent, 8, 2))
    explorer = isinstance(agent, MazeExploreExploitAgent)
    trips = 0
    for o, _, reward, done in zip(*runs, strict=True):
        # the first episode only: it ends early where a respawn lands on the
        # goal, and a new goal is drawn
        end = int(np.argmax(done)) + 1 if done.any() else len(done)
        (pays,) = np.nonzero(reward[:end] > 0.0)
        assert pays.size, "never found the goal"
        goal = o[0, 17:19].astype(int)
        # the learner explores first (from the centre); then every trip is a
        # shortest one
        starts = np.concatenate([[0], pays[:-1] + 1])
        for begin, pay in zip(starts[explorer:], pays[explorer:], strict=True):
            r, c = o[begin, 15:17].astype(int)
            assert pay + 1 - begin == STEPS[goal[0], goal[1], r, c]
            trips += 1
        # the last trip, cut short by the episode's end, was no longer than that
        if pays[-1] + 1 < end:
            r, c = o[pays[-1] + 1, 15:17].astype(int)
            assert end - pays[-1] - 1 < STEPS[goal[0], goal[1], r, c]
    assert trips > 8 * 15


def test_the_learner_never_reads_the_goal_and_forgets_it_in_a_new_episode():
    agent = MazeExploreExploitAgent()
    obs, actions, _, _ = lifetimes(agent, 1, 3)
    obs, actions = obs[0], actions[0]

    def replay(observations):
        def step(state, obs):
            action, state = agent(obs, state)
            return state, action

        return jax.lax.scan(step, agent.initial_state(jr.key(0)), observations)

    memory, again = replay(obs)
    hidden, blind = replay(obs.at[:, 17:].set(0.0))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(actions))
    np.testing.assert_array_equal(np.asarray(blind), np.asarray(actions))
    assert int(memory.goal) >= 0 and int(hidden.goal) == int(memory.goal)
    # the time goes back: a new episode, a new goal
    _, fresh = agent(obs[0], memory)
    assert isinstance(fresh, MazeMemory)
    assert int(fresh.goal) == -1 and not bool(fresh.visited.any())


@pytest.mark.parametrize(
    ("cell", "heading", "move"),
    [
        ((5, 5), 0, 3),  # inside: west whenever it can
        ((4, 5), 0, 0),  # between pillars: on
        ((5, 1), 3, 2),  # west into the outer wall: south
        ((9, 1), 2, 1),  # corners: round
        ((1, 9), 0, 3),
        ((9, 5), 1, 1),  # along the outer wall: on
        ((1, 5), 0, 1),  # north into it: clockwise
    ],
)
def test_the_wall_follower_reads_only_the_field_and_its_heading(cell, heading, move):
    agent = MazeWallFollowerAgent()
    _, state = ENV.reset(jr.key(0), PARAMS)
    state = state.replace(pos=jnp.asarray(cell, jnp.int32), last_action=heading)
    obs = observe(ENV, state)[:15]
    action, none = agent(obs, None)
    assert none is None and int(jnp.argmax(action)) == move
    # its time and last reward change nothing
    later, _ = agent(obs.at[13:].set(jnp.array([10.0, 77.0])), None)
    np.testing.assert_array_equal(np.asarray(later), np.asarray(action))


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_maze_references_are_sized_for_the_env(normalize_obs):
    env = gymnax_env.GymnaxEnv("MetaMaze-misc", normalize_obs=normalize_obs)
    refs = references(env, PARAMS)
    assert [(r.kind, r.privileged) for r in refs] == [
        ("random", False),
        ("no_memory", False),
        ("learner", True),
        ("oracle", True),
    ]
    told = privileged(env)
    for ref in refs:
        plays = told if ref.privileged else env
        assert ref.policy.obs_size == plays.obs_size == 15 + 4 * ref.privileged
        assert ref.policy.action_size == plays.action_size == 4

        def first(key, policy=ref.policy, told=ref.privileged):
            obs, state = env.reset(key, PARAMS)
            obs = observe(env, state) if told else obs
            return policy(obs, policy.initial_state(key))[0]

        assert jax.eval_shape(first, jr.key(0)).shape == (4,)


def test_the_references_act_alike_on_normalised_observations():
    raw = references(ENV, PARAMS)
    scaled = gymnax_env.GymnaxEnv("MetaMaze-misc", normalize_obs=True)
    normalised = references(scaled, PARAMS)
    for plain, other in zip(raw, normalised, strict=True):
        if not plain.privileged:
            continue
        _, want, want_rewards, _ = lifetimes(plain.policy, 4, 5)
        _, got, got_rewards, _ = lifetimes(other.policy, 4, 5, scaled)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), plain.name)
        np.testing.assert_array_equal(np.asarray(got_rewards), np.asarray(want_rewards))
    floors = [r for r in (*raw, *normalised) if r.kind == "no_memory"]
    fitness = [LifetimeFitness(env, PARAMS, 200) for env in (ENV, scaled)]
    (plain,), (other,) = (
        score_references(jr.key(5), f, [ref], 8)
        for f, ref in zip(fitness, floors, strict=True)
    )
    np.testing.assert_array_equal(plain.result.values, other.result.values)
    assert 0.0 < float(np.mean(plain.result.values)) < 200.0


def test_privileged_is_declared_per_gymnax_env():
    _, state = ENV.reset(jr.key(6), PARAMS)
    np.testing.assert_array_equal(
        np.asarray(ENV.privileged(state, PARAMS)),
        np.concatenate([np.asarray(state.pos), np.asarray(state.goal)]).astype(
            np.float32
        ),
    )
    cartpole = gymnax_env.GymnaxEnv("CartPole-v1")
    _, state = cartpole.reset(jr.key(6), cartpole.default_params())
    with pytest.raises(NotImplementedError, match=r"GymnaxEnv\('CartPole-v1'\)"):
        cartpole.privileged(state, cartpole.default_params())
    with pytest.raises(ValueError, match=r"CartPole-v1.*declares no privileged"):
        privileged(cartpole)


def test_bad_layouts_and_maps_raise():
    with pytest.raises(ValueError, match="env_map"):
        MazeOracleAgent(np.ones((5, 5), bool))
    with pytest.raises(ValueError, match="obs_center and obs_scale"):
        MazeWallFollowerAgent(obs_center=(0.0,) * 4)
