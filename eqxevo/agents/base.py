"""`RandomAgent`: the random reference every environment has."""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import positive_int
from .._types import PRNGKey
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy


class RandomAgent(AbstractPolicy):
    """Uniform random motor commands in [-1, 1]; its lifetime state is a key.

    Arguments:
        obs_size: size of the observation it ignores.
        action_size: number of commands.
    """

    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(self, obs_size: int, action_size: int = 2):
        self.obs_size = positive_int("obs_size", obs_size)
        self.action_size = positive_int("action_size", action_size)

    def initial_state(self, key: PRNGKey) -> PRNGKey:
        # The key is the lifetime state: the agent stays a pure function.
        return key

    def __call__(self, obs: Observation, state: PRNGKey) -> tuple[Action, PRNGKey]:
        del obs
        next_key, action_key = jr.split(state)
        action = jr.uniform(action_key, (self.action_size,), jnp.float32, -1.0, 1.0)
        return action, next_key


__all__ = ["RandomAgent"]
