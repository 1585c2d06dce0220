"""Any Brax environment behind eqxevo's `AbstractEnv` (the `brax` extra).

See docs/environments.md ("Brax environments") for how observations, actions,
episodes and non-finite states are adapted.
"""

import functools
import warnings
from typing import Any

import equinox as eqx
import jax

from .._checks import did_you_mean, known_name
from .physics import (
    PhysicsEnv,
    check_episode_length,
    control_bounds,
    observation_shapes,
    quiet_import,
)

INSTALL = 'pip install "eqxevo[brax]"'
"""The command that installs what `BraxEnv` needs."""


@functools.cache
def _brax_envs() -> Any:
    def load() -> Any:
        import brax.envs as brax_envs

        return brax_envs

    return quiet_import(load, INSTALL, "Brax environments")


BACKENDS = ("mjx", "spring", "positional", "generalized")
"""Brax's physics pipelines, by the name `backend` takes."""


def brax_names() -> list[str]:
    """Every environment Brax registers, by name."""
    return sorted(_brax_envs()._envs)


def check_brax_name(name: str) -> str:
    """`name` if Brax registers it; else a ValueError with a close match."""
    return known_name(
        name,
        brax_names(),
        f"unknown Brax environment {name!r}",
        prefix="brax:",
        listed="Brax registers",
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


class BraxEnv(PhysicsEnv):
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

    Actions, episodes and non-finite states are adapted as `PhysicsEnv`
    describes.

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
        self.name = check_brax_name(name)
        self.backend = backend
        self.episode_length = check_episode_length(episode_length)
        self.kwargs = tuple(sorted(kwargs.items()))
        env = _make(self.name, backend, self.kwargs)
        self.obs_size = int(observation_shapes(env).shape[-1])
        self.action_size = int(env.action_size)
        # A policy's [-1, 1] spans each actuator's control range (inverted
        # pendulum's is [-3, 3]; most are [-1, 1], where the map is the identity).
        self.action_center, self.action_scale = control_bounds(
            env.sys.actuator.ctrl_range, self.action_size
        )

    @property
    def inner_env(self) -> Any:
        """The wrapped Brax environment object."""
        return _make(self.name, self.backend, self.kwargs)


__all__ = ["BACKENDS", "INSTALL", "BraxEnv", "brax_names", "check_brax_name"]
