"""The 2-D arena of the milestone environments (L0, L2, L4): body, sensors, fields.

Every arena environment shares one body and one kind of field:

- **Body**: a differential-drive vehicle at `position` (x, y) with `heading`
  (radians, wrapped to [-pi, pi)). An action is two motor commands in [-1, 1]
  (left, right), clipped; wheel speeds are `max_speed * command`. The body moves
  `(v_left + v_right) / 2` forward along its new heading and turns by
  `(v_right - v_left) / axle_length` radians per step. Walls clip the position
  to the square `[-arena_half, arena_half]^2`.
- **Sensors**: two, at `sensor_distance` from the body's centre, at
  `heading + sensor_angle` (left) and `heading - sensor_angle` (right).
- **Sensing**: logarithmic (Weber-Fechner): a sensor reading is
  `log(max(value + sensor_noise * N(0, 1), detection_floor))`, so the
  difference between the two sensors is the relative contrast of the field,
  whatever its level, while additive noise drowns weak fields far from their
  sources.
- **Fields**: analytic, no grids: a field is a sum over its sources of
  `amount * exp(-distance / length_scale)`, the radial profile of a substance
  diffusing from a point source and decaying as it spreads. Evaluating a field at
  a point costs one distance and one `exp` per source.

An arena environment is an `AbstractArenaEnv`: on top of `AbstractEnv` it can
evaluate its fields anywhere (for pictures) and tell where the body is, and its
step is split into `sample_noise(key, params)` (every random draw of one step)
and the deterministic `transition(state, action, params, noise)`, so a
reference implementation can replay a step exactly. Its params extend
`AbstractArenaParams`: the body, the sensors and the fields' length scale.
"""

import abc
import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float, PRNGKey
from .base import AbstractEnv, EnvParams, EnvState, StepResult
from .params import AbstractParams, non_negative, param, positive

EnvNoise = Any
"""The random draws of one step (an Equinox module of arrays)."""

Points = Float[Array, "n 2"]


def drive(
    position: Float[Array, "2"],
    heading: Float[Array, ""],
    action: Float[Array, " action"],
    max_speed: Float[Array, ""],
    axle_length: Float[Array, ""],
    arena_half: Float[Array, ""],
) -> tuple[Float[Array, "2"], Float[Array, ""]]:
    """Differential drive: motor commands (left, right) in [-1, 1] -> new pose."""
    command = jnp.clip(action[:2], -1.0, 1.0)
    left = command[0] * max_speed
    right = command[1] * max_speed
    heading = wrap_angle(heading + (right - left) / axle_length)
    speed = 0.5 * (left + right)
    step = speed * jnp.stack([jnp.cos(heading), jnp.sin(heading)])
    position = jnp.clip(position + step, -arena_half, arena_half)
    return position, heading


def wrap_angle(angle: Float[Array, "*shape"]) -> Float[Array, "*shape"]:
    """Wrap radians to [-pi, pi)."""
    return jnp.mod(angle + math.pi, 2 * math.pi) - math.pi


def sensor_points(
    position: Float[Array, "2"],
    heading: Float[Array, ""],
    sensor_distance: Float[Array, ""],
    sensor_angle: Float[Array, ""],
) -> Float[Array, "2 2"]:
    """Positions of the (left, right) sensors."""
    angles = jnp.stack([heading + sensor_angle, heading - sensor_angle])
    offsets = jnp.stack([jnp.cos(angles), jnp.sin(angles)], axis=-1)
    return position + sensor_distance * offsets


def log_sensor(
    values: Float[Array, " n"],
    noise: Float[Array, " n"],
    sensor_noise: Float[Array, ""],
    detection_floor: Float[Array, ""],
) -> Float[Array, " n"]:
    """Log readings: `log(max(values + sensor_noise * noise, detection_floor))`."""
    return jnp.log(jnp.maximum(values + sensor_noise * noise, detection_floor))


def distances(points: Points, sources: Float[Array, "m 2"]) -> Float[Array, "n m"]:
    """Euclidean distance from every point to every source."""
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
    above, below = position > bound, position < -bound
    position = jnp.where(above, 2 * bound - position, position)
    position = jnp.where(below, -2 * bound - position, position)
    velocity = jnp.where(above | below, -velocity, velocity)
    return position, velocity


def check_count(name: str, value: Any, minimum: int, why: str = "") -> int:
    """`value` if it is a Python int >= `minimum`, else a `ValueError` naming it."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        because = f" ({why})" if why else ""
        raise ValueError(f"{name} must be an int >= {minimum}{because}; got {value!r}")
    return value


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

    Each field's default and range is declared below (see `eqxevo.envs.params`).
    """

    arena_half: Float[Array, ""] = positive(1.0)
    max_speed: Float[Array, ""] = positive(0.01)
    axle_length: Float[Array, ""] = positive(0.05)
    sensor_distance: Float[Array, ""] = non_negative(0.1)
    sensor_angle: Float[Array, ""] = param(1.0, low=-math.pi, high=math.pi)
    length_scale: Float[Array, ""] = positive(0.5)
    sensor_noise: Float[Array, ""] = non_negative(0.005)
    detection_floor: Float[Array, ""] = positive(1e-3)


class AbstractArenaState(eqx.Module):
    """An arena environment's state: where the body is, which way it faces."""

    position: Float[Array, "2"]
    heading: Float[Array, ""]


class AbstractArenaEnv(AbstractEnv):
    """An environment whose agent is a body in the 2-D arena.

    Beyond `AbstractEnv`, members provide what pictures and reference
    implementations need: `field_names`, `fields`, `position`, `heading`,
    `arena_half`, `landmarks`, `sample_noise` and `transition` (`position`,
    `heading` and `arena_half` read an `AbstractArenaState` and an
    `AbstractArenaParams`). Their `step` is
    `transition(state, action, params, sample_noise(key, params))`.

    Every member takes `traced_param_checks` (keyword, default False): check
    traced params in `reset` with `eqx.branched_error_if` (see
    `eqxevo.envs.params`). Concrete params are always checked.
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
        self,
        state: EnvState,
        action: Float[Array, " action"],
        params: EnvParams,
        noise: EnvNoise,
    ) -> StepResult:
        """The deterministic step given its random draws."""

    def step(
        self,
        key: PRNGKey,
        state: EnvState,
        action: Float[Array, " action"],
        params: EnvParams,
    ) -> StepResult:
        return self.transition(state, action, params, self.sample_noise(key, params))


__all__ = [
    "AbstractArenaEnv",
    "AbstractArenaParams",
    "AbstractArenaState",
    "check_count",
    "distances",
    "drive",
    "exponential_field",
    "log_sensor",
    "reflect",
    "sensor_points",
    "wrap_angle",
]
