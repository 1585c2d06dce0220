"""What a lifetime draws from its key streams: the per-step streams
(`StepKeys`), and the environment's draws computed ahead, a block of steps at
once (`draw_block`, `block_draws`), which `rollout.run_lifetime` takes.
"""

from typing import Any

import equinox as eqx
import jax
import jax.random as jr

from ._types import Array, PRNGKey
from .bits import draws_apart_pay, stage, true_at_run_time
from .envs.base import AbstractEnv, EnvParams, noise_apart


class StepKeys(eqx.Module):
    """The lifetime's per-step key streams; step t folds in t."""

    env: PRNGKey
    reset: PRNGKey
    policy: PRNGKey


DRAW_BLOCK = 16
"""At most this many steps' environment draws are computed together, ahead of
the steps (`draw_block`)."""


class StepDraws(eqx.Module):
    """What a step draws from the environment's key streams, computed ahead
    (`block_draws`): the step's noise (`sample_noise`) and, with auto-reset,
    the reset it keeps where the episode ends."""

    noise: Any
    reset: Any  # (obs, env_state), or None without auto-reset


def draw_block(env: AbstractEnv, num_steps: int) -> int:
    """Steps whose environment draws one computation makes: the largest divisor
    of `num_steps` up to `DRAW_BLOCK` where the environment draws apart and that
    pays (`draws_apart_pay`), else 1 (every step draws for itself).

    On CPU JAX lowers threefry to a rolled loop of small kernels, run for every
    draw of every step; drawn for a block of steps at once (vmapped over the
    steps), the loop runs once per block (`eqxevo bench --only kernels`: L0
    585 -> 81 kernels per step, L4 824 -> 122). The draws are the same bits
    either way (tests/test_shared_draws.py)."""
    if not (noise_apart(env) and draws_apart_pay()):
        return 1
    return max(
        d for d in range(1, min(DRAW_BLOCK, num_steps) + 1) if num_steps % d == 0
    )


def block_draws(
    env: AbstractEnv,
    env_params: EnvParams,
    keys: StepKeys,
    steps: Array,
    reset_on_done: bool,
) -> StepDraws:
    """The draws of `steps` (a `[S]` array of step indices), stacked, as one
    computation of its own (`stage`): like a step's own draws, with a shared
    episode's key it runs once for the population."""

    def draws(keys: StepKeys, steps: Array, env_params: EnvParams) -> StepDraws:
        def one(t: Array) -> StepDraws:
            noise = env.sample_noise(jr.fold_in(keys.env, t), env_params)
            reset = None
            if reset_on_done:
                reset = env.reset(jr.fold_in(keys.reset, t), env_params)
            return StepDraws(noise, reset)

        return jax.vmap(one)(steps)

    return stage(draws, true_at_run_time(keys.env))(keys, steps, env_params)


__all__ = ["DRAW_BLOCK", "StepDraws", "StepKeys", "block_draws", "draw_block"]
