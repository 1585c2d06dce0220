"""The environment protocol: functional, gymnax-compatible.

    obs, state = env.reset(key, params)
    obs, state, reward, done, info = env.step(key, state, action, params)

Environments are Equinox modules holding only static configuration (sizes,
number of steps per episode); everything that varies between experiments lives
in `params`, a pytree. Variants (source placement, gradient length scale,
noise, ...) are different params run by the same compiled program, and can be
vmapped. Actions are float vectors of size `action_size` (policies output
values in [-1, 1]); observations are float vectors of size `obs_size`.

`step` never resets by itself: the rollout resets on `done`.

What eqxevo relies on (and `eqxevo.testing.check_env` verifies):

- `reset` and `step` are pure functions of their arguments: all randomness comes
  from `key`, nothing is kept on the module or in globals.
- `params` is a pytree whose leaves are arrays (a Python number would be a
  compile-time constant: each variant would recompile, and vmap could not map
  it). Stacking the leaves of several params gives a batch of variants.
- The state is a pytree of arrays whose structure, shapes and dtypes never
  change from `reset` through every `step` (it is a `lax.scan` carry).
- `reward` is a float scalar, `done` a bool scalar, and `info` a dict of
  scalar arrays (the rollout averages each entry over the lifetime).
"""

import abc
import contextlib
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._types import Array, Bool, Float, PRNGKey, Scalar

EnvParams = Any
EnvState = Any


_TRACED_CHECKS = [False]


@contextlib.contextmanager
def traced_param_checks(enabled: bool = True) -> Iterator[None]:
    """Compile the environments' params checks into programs traced inside.

    Params constructors already validate every field, and concrete params are
    checked eagerly by `check_params`; what remains are params edited or built
    as traced arrays. Checking those needs `eqx.error_if`, whose host callback
    keeps a program out of JAX's persistent compilation cache, so it is off by
    default. Turn it on while debugging:

        with eqxevo.envs.traced_param_checks():
            fitness = eqx.filter_jit(fitness_fn)(genome, key)
    """
    previous = _TRACED_CHECKS[0]
    _TRACED_CHECKS[0] = enabled
    try:
        yield
    finally:
        _TRACED_CHECKS[0] = previous


def check_params(value: Array, invalid: Array, message: str) -> Array:
    """`value`, after checking `invalid` (a bool scalar computed from params).

    Concrete `invalid`: raises `ValueError(message)` now if true. Traced: an
    `eqx.error_if` inside `traced_param_checks()`, otherwise nothing.
    """
    if not isinstance(invalid, jax.core.Tracer):  # pyright: ignore[reportAttributeAccessIssue]
        if bool(np.asarray(invalid)):
            raise ValueError(message)
        return value
    if _TRACED_CHECKS[0]:
        return eqx.error_if(value, invalid, message)
    return value


class AbstractEnv(eqx.Module):
    """A functional environment with gymnax's `reset`/`step` signatures."""

    obs_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def default_params(self) -> EnvParams:
        """The environment's default parameters (a pytree)."""

    @abc.abstractmethod
    def reset(
        self, key: PRNGKey, params: EnvParams
    ) -> tuple[Float[Array, " obs"], EnvState]:
        """Start an episode."""

    @abc.abstractmethod
    def step(
        self,
        key: PRNGKey,
        state: EnvState,
        action: Float[Array, " action"],
        params: EnvParams,
    ) -> tuple[
        Float[Array, " obs"], EnvState, Scalar, Bool[Array, ""], dict[str, Array]
    ]:
        """Advance one step: `(obs, state, reward, done, info)`."""
