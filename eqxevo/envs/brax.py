"""Any Brax environment behind eqxevo's `AbstractEnv` (the `brax` extra).

See docs/environments.md ("Brax environments") for how observations, actions,
episodes and non-finite states are adapted.
"""

import contextlib
import functools
import io
import logging
import warnings
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._checks import did_you_mean
from .._types import PRNGKey
from .base import AbstractEnv, Action, Observation, StepResult, strong_arrays

INSTALL = 'pip install "eqxevo[brax]"'
"""The command that installs what `BraxEnv` needs."""


@functools.cache
def _brax_envs() -> Any:
    # Importing mujoco's MJX prints two lines about the optional `warp` package,
    # and Brax warns on every model it loads that it is no longer maintained:
    # neither is actionable for an eqxevo user.
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
                import brax.envs as brax_envs
            finally:
                logging.disable(logging.NOTSET)
    except ImportError as err:
        raise ImportError(
            f"Brax environments need brax, an optional dependency: {INSTALL} ({err})"
        ) from err
    return brax_envs


BACKENDS = ("mjx", "spring", "positional", "generalized")
"""Brax's physics pipelines, by the name `backend` takes."""


def brax_names() -> list[str]:
    """Every environment Brax registers, by name."""
    return sorted(_brax_envs()._envs)


def check_brax_name(name: str) -> str:
    """`name` if Brax registers it; else a ValueError with a close match."""
    known = brax_names()
    if name in known:
        return name
    raise ValueError(
        f"unknown Brax environment {name!r}"
        + did_you_mean(name, known, prefix="brax:", quote=True)
        + f"; Brax registers: {', '.join(known)}"
    )


@functools.cache
def _make(name: str, backend: str, kwargs: tuple[tuple[str, Any], ...]) -> Any:
    # One Brax object per (name, backend, arguments), so equal BraxEnvs hash
    # alike and share compiled programs.
    brax_envs = _brax_envs()
    # Brax is not written for the strict promotion eqxevo's tests use.
    with warnings.catch_warnings(), jax.numpy_dtype_promotion("standard"):
        warnings.simplefilter("ignore", UserWarning)
        try:
            return brax_envs.get_environment(name, backend=backend, **dict(kwargs))
        except TypeError as err:
            raise ValueError(
                f"Brax environment {name!r} does not take these arguments "
                f"{dict(kwargs)}: {err}"
            ) from err


class BraxParams(eqx.Module):
    """A Brax environment's params: none (its options are fixed at construction)."""


class BraxState(eqx.Module):
    """A Brax episode: Brax's own state and the steps taken in this episode."""

    inner: Any
    steps: jax.Array


class BraxEnv(AbstractEnv):
    """A Brax environment, by name, as an eqxevo `AbstractEnv`.

    Arguments:
        name: a name Brax registers ("ant", "hopper", "inverted_pendulum", ...;
            `brax_names()`).
        backend: Brax's physics pipeline, one of `BACKENDS` (default "mjx",
            MuJoCo's own: "spring" is faster but approximate, and SNES did not
            balance inverted_pendulum on it; docs/environments.md).
        episode_length: an episode ends (truncated) after this many steps, as
            Brax's own training wrapper ends it (default 1000).
        **kwargs: the environment's own keyword arguments (e.g. Ant's
            `ctrl_cost_weight`), passed to `brax.envs.get_environment`.

    A policy's action, clipped to [-1, 1], spans each actuator's control range.
    A step whose state is not finite (the physics blew up) ends the episode;
    its reward, and so the lifetime's fitness, is NaN, which `evolve` ranks
    worst and counts (`num_nonfinite`); the step's info says so
    (`nonfinite`).

    Example:
        >>> env = BraxEnv("inverted_pendulum")
        >>> env = BraxEnv("ant", backend="mjx", episode_length=1000)
    """

    name: str = eqx.field(static=True)
    backend: str = eqx.field(static=True)
    episode_length: int = eqx.field(static=True)
    kwargs: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    action_center: tuple[float, ...] = eqx.field(static=True)
    action_scale: tuple[float, ...] = eqx.field(static=True)

    # Unscaled positions and velocities: `run.normalize_obs = "auto"` is on.
    normalizes_obs: ClassVar[bool] = True

    def __init__(
        self,
        name: str,
        backend: str = "mjx",
        episode_length: int = 1000,
        **kwargs: Any,
    ):
        if not isinstance(name, str):
            raise TypeError(f"name must be a Brax environment name; got {name!r}")
        if backend not in BACKENDS:
            raise ValueError(
                f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}"
                + did_you_mean(str(backend), BACKENDS, quote=True)
            )
        if (
            isinstance(episode_length, bool)
            or not isinstance(episode_length, int)
            or episode_length < 1
        ):
            raise ValueError(
                f"episode_length must be an int >= 1; got {episode_length!r}"
            )
        self.name = check_brax_name(name)
        self.backend = backend
        self.episode_length = episode_length
        self.kwargs = tuple(sorted(kwargs.items()))
        env = _make(self.name, backend, self.kwargs)
        with jax.numpy_dtype_promotion("standard"):  # Brax's sizes trace a reset
            self.obs_size = int(env.observation_size)
            self.action_size = int(env.action_size)
        # A policy's [-1, 1] spans each actuator's control range (inverted
        # pendulum's is [-3, 3]; most are [-1, 1], where the map is the identity).
        bounds = np.asarray(env.sys.actuator.ctrl_range, np.float64).reshape(-1, 2)
        if bounds.shape[0] != self.action_size or not np.all(np.isfinite(bounds)):
            bounds = np.tile([-1.0, 1.0], (self.action_size, 1))
        self.action_center = tuple(float(x) for x in bounds.mean(axis=1))
        self.action_scale = tuple(float(x) for x in (bounds[:, 1] - bounds[:, 0]) / 2)

    @property
    def brax_env(self) -> Any:
        """The wrapped Brax environment object."""
        return _make(self.name, self.backend, self.kwargs)

    def default_params(self) -> BraxParams:
        """Brax environments have no params (an empty module)."""
        return BraxParams()

    def reset(self, key: PRNGKey, params: Any) -> tuple[Observation, BraxState]:
        del params
        with jax.numpy_dtype_promotion("standard"):
            inner = strong_arrays(self.brax_env.reset(key))
        obs = jnp.asarray(inner.obs, jnp.float32)
        return obs, BraxState(inner, jnp.zeros((), jnp.int32))

    def step(
        self, key: PRNGKey, state: BraxState, action: Action, params: Any
    ) -> StepResult:
        # Brax's step draws nothing: the key is unused.
        del key, params
        unit = jnp.clip(jnp.asarray(action, jnp.float32), -1.0, 1.0)
        center = jnp.asarray(self.action_center, jnp.float32)
        ctrl = center + unit * jnp.asarray(self.action_scale, jnp.float32)
        with jax.numpy_dtype_promotion("standard"):
            inner = strong_arrays(self.brax_env.step(state.inner, ctrl))
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
        # non-finite and ranked worst (eqxevo.fitness.rank_nonfinite_worst).
        reward = jnp.where(nonfinite, jnp.nan, reward)
        return obs, BraxState(inner, steps), reward, terminated | truncated, info


__all__ = ["BACKENDS", "INSTALL", "BraxEnv", "BraxParams", "BraxState", "brax_names"]
