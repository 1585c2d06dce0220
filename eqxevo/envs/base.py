"""The environment protocol: functional and gymnax-compatible.

See docs/environments.md ("The environment protocol") for what eqxevo relies on.
"""

import abc
from typing import Any

import equinox as eqx

from .._types import Array, Bool, Float, PRNGKey, Scalar

EnvParams = Any
"""An environment's params: a pytree of arrays (the variant a program runs)."""
EnvState = Any
"""An environment's state: a pytree of arrays whose type never changes."""
Observation = Float[Array, " obs"]
Action = Float[Array, " action"]
"""What a policy outputs: `action_size` floats, conventionally in [-1, 1]."""
StepResult = tuple[Observation, EnvState, Scalar, Bool[Array, ""], dict[str, Array]]
"""What `step` returns: `(obs, state, reward, done, info)`."""


class AbstractEnv(eqx.Module):
    """A functional environment with gymnax's `reset`/`step` signatures."""

    obs_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def default_params(self) -> EnvParams:
        """The environment's default parameters (a pytree)."""

    @abc.abstractmethod
    def reset(self, key: PRNGKey, params: EnvParams) -> tuple[Observation, EnvState]:
        """Start an episode."""

    @abc.abstractmethod
    def step(
        self, key: PRNGKey, state: EnvState, action: Action, params: EnvParams
    ) -> StepResult:
        """Advance one step: `(obs, state, reward, done, info)`; never resets."""
