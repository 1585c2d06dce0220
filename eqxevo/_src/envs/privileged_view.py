"""`privileged(env)`: the environment with its hidden variables appended to every
observation, for oracle references (docs/environments.md, "Reference agents").
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from .._types import Array, Float, PRNGKey
from .base import (
    AbstractEnv,
    Action,
    EnvParams,
    EnvState,
    Observation,
    StepResult,
    noise_apart,
)


class Privileged(AbstractEnv):
    """`env` whose observation is `[obs, env.privileged(state, params)]`.

    Its lifetimes are `env`'s: the same keys give the same states, rewards and
    episode ends for the same actions. Build it with `privileged(env)`.

    Attributes:
        env: the environment wrapped.
        num_privileged: the size of `env.privileged(...)`.
    """

    env: AbstractEnv
    num_privileged: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def default_params(self) -> EnvParams:
        return self.env.default_params()

    def _observe(
        self, obs: Observation, state: EnvState, params: EnvParams
    ) -> Float[Array, " told"]:
        extra = jnp.asarray(self.env.privileged(state, params), jnp.float32)
        return jnp.concatenate([obs, extra.reshape(-1)])

    def reset(
        self, key: PRNGKey, params: EnvParams
    ) -> tuple[Float[Array, " told"], EnvState]:
        obs, state = self.env.reset(key, params)
        return self._observe(obs, state, params), state

    def step(
        self, key: PRNGKey, state: EnvState, action: Action, params: EnvParams
    ) -> StepResult:
        obs, state, reward, done, info = self.env.step(key, state, action, params)
        return self._observe(obs, state, params), state, reward, done, info


class PrivilegedApart(Privileged):
    """`Privileged` of an environment that draws its steps' noise apart
    (`sample_noise` and `transition`): it does too, with the same draws."""

    def sample_noise(self, key: PRNGKey, params: EnvParams) -> Any:
        return self.env.sample_noise(key, params)

    def transition(
        self, state: EnvState, action: Action, params: EnvParams, noise: Any
    ) -> StepResult:
        obs, state, reward, done, info = self.env.transition(
            state, action, params, noise
        )
        return self._observe(obs, state, params), state, reward, done, info


def privileged(env: AbstractEnv, params: EnvParams | None = None) -> Privileged:
    """`env` with `env.privileged(state, params)` appended to every observation.

    Arguments:
        env: an environment that declares `privileged`.
        params: params to size the privileged vector with (default: the
            environment's defaults; its size must not depend on them).

    Raises:
        ValueError: `env` declares no privileged information, or gives a vector
            that is not of floats.
    """
    params = env.default_params() if params is None else params

    def shape(key: PRNGKey) -> Any:
        _, state = env.reset(key, params)
        return env.privileged(state, params)

    try:
        extra = jax.eval_shape(shape, jr.key(0))
    except NotImplementedError as err:
        raise ValueError(str(err)) from None
    if extra.ndim > 1 or not jnp.issubdtype(extra.dtype, jnp.number):
        raise ValueError(
            f"{type(env).__name__}.privileged must give a vector of numbers; got "
            f"{extra.dtype} of shape {extra.shape}"
        )
    size = int(extra.size)
    kind = PrivilegedApart if noise_apart(env) else Privileged
    return kind(
        env=env,
        num_privileged=size,
        obs_size=env.obs_size + size,
        action_size=env.action_size,
    )


__all__ = ["Privileged", "PrivilegedApart", "privileged"]
