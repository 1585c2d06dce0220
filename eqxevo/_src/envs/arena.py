"""The 2-D arena of the milestone environments (L0, L2, L4): body, sensors, fields.

See docs/environments.md ("The arena") for the model.
"""

import abc
import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float, PRNGKey
from .base import AbstractEnv, Action, EnvParams, EnvState, StepResult
from .params import AbstractParams, non_negative, param, positive

EnvNoise = Any
"""The random draws of one step (an Equinox module of arrays)."""

Points = Float[Array, "n 2"]
"""Points of the arena, one (x, y) per row."""


class AbstractArenaParams(AbstractParams):
    """The body, its sensors and the fields' profile: every arena env's params.

    Arguments (keyword only; lengths in arena units, times in steps):
        arena_half: half the side of the square arena.
        max_speed: wheel speed at a motor command of 1, per step.
        axle_length: distance between the wheels; sets the turning rate.
        sensor_distance: the sensors' distance from the body's centre.
        sensor_angle: the sensors' angle either side of the heading, radians.
        length_scale: the fields' length scale.
        sensor_noise: standard deviation of the additive noise on each sensor's
            reading, before the log.
        detection_floor: the lowest value a sensor reports.

    Each field's default and range is declared below (`eqxevo._src.envs.params`).
    """

    arena_half: Float[Array, ""] = positive(1.0)
    max_speed: Float[Array, ""] = positive(0.01)
    axle_length: Float[Array, ""] = positive(0.05)
    sensor_distance: Float[Array, ""] = non_negative(0.1)
    sensor_angle: Float[Array, ""] = param(1.0, low=-math.pi, high=math.pi)
    length_scale: Float[Array, ""] = positive(0.5)
    sensor_noise: Float[Array, ""] = non_negative(0.005)
    detection_floor: Float[Array, ""] = positive(1e-3)


def drive(
    position: Float[Array, "2"],
    heading: Float[Array, ""],
    action: Action,
    params: AbstractArenaParams,
) -> tuple[Float[Array, "2"], Float[Array, ""]]:
    """Differential drive: motor commands (left, right) in [-1, 1] -> new pose."""
    # Only the first two outputs drive: a policy may output more.
    command = jnp.clip(action[:2], -1.0, 1.0)
    left = command[0] * params.max_speed
    right = command[1] * params.max_speed
    # Turn first, then move along the new heading (one explicit Euler step).
    heading = wrap_angle(heading + (right - left) / params.axle_length)
    speed = 0.5 * (left + right)
    step = speed * jnp.stack([jnp.cos(heading), jnp.sin(heading)])
    position = jnp.clip(position + step, -params.arena_half, params.arena_half)
    return position, heading


def wrap_angle(angle: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Wrap radians to [-pi, pi)."""
    return jnp.mod(angle + math.pi, 2 * math.pi) - math.pi


def sensor_points(
    position: Float[Array, "2"], heading: Float[Array, ""], params: AbstractArenaParams
) -> Float[Array, "2 2"]:
    """Positions of the (left, right) sensors."""
    angle = params.sensor_angle
    angles = jnp.stack([heading + angle, heading - angle])
    offsets = jnp.stack([jnp.cos(angles), jnp.sin(angles)], axis=-1)
    return position + params.sensor_distance * offsets


def log_sensor(
    values: Float[Array, " n"], noise: Float[Array, " n"], params: AbstractArenaParams
) -> Float[Array, " n"]:
    """Log readings: `log(max(values + sensor_noise * noise, detection_floor))`."""
    # Weber-Fechner: the difference of two readings is the field's relative
    # contrast whatever its level, while additive noise drowns weak fields.
    noisy = values + params.sensor_noise * noise
    return jnp.log(jnp.maximum(noisy, params.detection_floor))


def body_frame(
    points: Points, position: Float[Array, "2"], heading: Float[Array, ""]
) -> Points:
    """`points` relative to the body: (ahead, to the left) along its heading."""
    d = points - position
    cos, sin = jnp.cos(heading), jnp.sin(heading)
    return jnp.stack([d[:, 0] * cos + d[:, 1] * sin, d[:, 1] * cos - d[:, 0] * sin], -1)


def distances(points: Points, sources: Float[Array, "m 2"]) -> Float[Array, "n m"]:
    """Euclidean distance from every point to every source."""
    # Broadcast to (n, m, 2): every point against every source at once.
    diff = points[:, None, :] - sources[None, :, :]
    return jnp.sqrt(jnp.sum(diff * diff, axis=-1))


def exponential_field(
    points: Points,
    sources: Float[Array, "m 2"],
    amounts: Float[Array, " m"],
    length_scale: Float[Array, ""],
) -> Float[Array, " n"]:
    """`sum_j amounts[j] * exp(-|point - sources[j]| / length_scale)` per point."""
    return jnp.sum(
        amounts * jnp.exp(-distances(points, sources) / length_scale), axis=-1
    )


def reflect(
    position: Float[Array, "2"], velocity: Float[Array, "2"], bound: Float[Array, ""]
) -> tuple[Float[Array, "2"], Float[Array, "2"]]:
    """Reflect a point moving with `velocity` off the walls of `[-bound, bound]^2`."""
    # One reflection per wall suffices: a step is far shorter than the arena.
    above, below = position > bound, position < -bound
    position = jnp.where(above, 2 * bound - position, position)
    position = jnp.where(below, -2 * bound - position, position)
    velocity = jnp.where(above | below, -velocity, velocity)
    return position, velocity


class AbstractArenaState(eqx.Module):
    """An arena environment's state: where the body is, which way it faces."""

    position: Float[Array, "2"]
    heading: Float[Array, ""]


class SensorNoise(eqx.Module):
    """The random draws of a step that draws only sensor noise (standard normal)."""

    sensor: Float[Array, " sensors"]


class AbstractArenaEnv(AbstractEnv):
    """An environment whose agent is a body in the 2-D arena.

    Beyond `AbstractEnv`, members provide what pictures and reference
    implementations need: `field_names`, `fields`, `position`, `heading`,
    `arena_half`, `landmarks`, `sample_noise` and `transition` (`position`,
    `heading` and `arena_half` read an `AbstractArenaState` and an
    `AbstractArenaParams`). Their `step` is
    `transition(state, action, params, sample_noise(key, params))`.

    Every member takes `traced_param_checks` (keyword, default False): check
    traced params in `reset` with `eqx.branched_error_if` (docs/environments.md,
    "Params"). Concrete params are always checked.
    """

    field_names: eqx.AbstractVar[tuple[str, ...]]
    traced_param_checks: bool = eqx.field(static=True, default=False, kw_only=True)

    @abc.abstractmethod
    def fields(
        self, state: EnvState, params: EnvParams, points: Points
    ) -> Float[Array, "n fields"]:
        """Every field's value at `points` in `state` (noise-free)."""

    def position(self, state: AbstractArenaState) -> Float[Array, "2"]:
        """Where the body is."""
        return state.position

    def heading(self, state: AbstractArenaState) -> Float[Array, ""]:
        """Which way the body faces (radians)."""
        return state.heading

    def arena_half(self, params: AbstractArenaParams) -> Float[Array, ""]:
        """Half the side of the square arena."""
        return params.arena_half

    @abc.abstractmethod
    def landmarks(self, state: EnvState) -> Float[Array, "fields m 2"]:
        """Positions worth marking in a picture, per field (sources, patches)."""

    def field_labels(self, state: EnvState) -> tuple[str, ...]:
        """Titles of the fields' panels in a picture of `state` (concrete)."""
        del state
        return self.field_names

    @abc.abstractmethod
    def sample_noise(self, key: PRNGKey, params: EnvParams) -> EnvNoise:
        """Every random draw one `step` makes."""

    @abc.abstractmethod
    def transition(
        self, state: EnvState, action: Action, params: EnvParams, noise: EnvNoise
    ) -> StepResult:
        """The deterministic step given its random draws."""

    def step(
        self, key: PRNGKey, state: EnvState, action: Action, params: EnvParams
    ) -> StepResult:
        # One home for the step's randomness, so a reference can replay it.
        return self.transition(state, action, params, self.sample_noise(key, params))


__all__ = [
    "AbstractArenaEnv",
    "AbstractArenaParams",
    "AbstractArenaState",
    "SensorNoise",
    "body_frame",
    "distances",
    "drive",
    "exponential_field",
    "log_sensor",
    "reflect",
    "sensor_points",
    "wrap_angle",
]
