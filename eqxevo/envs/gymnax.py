"""Any gymnax environment behind eqxevo's `AbstractEnv` (the `rl` extra).

    env = GymnaxEnv("CartPole-v1")
    policy = MLPPolicy(env.obs_size, env.action_size, key=key)
    fitness, summary = eqxevo.rollout(key, policy, env, env.default_params(), 500,
                                      reset_on_done=False)

What the adapter does:

- **Observations** are flattened to a float32 vector of size `obs_size`. With
  `normalize_obs=True`, every dimension with finite bounds in the observation
  space is mapped from `[low, high]` onto [-1, 1] (a fixed affine map, the same
  in every episode; dimensions gymnax leaves unbounded, or bounds by a float's
  largest value, pass through). MountainCarContinuous's velocity spans +-0.07:
  unscaled, a network needs weights of ~100 to react to it.
- **Actions**: a policy outputs `action_size` floats (conventionally in
  [-1, 1]). For a `Discrete(n)` action space `action_size = n` and the action
  is the argmax (the floats are logits or scores). For a `Box` space the floats
  are mapped from [-1, 1] onto `[low, high]` (clipped; dimensions with an
  infinite bound pass through unscaled).
- **Steps** call gymnax's `step_env` (no auto-reset: eqxevo's rollout resets)
  and `done = terminated | truncated` (gymnax's time limit,
  `max_steps_in_episode`). `info` holds `terminated`, `truncated` and gymnax's
  scalar info entries, as float32.
- **Params**: gymnax's params pytree with every Python number turned into a
  strongly typed array, so variants vmap and a new value does not recompile.
- **State**: gymnax's state with its leaves strongly typed (gymnax resets some
  counters to Python ints), so the state's type never changes between steps.
- gymnax is traced under JAX's standard dtype promotion (it is not written for
  the strict mode eqxevo's tests use).

gymnax is an optional dependency: `pip install "eqxevo[rl]"`.
"""

import functools
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from .._types import Array, Bool, Float, PRNGKey, Scalar
from .base import AbstractEnv

try:
    import gymnax
    from gymnax.environments import spaces as gymnax_spaces
except ImportError as _error:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "eqxevo.envs.gymnax needs gymnax, an optional dependency: "
        'pip install "eqxevo[rl]"'
    ) from _error


@functools.cache
def _make(name: str) -> tuple[Any, Any]:
    # One gymnax object per name, so every GymnaxEnv(name) hashes alike and
    # shares compiled programs.
    try:
        return gymnax.make(name)
    except (ValueError, KeyError) as err:
        raise ValueError(
            f"unknown gymnax environment {name!r}; gymnax registers "
            f"{sorted(gymnax.registered_envs)}"
        ) from err


def _strong(tree: Any) -> Any:
    """Every numeric leaf as a strongly typed array (Python numbers included)."""

    def convert(x: Any) -> Any:
        if isinstance(x, bool | int | float | np.ndarray | np.generic | jax.Array):
            array = jnp.asarray(x)
            return jnp.asarray(array, array.dtype)
        return x

    return jtu.tree_map(convert, tree)


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


def _standard_promotion(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return fn(*args, **kwargs)

    return wrapper


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
        return _strong(_make(self.name)[1])

    def _observe(self, obs: Array) -> Float[Array, " obs"]:
        flat = jnp.ravel(obs).astype(jnp.float32)
        if not self.normalize_obs:
            return flat
        center = np.asarray(self.obs_center, np.float32)
        scale = np.asarray(self.obs_scale, np.float32)
        return (flat - center) * scale

    def _action(self, action: Float[Array, " action"]) -> Array:
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

    @_standard_promotion
    def reset(self, key: PRNGKey, params: Any) -> tuple[Float[Array, " obs"], Any]:
        obs, state = self.gymnax_env.reset_env(key, params)
        return self._observe(obs), _strong(state)

    @_standard_promotion
    def step(
        self,
        key: PRNGKey,
        state: Any,
        action: Float[Array, " action"],
        params: Any,
    ) -> tuple[Float[Array, " obs"], Any, Scalar, Bool[Array, ""], dict[str, Array]]:
        env = self.gymnax_env
        obs, state, reward, terminated, info = env.step_env(
            key, state, self._action(action), params
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
            self._observe(obs),
            _strong(state),
            jnp.asarray(reward, jnp.float32),
            terminated | truncated,
            info,
        )


__all__ = ["GymnaxEnv"]
