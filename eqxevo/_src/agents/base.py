"""`RandomAgent`, the random reference every environment has; the observation map
of `GymnaxEnv` that agents reading raw gymnax observations undo."""

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


def observation_map(
    obs_center: tuple[float, ...] | None,
    obs_scale: tuple[float, ...] | None,
    size: int,
    env_name: str,
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`(center, scale)` of `GymnaxEnv(env_name, normalize_obs=True)`'s map
    (`env.obs_center`, `env.obs_scale`: `size` numbers each, scales non-zero), or
    the identity map for `None`: an agent reads `obs / scale + center`.

    Raises:
        ValueError: the wrong number of values, or a zero scale.
    """
    center = (0.0,) * size if obs_center is None else tuple(map(float, obs_center))
    scale = (1.0,) * size if obs_scale is None else tuple(map(float, obs_scale))
    if len(center) != size or len(scale) != size or 0.0 in scale:
        raise ValueError(
            f"obs_center and obs_scale must be {size} numbers each (scales "
            f"non-zero), as GymnaxEnv({env_name!r}) has; got {center} and {scale}"
        )
    return center, scale


__all__ = ["RandomAgent", "observation_map"]
