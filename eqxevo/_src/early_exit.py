"""Early exit: a lifetime of one episode runs in chunks of steps and stops once
its episode has ended, with the bits of every chunk run.

See docs/environments.md ("Lifetimes").
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from ._types import Array

EXIT_CHUNK = 64
"""A lifetime of one episode (`reset_on_done=False`) runs in chunks of about
this many steps and stops after the chunk in which its episode ended
(`until_done`)."""


def until_done(
    carry: Any,
    num_steps: int,
    block: int,
    steps_from: Any,
    exit_early: bool = True,
) -> Any:
    """The steps of a one-episode lifetime (`carry`: a `LifetimeCarry`, whose
    `active` and `t` it reads; `steps_from(carry, first, count)` runs `count`
    steps from step index `first`) in chunks of about `EXIT_CHUNK`
    steps (a multiple of `block`), then the remainder; with `exit_early`, no
    chunk runs once the episode has ended. After the episode's `done` a step
    changes nothing but the step index (the environment, the policy and every
    sum are frozen, by selects), and the chunks are one computation whether or
    not the loop exits early, so the result has the bits of every chunk run
    (`exit_early=False`); the step index is set to `num_steps`, as running them
    all leaves it. Under `vmap` the chunks run while any lifetime of the batch
    is active."""
    chunk = max(block, EXIT_CHUNK // block * block)
    chunks, rest = divmod(num_steps, chunk)

    def more(state: tuple[Array, Any]) -> Array:
        i, carry = state
        return (i < chunks) & (carry.active | (not exit_early))

    def run_chunk(state: tuple[Array, Any]) -> tuple[Array, Any]:
        i, carry = state
        carry, _ = steps_from(carry, i * chunk, chunk)
        return i + 1, carry

    _, carry = jax.lax.while_loop(more, run_chunk, (jnp.int32(0), carry))
    if rest:
        carry, _ = steps_from(carry, jnp.int32(chunks * chunk), rest)
    return dataclasses.replace(carry, t=jnp.asarray(num_steps, carry.t.dtype))


__all__ = ["EXIT_CHUNK", "until_done"]
