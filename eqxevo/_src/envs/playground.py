"""MuJoCo Playground's DM Control suite behind eqxevo's `AbstractEnv` (the
`playground` extra).

See docs/environments.md ("MuJoCo Playground") for what is adapted and why only
the DM Control suite: Playground's locomotion and manipulation environments
download MuJoCo Menagerie with git when first loaded.
"""

import contextlib
import functools
import importlib
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import jax

from .._checks import known_name
from .physics import (
    PhysicsEnv,
    check_episode_length,
    control_bounds,
    observation_shapes,
    quiet_import,
)

INSTALL = 'pip install "eqxevo[playground]"'
"""The command that installs what `PlaygroundEnv` needs."""

IMPL = "jax"
"""MJX's implementation eqxevo runs Playground's environments with: its
default, "warp", was 90 to 230 times slower on a CPU (measured 2026-11-28) and
is not traced through JAX's vmap and scan as eqxevo's rollouts need."""


@functools.cache
def _registry() -> Any:
    def load() -> Any:
        from mujoco_playground import registry

        return registry

    return quiet_import(load, INSTALL, "MuJoCo Playground environments")


def playground_names() -> list[str]:
    """Every environment of Playground's DM Control suite, by name."""
    return sorted(_registry().dm_control_suite.ALL_ENVS)


def check_playground_name(name: str) -> str:
    """`name` if it is in Playground's DM Control suite; else a ValueError
    with a close match (or why not, for Playground's other environments)."""
    known = playground_names()
    if name not in known and name in _registry().ALL_ENVS:
        raise ValueError(
            f"MuJoCo Playground environment {name!r} is not in its DM Control "
            "suite: it needs MuJoCo Menagerie, which Playground downloads with "
            "git when the environment is first loaded; eqxevo runs the DM "
            f"Control suite, which ships with Playground: {', '.join(known)}"
        )
    return known_name(
        name,
        known,
        f"unknown MuJoCo Playground environment {name!r}",
        prefix="playground:",
        listed="its DM Control suite",
    )


@contextlib.contextmanager
def _no_mujoco_warnings() -> Iterator[None]:
    # MuJoCo's compiler warns (CheetahRun's model uses a deprecated attribute)
    # on stdout from C and appends to MUJOCO_LOG.TXT in the working directory;
    # a warning callback of its own replaces both while a model loads.
    mujoco: Any = importlib.import_module("mujoco")  # its stubs omit these two
    previous = mujoco.get_mju_user_warning()
    mujoco.set_mju_user_warning(lambda message: None)
    try:
        yield
    finally:
        mujoco.set_mju_user_warning(previous)


@functools.cache
def _make(name: str, config: tuple[tuple[str, Any], ...]) -> Any:
    # One Playground object per (name, config), so equal PlaygroundEnvs hash
    # alike and share compiled programs.
    registry = _registry()
    defaults = registry.get_default_config(name)
    unknown = sorted(k for k, _ in config if k not in defaults)
    if unknown:
        raise ValueError(
            f"MuJoCo Playground environment {name!r} has no config key "
            f"{', '.join(map(repr, unknown))}; its keys: {', '.join(sorted(defaults))}"
        )
    overrides = dict(config)
    if overrides.get("impl", IMPL) != IMPL:
        raise ValueError(
            f"impl must be {IMPL!r} for eqxevo; got {overrides['impl']!r} "
            "(eqxevo._src.envs.playground.IMPL says why)"
        )
    if overrides.get("vision", False):
        raise ValueError(
            "vision = true gives pixel observations (a dict); eqxevo's policies "
            "take a vector"
        )
    with _no_mujoco_warnings(), jax.numpy_dtype_promotion("standard"):
        return quiet_import(
            lambda: registry.load(name, config_overrides={**overrides, "impl": IMPL}),
            INSTALL,
            "MuJoCo Playground environments",
        )


def _freeze(config: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    for key, value in config.items():
        if not isinstance(value, bool | int | float | str):
            raise ValueError(
                f"MuJoCo Playground config {key} = {value!r}: eqxevo passes "
                "numbers, booleans and strings"
            )
    return tuple(sorted(config.items()))


class PlaygroundEnv(PhysicsEnv):
    """An environment of MuJoCo Playground's DM Control suite, by name, as an
    eqxevo `AbstractEnv`, run with MJX's JAX implementation (`IMPL`).

    Arguments:
        name: a DM Control suite name ("CartpoleBalance", "CheetahRun",
            "WalkerWalk", ...; `playground_names()`).
        episode_length: an episode ends (truncated) after this many steps
            (default: the environment's config, 1000 for the suite).
        **config: overrides of the environment's config (`ctrl_dt`, `sim_dt`,
            `action_repeat`, ...; numbers, booleans and strings), passed to
            `mujoco_playground.registry.load`.

    Actions, episodes and non-finite states are adapted as `PhysicsEnv`
    describes; the suite's rewards are in [0, 1] per step.

    Example:
        >>> env = PlaygroundEnv("CartpoleBalance")
        >>> env = PlaygroundEnv("CheetahRun", episode_length=500)
    """

    name: str = eqx.field(static=True)
    episode_length: int = eqx.field(static=True)
    config: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    action_center: tuple[float, ...] = eqx.field(static=True)
    action_scale: tuple[float, ...] = eqx.field(static=True)

    def __init__(self, name: str, episode_length: int | None = None, **config: Any):
        if not isinstance(name, str):
            raise TypeError(
                f"name must be a MuJoCo Playground environment name; got {name!r}"
            )
        self.name = check_playground_name(name)
        self.config = _freeze(config)
        env = _make(self.name, self.config)
        if episode_length is None:
            episode_length = int(env._config.episode_length)
        self.episode_length = check_episode_length(episode_length)
        obs = observation_shapes(env)
        if not isinstance(obs, jax.ShapeDtypeStruct) or len(obs.shape) != 1:
            raise ValueError(
                f"MuJoCo Playground environment {name!r} observes "
                f"{jax.tree.map(lambda x: x.shape, obs)}; eqxevo's policies take "
                "a vector"
            )
        self.obs_size = int(obs.shape[0])
        self.action_size = int(env.action_size)
        model = env.mj_model
        ranges = [
            bounds if limited else (-1.0, 1.0)
            for bounds, limited in zip(
                model.actuator_ctrlrange, model.actuator_ctrllimited, strict=True
            )
        ]
        self.action_center, self.action_scale = control_bounds(ranges, self.action_size)

    @property
    def inner_env(self) -> Any:
        """The wrapped Playground environment object."""
        return _make(self.name, self.config)


__all__ = [
    "IMPL",
    "INSTALL",
    "PlaygroundEnv",
    "check_playground_name",
    "playground_names",
]
