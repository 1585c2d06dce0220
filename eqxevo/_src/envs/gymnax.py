"""Any gymnax environment behind eqxevo's `AbstractEnv` (the `rl` extra).

See docs/environments.md ("gymnax environments") for how observations, actions,
params and states are adapted.
"""

import functools
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import Array, Float, PRNGKey
from .base import AbstractEnv, Action, Observation, StepResult, strong_arrays

try:
    import gymnax
    from gymnax.environments import spaces as gymnax_spaces
except ImportError as _error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "eqxevo._src.envs.gymnax needs gymnax, an optional dependency: "
        'pip install "eqxevo[rl]"'
    ) from _error


@functools.cache
def _make(name: str) -> tuple[Any, Any]:
    # One gymnax object per name, so every GymnaxEnv(name) hashes alike and
    # shares compiled programs.
    if name not in gymnax.registered_envs:
        raise ValueError(
            f"unknown gymnax environment {name!r}; gymnax registers "
            f"{sorted(gymnax.registered_envs)}"
        )
    # Some constructors (MetaMaze's) mix Python floats and int32 arrays: gymnax
    # is not written for strict promotion, as in reset and step below.
    with jax.numpy_dtype_promotion("standard"):
        return gymnax.make(name)


_UNBOUNDED = 1e6
"""An observation bound this large is no bound (gymnax writes float32's largest
value for CartPole's velocities)."""


def _obs_affine(space: Any, size: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """`(center, 1 / half-width)` per observation dimension; `(0, 1)` if unbounded."""
    low = getattr(space, "low", None)
    high = getattr(space, "high", None)
    if low is None or high is None:
        return (0.0,) * size, (1.0,) * size
    low = np.broadcast_to(np.asarray(low, np.float64), (size,))
    high = np.broadcast_to(np.asarray(high, np.float64), (size,))
    with np.errstate(invalid="ignore", over="ignore"):
        bounded = (
            np.isfinite(low)
            & np.isfinite(high)
            & (np.abs(low) < _UNBOUNDED)
            & (np.abs(high) < _UNBOUNDED)
            & (high > low)
        )
        center = np.where(bounded, (high + low) / 2, 0.0)
        scale = np.where(bounded, 2 / np.where(bounded, high - low, 1.0), 1.0)
    return tuple(float(x) for x in center), tuple(float(x) for x in scale)


def _meta_maze(state: Any, params: Any) -> Float[Array, " 4"]:
    del params
    return jnp.concatenate(
        [jnp.asarray(state.pos, jnp.float32), jnp.asarray(state.goal, jnp.float32)]
    )


PRIVILEGED: dict[str, Callable[[Any, Any], Array]] = {
    "MetaMaze-misc": _meta_maze,
}
"""What an oracle may know of a gymnax environment beyond its observation, by
gymnax name: `(gymnax state, gymnax params) -> float vector` (`GymnaxEnv.privileged`).
MetaMaze-misc: the agent's position and the goal's, (row, column) each."""


class GymnaxEnv(AbstractEnv):
    """A gymnax environment, by name, as an eqxevo `AbstractEnv`.

    Arguments:
        name: a gymnax registered name, e.g. "CartPole-v1", "Pendulum-v1".
        normalize_obs: map each bounded observation dimension onto [-1, 1].

    Example:
        >>> env = GymnaxEnv("CartPole-v1")
        >>> obs, state = env.reset(jr.key(0), env.default_params())
        >>> env = GymnaxEnv("MountainCarContinuous-v0", normalize_obs=True)
    """

    name: str = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    discrete: bool = eqx.field(static=True)
    action_shape: tuple[int, ...] = eqx.field(static=True)
    action_dtype: str = eqx.field(static=True)
    low: tuple[float, ...] = eqx.field(static=True)
    high: tuple[float, ...] = eqx.field(static=True)
    normalize_obs: bool = eqx.field(static=True)
    obs_center: tuple[float, ...] = eqx.field(static=True)
    obs_scale: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, name: str, normalize_obs: bool = False):
        if not isinstance(name, str):
            raise TypeError(f"name must be a gymnax environment name; got {name!r}")
        if not isinstance(normalize_obs, bool):
            raise TypeError(f"normalize_obs must be a bool; got {normalize_obs!r}")
        # Spaces, bounds and the normalisation are read once, as static Python
        # values: the compiled step holds them as constants.
        env, params = _make(name)
        self.name = name
        obs_space = env.observation_space(params)
        obs_shape = obs_space.shape
        self.obs_size = math.prod(obs_shape) if obs_shape else 1
        self.normalize_obs = normalize_obs
        self.obs_center, self.obs_scale = _obs_affine(obs_space, self.obs_size)
        space = env.action_space(params)
        self.action_shape = tuple(int(n) for n in space.shape)
        self.action_dtype = np.dtype(space.dtype).name
        if isinstance(space, gymnax_spaces.Discrete):
            # One score per action; the argmax picks (see to_gymnax_action).
            self.discrete = True
            self.action_size = int(space.n)
            self.low = self.high = ()
        elif isinstance(space, gymnax_spaces.Box):
            self.discrete = False
            size = math.prod(space.shape) if space.shape else 1
            self.action_size = size
            low = np.broadcast_to(np.asarray(space.low, np.float64), (size,))
            high = np.broadcast_to(np.asarray(space.high, np.float64), (size,))
            self.low = tuple(float(x) for x in low)
            self.high = tuple(float(x) for x in high)
        else:
            raise ValueError(
                f"{name}: action space {type(space).__name__} is not supported "
                "(Discrete and Box are)"
            )

    @property
    def gymnax_env(self) -> Any:
        """The wrapped gymnax environment object."""
        return _make(self.name)[0]

    def default_params(self) -> Any:
        return strong_arrays(_make(self.name)[1])

    def to_observation(self, obs: Array) -> Observation:
        """gymnax's observation as eqxevo's: flat float32, bounded dimensions
        mapped onto [-1, 1] with `normalize_obs`."""
        flat = jnp.ravel(obs).astype(jnp.float32)
        if not self.normalize_obs:
            return flat
        center = np.asarray(self.obs_center, np.float32)
        scale = np.asarray(self.obs_scale, np.float32)
        return (flat - center) * scale

    def to_gymnax_action(self, action: Action) -> Array:
        """A policy's action as gymnax's: the argmax for a `Discrete` space, the
        unit interval mapped onto the bounds for a `Box` (infinite bounds pass
        through)."""
        if self.discrete:
            return jnp.argmax(action).astype(self.action_dtype)
        low = np.asarray(self.low, np.float32)
        high = np.asarray(self.high, np.float32)
        finite = np.isfinite(low) & np.isfinite(high)
        unit = jnp.clip(action, -1.0, 1.0)
        scaled = jnp.asarray(np.where(finite, low, 0.0)) + (unit + 1.0) * 0.5 * (
            jnp.asarray(np.where(finite, high - low, 0.0))
        )
        out = jnp.where(jnp.asarray(finite), scaled, action)
        return out.reshape(self.action_shape).astype(self.action_dtype)

    def reset(self, key: PRNGKey, params: Any) -> tuple[Observation, Any]:
        # gymnax is not written for the strict promotion eqxevo's tests use.
        with jax.numpy_dtype_promotion("standard"):
            obs, state = self.gymnax_env.reset_env(key, params)
            return self.to_observation(obs), strong_arrays(state)

    def step(self, key: PRNGKey, state: Any, action: Action, params: Any) -> StepResult:
        env = self.gymnax_env
        with jax.numpy_dtype_promotion("standard"):
            # step_env, not step: eqxevo's rollout resets, gymnax must not.
            obs, state, reward, terminated, info = env.step_env(
                key, state, self.to_gymnax_action(action), params
            )
            terminated = jnp.asarray(terminated, jnp.bool_)
            truncated = jnp.asarray(env.is_truncated(state, params), jnp.bool_)
            extra = {
                f"{k}": jnp.asarray(v, jnp.float32)
                for k, v in info.items()
                if isinstance(k, str) and jnp.ndim(v) == 0
            }
            info = {
                **extra,
                "terminated": terminated.astype(jnp.float32),
                "truncated": truncated.astype(jnp.float32),
            }
            return (
                self.to_observation(obs),
                strong_arrays(state),
                jnp.asarray(reward, jnp.float32),
                terminated | truncated,
                info,
            )

    def privileged(self, state: Any, params: Any) -> Float[Array, " k"]:
        """The hidden variables `PRIVILEGED` declares for this environment.

        Raises:
            NotImplementedError: `PRIVILEGED` declares none for it.
        """
        declared = PRIVILEGED.get(self.name)
        if declared is None:
            raise NotImplementedError(
                f"GymnaxEnv({self.name!r}) declares no privileged information: "
                "eqxevo._src.envs.gymnax.PRIVILEGED declares it for "
                f"{sorted(PRIVILEGED)}"
            )
        return jnp.ravel(declared(state, params)).astype(jnp.float32)


__all__ = ["PRIVILEGED", "GymnaxEnv"]
