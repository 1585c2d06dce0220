"""A recorded lifetime: `record` runs one like `rollout` and keeps every step
(for pictures and debugging).

See docs/environments.md ("Lifetimes").
"""

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu

from ._types import Array, Bool, Float, PRNGKey, Scalar
from .envs.base import AbstractEnv, EnvParams, EnvState
from .nets.base import AbstractPolicy
from .rollout import Summary, lifetime_summary, run_lifetime


class Trajectory(eqx.Module):
    """A recorded lifetime (from `record`).

    Attributes:
        env_states: the environment's state, stacked over T + 1 entries: entry 0
            at the start, entry t + 1 after step t (before any reset, so an
            episode's last position is kept; the next entry may start a new
            episode).
        observations: `(T, obs)`, what the policy saw at each step.
        actions: `(T, action)`, what it did.
        rewards: `(T,)`; zero once the environment is frozen.
        dones: `(T,)`, whether an episode ended at step t.
        info: the environment's info, each entry stacked to `(T,)`.
        fitness, summary: as `rollout` returns for the same arguments.
    """

    env_states: EnvState
    observations: Float[Array, "T obs"]
    actions: Float[Array, "T action"]
    rewards: Float[Array, " T"]
    dones: Bool[Array, " T"]
    info: dict[str, Array]
    fitness: Scalar
    summary: Summary


@eqx.filter_jit
def record(
    key: PRNGKey,
    policy: AbstractPolicy,
    env: AbstractEnv,
    env_params: EnvParams,
    num_steps: int,
    *,
    reset_on_done: bool = True,
    reset_policy_on_done: bool = False,
) -> Trajectory:
    """Run one lifetime like `rollout` and keep every step (for one genome, short T).

    Same arguments, keys and results as `rollout`; memory grows with
    `num_steps`, so use it for pictures and debugging, not for evolution.

    Returns:
        A `Trajectory`.

    Example:
        >>> trajectory = record(key, policy, env, params, 500)
        >>> eqxevo._app.figures.render_trajectory(trajectory, env, params, "path.png")
    """
    carry, (initial_state, steps) = run_lifetime(
        key,
        policy,
        env,
        env_params,
        num_steps,
        reset_on_done,
        reset_policy_on_done,
        keep_steps=True,
    )
    env_states = jtu.tree_map(
        lambda first, rest: jnp.concatenate([first[None], rest]),
        initial_state,
        steps.env_state,
    )
    summary = lifetime_summary(carry, num_steps, reset_on_done)
    return Trajectory(
        env_states=env_states,
        observations=steps.obs,
        actions=steps.action,
        rewards=steps.reward,
        dones=steps.done,
        info=steps.info,
        fitness=summary["total_reward"],
        summary=summary,
    )


__all__ = ["Trajectory", "record"]
