"""Reference agents of gymnax's MetaMaze-misc: a wall follower (no memory), an
explore-then-exploit learner told where it is, and the shortest-path oracle.

Miconi, T., Rawal, A., Clune, J., Stanley, K. O. (2019). Backpropamine: training
self-modifying neural networks with differentiable neuromodulated plasticity. ICLR.
"""

import collections
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._types import Array, Bool, Float, Int, PRNGKey
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy, AbstractStatelessPolicy
from .base import observation_map

MOVES = ((-1, 0), (0, 1), (1, 0), (0, -1))
"""gymnax's four actions as (row, column) steps: up, right, down, left."""

OBS_SIZE = 15
"""MetaMaze-misc's observation: the 3x3 field (1 = wall), the last action one-hot
(4), the last reward and the time."""

_FIELD_SIDE = (1, 5, 7, 3)  # the field's cell (row-major 3x3) each action enters


def meta_maze_layout() -> np.ndarray:
    """gymnax's MetaMaze-misc layout: a bool array `(rows, columns)`, True where
    the agent may stand (the 9x9 maze of pillars inside its outer wall)."""
    from ..envs.gymnax import GymnaxEnv  # gymnax is optional: the `rl` extra

    return np.asarray(GymnaxEnv("MetaMaze-misc").gymnax_env.env_map, bool)


def _check_layout(env_map: Any) -> np.ndarray:
    layout = meta_maze_layout() if env_map is None else np.asarray(env_map)
    if (
        layout.ndim != 2
        or layout.dtype != np.bool_
        or min(layout.shape) < 3
        or layout[[0, -1]].any()
        or layout[:, [0, -1]].any()
        or layout.sum() < 2
    ):
        raise ValueError(
            "env_map must be a 2-D bool array (True where the agent may stand) "
            "with walls all round and at least 2 open cells, as MetaMaze's "
            f"`env_map`; got {layout.dtype} of shape {layout.shape}"
        )
    return layout


def _tables(layout: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(after, steps, move)` over flat cells `row * columns + column`: the cell
    each action leads to (itself against a wall), the fewest steps from cell s to
    a reward at goal g, and the first move of such a path (breadth-first search
    from every goal)."""
    rows, cols = layout.shape
    n = rows * cols
    flat = layout.ravel()
    cells = np.arange(n)
    after = np.repeat(cells[:, None], 4, axis=1)
    for a, (dr, dc) in enumerate(MOVES):
        # The outer wall keeps every open cell's neighbour inside the array.
        target = np.clip(cells + dr * cols + dc, 0, n - 1)
        after[:, a] = np.where(flat & flat[target], target, cells)
    unreached = 2 * n  # more steps than any path: never the nearest
    steps = np.full((n, n), unreached, np.int32)
    move = np.zeros((n, n), np.int32)
    for goal in np.flatnonzero(flat):
        dist = np.full(n, -1)
        dist[goal] = 0
        queue = collections.deque([goal])
        while queue:
            cell = queue.popleft()
            for nxt in after[cell]:
                if dist[nxt] < 0:
                    dist[nxt] = dist[cell] + 1
                    queue.append(nxt)
        for cell in np.flatnonzero(flat & (dist > 0)):
            steps[cell, goal] = dist[cell]
            move[cell, goal] = np.flatnonzero(dist[after[cell]] == dist[cell] - 1)[0]
        # Standing on the goal pays only for stepping into it again: bump a
        # wall (1 step), else step out and back (2).
        bumps = np.flatnonzero(after[goal] == goal)
        steps[goal, goal] = 1 if bumps.size else 2
        move[goal, goal] = bumps[0] if bumps.size else 0
    return after.astype(np.int32), steps, move


def _pick(move: Int[Array, ""]) -> Action:
    """Scores whose argmax is `move`."""
    return jnp.where(jnp.arange(4) == move, 1.0, -1.0).astype(jnp.float32)


class MazeObservation(eqx.Module):
    """A MetaMaze-misc observation, read (`AbstractMazeAgent.read`).

    Attributes:
        walls: the 3x3 field, row-major, True where a wall is.
        last_action: the last move (0 at a reset).
        reward: the last reward.
        time: the steps taken this episode.
        told: what follows the observation: `[row, column]` of the agent, then of
            the goal, where it is the privileged one; else empty.
    """

    walls: Bool[Array, " 9"]
    last_action: Int[Array, ""]
    reward: Float[Array, ""]
    time: Float[Array, ""]
    told: Float[Array, " k"]


class AbstractMazeAgent(AbstractPolicy):
    """An agent for gymnax's MetaMaze-misc, reading its observation `[3x3 field
    (1 = wall), one-hot last action (4), last reward, time]` (undoing `GymnaxEnv`'s
    `normalize_obs` map when given its `obs_center` and `obs_scale`), perhaps
    followed by `eqxevo.envs.privileged`'s `[agent row, column, goal row,
    column]`, and scoring the four moves (up, right, down, left):
    `GymnaxEnv.to_gymnax_action` takes the argmax.
    """

    obs_center: tuple[float, ...] = eqx.field(static=True)
    obs_scale: tuple[float, ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def _told(
        self,
        env_map: Any,
        obs_center: tuple[float, ...] | None,
        obs_scale: tuple[float, ...] | None,
    ) -> np.ndarray:
        """Set up an agent that reads the privileged observation (its sizes and
        observation map); the maze's layout (`_check_layout`)."""
        self.obs_center, self.obs_scale = observation_map(
            obs_center, obs_scale, OBS_SIZE, "MetaMaze-misc"
        )
        self.obs_size, self.action_size = OBS_SIZE + 4, 4
        return _check_layout(env_map)

    def read(self, obs: Observation) -> MazeObservation:
        """The observation in the environment's own units."""
        center = jnp.asarray(self.obs_center, jnp.float32)
        scale = jnp.asarray(self.obs_scale, jnp.float32)
        raw = obs[:OBS_SIZE] / scale + center
        last_action = jnp.argmax(raw[9:13]).astype(jnp.int32)
        return MazeObservation(
            raw[:9] > 0.5, last_action, raw[13], raw[14], obs[OBS_SIZE:]
        )


class MazeWallFollowerAgent(AbstractMazeAgent, AbstractStatelessPolicy):
    """A memoryless MetaMaze-misc agent: away from the outer wall it heads left
    (west) through the pillars whenever it can; elsewhere it keeps its heading
    (the last action) and, blocked, turns clockwise, or counterclockwise where
    that is the only way on; heading west into the outer wall it turns south.
    So it sweeps each row westward, then follows the outer wall.

    It reads only the current field and last action: a policy without memory,
    which cannot tell apart the interior cells that look alike.

    Arguments:
        obs_center, obs_scale: `GymnaxEnv`'s observation map with
            `normalize_obs=True` (`env.obs_center`, `env.obs_scale`); None: raw
            observations.
    """

    def __init__(
        self,
        obs_center: tuple[float, ...] | None = None,
        obs_scale: tuple[float, ...] | None = None,
    ):
        self.obs_center, self.obs_scale = observation_map(
            obs_center, obs_scale, OBS_SIZE, "MetaMaze-misc"
        )
        self.obs_size, self.action_size = OBS_SIZE, 4

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        seen = self.read(obs)
        field = seen.walls.reshape(3, 3)
        outer = field[0].all() | field[2].all() | field[:, 0].all() | field[:, 2].all()
        free = ~seen.walls[jnp.asarray(_FIELD_SIDE)]
        heading = seen.last_action
        # straight, clockwise, counterclockwise, back; south first heading west
        turns = jnp.where(
            heading == 3, jnp.array([0, 3, 1, 2]), jnp.array([0, 1, 3, 2])
        )
        options = (heading + turns) % 4
        onward = options[jnp.argmax(free[options])]
        move = jnp.where(~outer & free[3], 3, onward)
        return _pick(move), state


class MazeOracleAgent(AbstractMazeAgent, AbstractStatelessPolicy):
    """The oracle of MetaMaze-misc: it reads the privileged observation
    (`eqxevo.envs.privileged(env)`: the observation, then the agent's and the
    goal's (row, column)) and takes a shortest path to the goal, from a table of
    first moves over every (cell, goal) pair computed by breadth-first search at
    construction. On the goal itself it bumps a wall (or steps out and back).

    Arguments:
        env_map: the maze (True where the agent may stand); None: gymnax's
            MetaMaze-misc (`meta_maze_layout()`).
        obs_center, obs_scale: as for `MazeWallFollowerAgent`.

    Attributes:
        move: `move[s, g]`, the first move from flat cell s (`row * columns +
            column`) toward goal g.
    """

    columns: int = eqx.field(static=True)
    move: Int[Array, "cells cells"]

    def __init__(
        self,
        env_map: Any = None,
        obs_center: tuple[float, ...] | None = None,
        obs_scale: tuple[float, ...] | None = None,
    ):
        layout = self._told(env_map, obs_center, obs_scale)
        self.columns = layout.shape[1]
        self.move = jnp.asarray(_tables(layout)[2])

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        told = jnp.round(self.read(obs).told).astype(jnp.int32)
        here = told[0] * self.columns + told[1]
        goal = told[2] * self.columns + told[3]
        return _pick(self.move[here, goal]), state


class MazeMemory(eqx.Module):
    """`MazeExploreExploitAgent`'s lifetime state.

    Attributes:
        visited: per flat cell, stepped into this episode without a reward (so
            not the goal).
        goal: the goal's flat cell once a reward has shown it, else -1.
        cell: the agent's cell at the last observation.
        time: the last observation's time (a lower one starts a new episode).
    """

    visited: Bool[Array, " cells"]
    goal: Int[Array, ""]
    cell: Int[Array, ""]
    time: Float[Array, ""]


class MazeExploreExploitAgent(AbstractMazeAgent):
    """The explore-then-exploit learner of MetaMaze-misc. It reads the privileged
    observation but uses only the agent's position in it, never the goal's: it is
    told where it is, not where the goal is, so it still has to find the goal.

    Until rewarded it heads, by a shortest path, for the nearest cell it has not
    stepped into this episode (the lowest flat index on a tie); the reward shows
    the goal (the cell its last move stepped into), and from every respawn it
    then takes a shortest path back. It forgets when the observation's time goes
    back (a new episode, a new goal).

    Arguments:
        env_map, obs_center, obs_scale: as for `MazeOracleAgent`.
    """

    columns: int = eqx.field(static=True)
    walkable: Bool[Array, " cells"]
    after: Int[Array, "cells 4"]
    steps: Int[Array, "cells cells"]
    move: Int[Array, "cells cells"]

    def __init__(
        self,
        env_map: Any = None,
        obs_center: tuple[float, ...] | None = None,
        obs_scale: tuple[float, ...] | None = None,
    ):
        layout = self._told(env_map, obs_center, obs_scale)
        self.columns = layout.shape[1]
        after, steps, move = _tables(layout)
        self.walkable = jnp.asarray(layout.ravel())
        self.after, self.steps, self.move = map(jnp.asarray, (after, steps, move))

    def initial_state(self, key: PRNGKey) -> MazeMemory:
        del key
        # An infinite last time: the first observation starts an episode.
        return MazeMemory(
            jnp.zeros(self.walkable.shape, jnp.bool_),
            jnp.full((), -1, jnp.int32),
            jnp.zeros((), jnp.int32),
            jnp.full((), jnp.inf, jnp.float32),
        )

    def __call__(
        self, obs: Observation, state: MazeMemory
    ) -> tuple[Action, MazeMemory]:
        seen = self.read(obs)
        where = jnp.round(seen.told[:2]).astype(jnp.int32)
        here = where[0] * self.columns + where[1]
        fresh = seen.time <= state.time
        rewarded = ~fresh & (seen.reward > 0.0)
        # A reward respawns the agent: the goal is where its last move went.
        reached = self.after[state.cell, seen.last_action]
        goal = jnp.where(fresh, -1, jnp.where(rewarded, reached, state.goal))
        visited = jnp.where(fresh, False, state.visited)
        # Where a move led without a reward is not the goal (a reset's or a
        # respawn's cell was not stepped into).
        visited = visited.at[here].set(visited[here] | ~(fresh | rewarded))
        unknown = self.walkable & ~visited
        nearest = jnp.argmin(
            jnp.where(unknown, self.steps[here], jnp.iinfo(jnp.int32).max)
        )
        target = jnp.where(goal >= 0, goal, nearest)
        memory = MazeMemory(visited, goal, here, seen.time)
        return _pick(self.move[here, target]), memory


__all__ = [
    "MOVES",
    "OBS_SIZE",
    "AbstractMazeAgent",
    "MazeExploreExploitAgent",
    "MazeMemory",
    "MazeObservation",
    "MazeOracleAgent",
    "MazeWallFollowerAgent",
    "meta_maze_layout",
]
