"""One task of the gymnax suite and what both sides share: policy, weights, score.

See docs/performance.md, "How the harness measures".
"""

import dataclasses
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
import optax
from flax import linen as nn

from eqxevo._src._types import Array, Float, PRNGKey, Scalar
from eqxevo._src.nets.mlp import MLPPolicy
from eqxevo._src.registry import lookup_strategy
from eqxevo._src.rollout import rollout
from eqxevo._src.strategy.base import standard_promotion

HELDOUT_EPISODES = 32
"""Episodes of the held-out score of a kept mean."""
HELDOUT_SEED = 0x48454C44
"""Root of the held-out episodes' keys; training keys come from the seed index."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One gymnax task of the suite and its budget.

    Attributes:
        env: the gymnax id.
        width, depth: the MLP's hidden layers.
        normalize_obs: scale bounded observations onto [-1, 1].
        population_size: P.
        episodes: training episodes per fitness evaluation (E).
        generations: the budget.
        target: the held-out return counted as "learned" for the time to target.
        chunk: generations between kept means (and host syncs) on both sides.
        std_init: the initial search scale, when the task needs another than the
            preset's (`std_init` of SNES, PGPE and CMA-ES; a constant
            `std_schedule` of OpenAI-ES); both sides get it.
        steps: episode length cap (default gymnax's `max_steps_in_episode`).
    """

    env: str
    width: int
    depth: int
    normalize_obs: bool
    population_size: int
    episodes: int
    generations: int
    target: float
    chunk: int = 10
    std_init: float | None = None
    steps: int | None = None


TASKS: dict[str, Task] = {
    "CartPole-v1": Task("CartPole-v1", 16, 2, False, 64, 2, 30, 475.0, 5),
    # the network, population, episodes and generations of issue 15
    "Pendulum-v1": Task("Pendulum-v1", 32, 2, False, 128, 3, 300, -250.0),
    "Acrobot-v1": Task("Acrobot-v1", 16, 2, True, 128, 3, 100, -100.0),
    # the goal is found by exploring: with the presets' std_init = 0.1, 2 of 5
    # seeds never reach it and settle on doing nothing (return 0)
    "MountainCarContinuous-v0": Task(
        "MountainCarContinuous-v0", 16, 2, True, 128, 3, 50, 90.0, 2, std_init=0.3
    ),
}
"""The full-size tasks (the table of docs/environments.md)."""

QUICK_TASKS: dict[str, Task] = {
    "Pendulum-v1": Task("Pendulum-v1", 8, 1, False, 16, 1, 4, -250.0, 2, steps=50),
    "Acrobot-v1": Task("Acrobot-v1", 8, 1, True, 16, 1, 4, -100.0, 2, steps=50),
}
"""The CI size: both action kinds, a few generations (nothing is learned)."""


def make_env(task: Task) -> Any:
    """eqxevo's environment of the task: `GymnaxEnv`, observations scaled or not."""
    from eqxevo._src.envs.gymnax import GymnaxEnv

    return GymnaxEnv(task.env, normalize_obs=task.normalize_obs)


def episode_length(task: Task) -> int:
    """Steps per episode: `task.steps`, or gymnax's `max_steps_in_episode`."""
    if task.steps is not None:
        return task.steps
    env = make_env(task)
    return int(env.gymnax_env.default_params.max_steps_in_episode)


class EpisodesFitness(eqx.Module):
    """`fitness(genome, key)`: the mean return of `episodes` whole episodes.

    One episode per lifetime (`rollout(..., reset_on_done=False)`); episode j
    gets `split(key, episodes)[j]`.

    Not `LifetimeFitness(..., lifetimes=E)`, whose keys are the same for E >= 2:
    that runs its lifetimes one after another where this vmaps them
    (MountainCarContinuous' returns differ in their last bits, 1.4e-6), and one
    lifetime gets the key itself, not `split(key, 1)[0]`, so the suite's
    recorded numbers would change.
    """

    env: Any
    env_params: Any
    num_steps: int = eqx.field(static=True)
    episodes: int = eqx.field(static=True)

    def __call__(self, genome: Any, key: PRNGKey) -> Scalar:
        def one(k: PRNGKey) -> Array:
            return rollout(
                k,
                genome,
                self.env,
                self.env_params,
                self.num_steps,
                reset_on_done=False,
            )[0]

        return jnp.mean(jax.vmap(one)(jr.split(key, self.episodes)))


def fitness_for(task: Task, episodes: int | None = None) -> EpisodesFitness:
    """The task's training fitness (or `episodes` episodes per call)."""
    env = make_env(task)
    return EpisodesFitness(
        env,
        env.default_params(),
        episode_length(task),
        task.episodes if episodes is None else episodes,
    )


# -- the one policy, in flax (evosax's side) and Equinox (eqxevo's side) ----------


def flax_policy(task: Task) -> Any:
    """evosax's side of the policy: a flax module computing what `MLPPolicy` in
    `GymnaxEnv(task.env, normalize_obs=...)` computes."""
    env = make_env(task)
    center = np.asarray(env.obs_center, np.float32)
    scale = np.asarray(env.obs_scale, np.float32)
    low = np.asarray(env.low, np.float32)
    high = np.asarray(env.high, np.float32)
    sizes = (*([task.width] * task.depth), env.action_size)

    class Policy(nn.Module):
        @nn.compact
        def __call__(self, obs: Array, key: PRNGKey | None = None) -> Array:
            del key
            x = jnp.ravel(obs).astype(jnp.float32)
            if env.normalize_obs:
                x = (x - center) * scale
            for size in sizes:
                x = jnp.tanh(nn.Dense(size)(x))
            if env.discrete:
                return jnp.argmax(x).astype(env.action_dtype)
            unit = jnp.clip(x, -1.0, 1.0)
            action = jnp.asarray(low) + (unit + 1.0) * 0.5 * jnp.asarray(high - low)
            return action.reshape(env.action_shape).astype(env.action_dtype)

    return Policy()


def mlp_from_flax(task: Task, flax_params: Any) -> Any:
    """eqxevo's `MLPPolicy` holding the weights of evosax's flax policy."""
    env = make_env(task)
    policy = MLPPolicy(
        env.obs_size, env.action_size, task.width, task.depth, key=jr.key(0)
    )
    dense = flax_params["params"]
    layers = [dense[f"Dense_{i}"] for i in range(task.depth + 1)]
    return eqx.tree_at(
        lambda p: (p.weights, p.biases),
        policy,
        (
            tuple(jnp.asarray(layer["kernel"]) for layer in layers),
            tuple(jnp.asarray(layer["bias"]) for layer in layers),
        ),
    )


@functools.cache
@standard_promotion
def gymnax_problem(task: Task) -> Any:
    """evosax's `GymnaxProblem` of the task, with `flax_policy` (one per task)."""
    from evosax.problems import GymnaxProblem

    return GymnaxProblem(
        task.env,
        flax_policy(task),
        episode_length=episode_length(task),
        num_rollouts=task.episodes,
        use_normalize_obs=False,
    )


@standard_promotion
def initial_weights(task: Task, seed: int) -> Any:
    """Seed `seed`'s starting weights (flax parameters), shared by both sides."""
    return gymnax_problem(task).sample(jr.fold_in(jr.key(seed), 0))


def algorithm_overrides(task: Task, algorithm: str) -> tuple[dict, dict]:
    """`(params, kwargs)` the task adds to the preset (the same on both sides)."""
    if task.std_init is None:
        return {}, {}

    cls = lookup_strategy(algorithm).cls
    accepted = inspect.signature(cls.__init__).parameters
    if "std_schedule" in accepted:
        return {}, {"std_schedule": optax.constant_schedule(task.std_init)}
    return {"std_init": task.std_init}, {}


# -- held-out evaluation -------------------------------------------------------------


def heldout_keys(num_episodes: int = HELDOUT_EPISODES) -> Any:
    """The held-out episodes' keys (never used in training)."""
    return jr.split(jr.key(HELDOUT_SEED), num_episodes)


@eqx.filter_jit
def _heldout(fitness: EpisodesFitness, genomes: Any, keys: Any) -> Array:
    # `lax.map` over the stacked genomes' arrays, 16 at a time: every kept mean of
    # every seed at once would hold all their episodes in memory
    dynamic, static = eqx.partition(genomes, eqx.is_array)

    def one(dynamic: Any) -> Array:
        genome = eqx.combine(dynamic, static)
        return jnp.mean(jax.vmap(lambda k: fitness(genome, k))(keys))

    return jax.lax.map(one, dynamic, batch_size=16)


def heldout_returns(task: Task, genomes: Sequence[Any]) -> Float[np.ndarray, " n"]:
    """Mean return of each genome (an `MLPPolicy`) on the held-out episodes."""
    if not genomes:
        return np.zeros((0,), np.float32)
    stacked = jtu.tree_map(
        lambda *xs: jnp.stack(xs) if eqx.is_array(xs[0]) else xs[0], *genomes
    )
    fitness = fitness_for(task, episodes=1)
    return np.asarray(_heldout(fitness, stacked, heldout_keys()))


__all__ = [
    "HELDOUT_EPISODES",
    "HELDOUT_SEED",
    "QUICK_TASKS",
    "TASKS",
    "EpisodesFitness",
    "Task",
    "algorithm_overrides",
    "episode_length",
    "fitness_for",
    "flax_policy",
    "gymnax_problem",
    "heldout_keys",
    "heldout_returns",
    "initial_weights",
    "make_env",
    "mlp_from_flax",
]
