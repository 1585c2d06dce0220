"""What Brax's and MuJoCo Playground's environments share behind eqxevo's
`AbstractEnv`: a functional state with `obs`, `reward`, `done` and `metrics`,
actuators with control ranges, and an import that prints and warns.

`PhysicsEnv` adapts such an environment once (`BraxEnv`, `PlaygroundEnv`
name and build it); see docs/environments.md ("Brax environments").
"""

import abc
import contextlib
import io
import logging
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._types import PRNGKey
from .base import AbstractEnv, Action, Observation, StepResult, strong_arrays


def quiet_import(load: Callable[[], Any], install: str, what: str) -> Any:
    """`load()`, which imports a physics library, with its import-time prints,
    warnings and log lines silenced; an ImportError naming `install` if the
    library is missing.

    Importing MuJoCo's MJX prints lines about the optional `warp` package, Brax
    warns that JAXopt is no longer maintained: neither is actionable for an
    eqxevo user.
    """
    quiet = io.StringIO()
    try:
        with (
            contextlib.redirect_stdout(quiet),
            contextlib.redirect_stderr(quiet),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            logging.disable(logging.WARNING)
            try:
                return load()
            finally:
                logging.disable(logging.NOTSET)
    except ImportError as err:
        raise ImportError(
            f"{what} need an optional dependency: {install} ({err})"
        ) from err


def control_bounds(ctrl_range: Any, action_size: int) -> tuple[tuple, tuple]:
    """`(center, scale)` per actuator of its control range (`ctrl_range`, rows
    of [low, high]); [-1, 1] (the identity map) where the range is missing or
    not finite."""
    bounds = np.asarray(ctrl_range, np.float64).reshape(-1, 2)
    if bounds.shape[0] != action_size or not np.all(np.isfinite(bounds)):
        bounds = np.tile([-1.0, 1.0], (action_size, 1))
    center = tuple(float(x) for x in bounds.mean(axis=1))
    scale = tuple(float(x) for x in (bounds[:, 1] - bounds[:, 0]) / 2)
    return center, scale


def observation_shapes(env: Any) -> Any:
    """The shapes of `env.reset`'s observation, found by tracing the reset
    abstractly (`jax.eval_shape`): the libraries' own `observation_size` runs
    a reset eagerly, one operation at a time (16 s for Brax's MJX pendulum
    against 1 s)."""
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)  # a raw key, as both take
    with jax.numpy_dtype_promotion("standard"):
        return jax.eval_shape(env.reset, key).obs


def check_episode_length(episode_length: Any) -> int:
    """`episode_length` if it is an int >= 1; else a ValueError."""
    if (
        isinstance(episode_length, bool)
        or not isinstance(episode_length, int)
        or episode_length < 1
    ):
        raise ValueError(f"episode_length must be an int >= 1; got {episode_length!r}")
    return episode_length


class PhysicsParams(eqx.Module):
    """A physics environment's params: none (its options are fixed at
    construction)."""


class PhysicsState(eqx.Module):
    """A physics episode: the library's own state and the steps taken in this
    episode."""

    inner: Any
    steps: jax.Array


class PhysicsEnv(AbstractEnv):
    """A functional physics environment (Brax's `State` protocol: `obs`,
    `reward`, `done`, `metrics`) as an eqxevo `AbstractEnv`.

    A policy's action, clipped to [-1, 1], spans each actuator's control range.
    The library's `done` ends an episode (`info["terminated"]`), and so does
    `episode_length` steps (`truncated`). A step whose observation or reward is
    not finite (the physics blew up) ends the episode; its reward, and so the
    lifetime's fitness, is NaN, which `evolve` ranks worst and counts
    (`num_nonfinite`); the step's info says so (`nonfinite`). The library's
    scalar metrics are in `info`.
    """

    episode_length: eqx.AbstractVar[int]
    action_center: eqx.AbstractVar[tuple[float, ...]]
    action_scale: eqx.AbstractVar[tuple[float, ...]]

    # Unscaled positions and velocities: `run.normalize_obs = "auto"` is on.
    normalizes_obs: ClassVar[bool] = True

    @property
    @abc.abstractmethod
    def inner_env(self) -> Any:
        """The wrapped library's environment object (`reset(key)`,
        `step(state, ctrl)`)."""

    def default_params(self) -> PhysicsParams:
        """Physics environments have no params (an empty module)."""
        return PhysicsParams()

    def reset(self, key: PRNGKey, params: Any) -> tuple[Observation, PhysicsState]:
        del params
        # The libraries are not written for the strict promotion eqxevo's tests use.
        with jax.numpy_dtype_promotion("standard"):
            inner = strong_arrays(self.inner_env.reset(key))
        obs = jnp.asarray(inner.obs, jnp.float32)
        return obs, PhysicsState(inner, jnp.zeros((), jnp.int32))

    def step(
        self, key: PRNGKey, state: PhysicsState, action: Action, params: Any
    ) -> StepResult:
        # The step draws nothing from eqxevo's key (Playground's environments
        # carry their own in the state): the key is unused.
        del key, params
        unit = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        center = jnp.asarray(self.action_center, jnp.float32)
        ctrl = center + unit * jnp.asarray(self.action_scale, jnp.float32)
        with jax.numpy_dtype_promotion("standard"):
            inner = strong_arrays(self.inner_env.step(state.inner, ctrl))
        steps = state.steps + 1
        obs = jnp.asarray(inner.obs, jnp.float32)
        reward = jnp.asarray(inner.reward, jnp.float32)
        nonfinite = ~(jnp.all(jnp.isfinite(obs)) & jnp.isfinite(reward))
        terminated = (inner.done > 0) | nonfinite
        truncated = ~terminated & (steps >= self.episode_length)
        info = {
            **{
                k: jnp.asarray(v, jnp.float32)
                for k, v in inner.metrics.items()
                if jnp.ndim(v) == 0
            },
            "terminated": terminated.astype(jnp.float32),
            "truncated": truncated.astype(jnp.float32),
            "nonfinite": nonfinite.astype(jnp.float32),
        }
        # A non-finite state's reward stays NaN: the lifetime's fitness is then
        # non-finite and ranked worst (eqxevo._src.fitness.rank_nonfinite_worst).
        reward = jnp.where(nonfinite, jnp.nan, reward)
        return obs, PhysicsState(inner, steps), reward, terminated | truncated, info


__all__ = [
    "PhysicsEnv",
    "PhysicsParams",
    "PhysicsState",
    "check_episode_length",
    "control_bounds",
    "observation_shapes",
    "quiet_import",
]
