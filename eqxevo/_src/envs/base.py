"""The environment protocol: functional and gymnax-compatible.

See docs/environments.md ("The environment protocol") for what eqxevo relies on.
"""

import abc
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

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

    normalizes_obs: ClassVar[bool] = False
    """Whether a config's `run.normalize_obs = "auto"` normalises this
    environment's observations (Brax's: unscaled positions and velocities)."""

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

    def sample_noise(self, key: PRNGKey, params: EnvParams) -> Any:
        """Every random draw one `step` makes, where `step` is
        `transition(state, action, params, sample_noise(key, params))`.

        Optional: an environment that provides both lets a population draw a
        shared episode's noise once (`noise_apart`). Others raise.
        """
        del key, params
        raise NotImplementedError(f"{type(self).__name__} draws inside its step")

    def transition(
        self, state: EnvState, action: Action, params: EnvParams, noise: Any
    ) -> StepResult:
        """The deterministic step given its random draws (see `sample_noise`)."""
        del state, action, params, noise
        raise NotImplementedError(f"{type(self).__name__} draws inside its step")

    def privileged(self, state: EnvState, params: EnvParams) -> Float[Array, " k"]:
        """What an oracle may know beyond the observation: the hidden variables a
        learner has to find out (which food nourishes, where the goal is), as a
        float vector of fixed size.

        Optional: an environment that provides it lets a reference of kind
        "oracle" be scored with `eqxevo.envs.privileged(env)`, whose observations
        end with this vector. Others raise.
        """
        del state, params
        raise NotImplementedError(
            f"{type(self).__name__} declares no privileged information (its "
            "`privileged(state, params)` method)"
        )


def noise_apart(env: AbstractEnv) -> bool:
    """Whether `env` draws a step's randomness apart from the step
    (`sample_noise` and `transition` both provided)."""
    kind = type(env)
    return (
        kind.sample_noise is not AbstractEnv.sample_noise
        and kind.transition is not AbstractEnv.transition
    )


def strong_arrays(tree: Any) -> Any:
    """Every numeric leaf of an adapted library's state or params as a strongly
    typed array, Python numbers included (gymnax and Brax leave some weakly
    typed, and a state whose type changes recompiles)."""

    def convert(x: Any) -> Any:
        # asarray twice: the second, with an explicit dtype, drops weak types.
        if isinstance(x, bool | int | float | np.ndarray | np.generic | jax.Array):
            array = jnp.asarray(x)
            return jnp.asarray(array, array.dtype)
        return x

    return jtu.tree_map(convert, tree)
