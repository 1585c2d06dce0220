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
  eqxevo's own params extend `eqxevo.envs.params.AbstractParams`, which
  declares each field's default and range and checks them.
- The state is a pytree of arrays whose structure, shapes and dtypes never
  change from `reset` through every `step` (it is a `lax.scan` carry).
- `reward` is a float scalar, `done` a bool scalar, and `info` a dict of
  scalar arrays (the rollout averages each entry over the lifetime).
"""

import abc
from typing import Any

import equinox as eqx

from .._types import Array, Bool, Float, PRNGKey, Scalar

EnvParams = Any
EnvState = Any
StepResult = tuple[
    Float[Array, " obs"], EnvState, Scalar, Bool[Array, ""], dict[str, Array]
]
"""What `step` returns: `(obs, state, reward, done, info)`."""


def traced_param_checks(enabled: bool = True) -> None:
    """Removed: the switch is now the environment's `traced_param_checks` field.

    It was a global flag read while tracing, so a program compiled with one
    setting kept it whatever the flag said later. The switch is now static
    configuration of the environment, part of what JAX compiles and caches on:
    `Chemotaxis(traced_param_checks=True)`.
    """
    raise RuntimeError(
        "eqxevo.envs.traced_param_checks() was removed: a global switch is not part "
        "of JAX's compilation cache key, so compiled programs kept a stale setting. "
        "Build the environment with the checks instead, e.g. "
        f"Chemotaxis(traced_param_checks={enabled!r}) (env.options."
        "traced_param_checks in a TOML experiment)."
    )


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
    ) -> StepResult:
        """Advance one step: `(obs, state, reward, done, info)`."""
