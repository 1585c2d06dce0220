"""L2 multi-resource foraging: keep every internal reserve in balance.

A differential-drive body (see `eqxevo.envs.arena`) lives in a square arena
with `num_resources` resource types, each in `patches_per_resource` patches
placed uniformly at random. Every resource type has its own field,
`F_k(p) = sum_j amount_kj * exp(-|p - patch_kj| / length_scale)`, and feeds its
own internal reserve.

- **Reserves** `r_k` in [0, 1] start at `initial_reserve` and deplete by
  `metabolic_rate` per step. Being near a patch consumes from it:
  `eaten_kj = eat_rate * amount_kj * exp(-(d_kj / eat_radius)^2)`; reserve k
  gains `nutrition * sum_j eaten_kj` (clipped at 1). Consumption depletes the
  patch, which regrows: `amount += regrowth_rate * (1 - amount)`.
- **Homeostasis** `h = 1 - max_k |r_k - setpoint| / max(setpoint, 1 - setpoint)`
  (clipped at 0) is 1 when every reserve sits at the setpoint and 0 when one is
  empty or full: over-eating one resource is as bad as starving of another.
- **Reward** per step: `h`; when any reserve is empty the body dies: reward
  `-death_penalty` and `done`. Summed over a lifetime it rewards survival time
  and balance (the rollout resets the world after a death).
- **Observation** (`3 * num_resources`): for each resource k the log reading
  of its field at the left and right sensors (`log(max(F + sensor_noise *
  N(0, 1), detection_floor))`, see `eqxevo.envs.arena`), in order
  `[F_0 left, F_0 right, F_1 left, F_1 right, ...]`, then every reserve
  relative to the setpoint, `r_k - setpoint`.
- **Action** (2): left and right motor commands in [-1, 1].
- **Done** on death or after `episode_length` steps.

Variants are params (`ForagingParams(regrowth_rate=0.001, metabolic_rate=...)`).
Per step: `3 * K * M` distances and `exp` (two sensors and the body against
every patch), `2 K` Gaussian draws; K = 2, M = 3 by default.
"""

import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._types import Array, Float, Int, PRNGKey
from .arena import (
    AbstractArenaEnv,
    AbstractArenaParams,
    AbstractArenaState,
    Points,
    check_count,
    distances,
    drive,
    exponential_field,
    log_sensor,
    sensor_points,
)
from .base import StepResult
from .params import count, fraction, non_negative, param, positive


class AbstractFeedingParams(AbstractArenaParams):
    """Patches, feeding and homeostasis: what `Foraging` and `LongHorizon` share.

    Arguments (keyword only; rates per step): the arena and body of
    `AbstractArenaParams` (`length_scale` is the fields'), plus
        patch_spread: patches are uniform in `[-s, s]^2`, `s = patch_spread *
            arena_half`.
        eat_radius: length scale of consumption around a patch.
        eat_rate: fraction of a patch eaten per step at its centre.
        nutrition: reserve gained per unit of (nourishing) resource eaten.
        regrowth_rate: fraction of a patch's deficit regrown per step.
        metabolic_rate: reserve spent per step.
        setpoint: the reserves' ideal level.
        death_penalty: subtracted from the reward on the step a reserve empties.
    """

    length_scale: Float[Array, ""] = positive(0.3)
    patch_spread: Float[Array, ""] = fraction(0.8)
    eat_radius: Float[Array, ""] = positive(0.08)
    eat_rate: Float[Array, ""] = fraction(0.05)
    nutrition: Float[Array, ""] = non_negative(0.5)
    regrowth_rate: Float[Array, ""] = fraction(0.002)
    metabolic_rate: Float[Array, ""] = non_negative(0.001)
    setpoint: Float[Array, ""] = param(
        0.5, low=0.0, high=1.0, low_open=True, high_open=True
    )
    death_penalty: Float[Array, ""] = param(100.0)


class ForagingParams(AbstractFeedingParams):
    """Parameters of `Foraging`: every field is a scalar array (vmappable).

    Arguments (keyword only): those of `AbstractFeedingParams`, plus
        initial_reserve: every reserve's level at birth.
        episode_length: steps before the world resets.

    Each field's default and range is declared below.
    """

    initial_reserve: Float[Array, ""] = param(0.5, low=0.0, high=1.0, low_open=True)
    episode_length: Int[Array, ""] = count(5000)


def consume(
    position: Float[Array, "2"],
    patches: Float[Array, "k m 2"],
    amounts: Float[Array, "k m"],
    eat_radius: Float[Array, ""],
    eat_rate: Float[Array, ""],
    regrowth_rate: Float[Array, ""],
) -> tuple[Float[Array, " k"], Float[Array, "k m"]]:
    """Eat from nearby patches, then regrow them: `(intake per resource, amounts)`."""
    offset = patches - position
    squared = jnp.sum(offset * offset, axis=-1) / (eat_radius * eat_radius)
    eaten = eat_rate * amounts * jnp.exp(-squared)
    amounts = amounts - eaten
    amounts = amounts + regrowth_rate * (1.0 - amounts)
    return jnp.sum(eaten, axis=-1), amounts


def move_and_eat(
    position: Float[Array, "2"],
    heading: Float[Array, ""],
    patches: Float[Array, "k m 2"],
    amounts: Float[Array, "k m"],
    action: Float[Array, " action"],
    params: AbstractFeedingParams,
) -> tuple[
    Float[Array, "2"], Float[Array, ""], Float[Array, " k"], Float[Array, "k m"]
]:
    """Drive, then eat at the new position: `(position, heading, intake, amounts)`."""
    position, heading = drive(
        position,
        heading,
        action,
        params.max_speed,
        params.axle_length,
        params.arena_half,
    )
    intake, amounts = consume(
        position,
        patches,
        amounts,
        params.eat_radius,
        params.eat_rate,
        params.regrowth_rate,
    )
    return position, heading, intake, amounts


def patch_fields(
    points: Points,
    patches: Float[Array, "k m 2"],
    amounts: Float[Array, "k m"],
    length_scale: Float[Array, ""],
) -> Float[Array, "n k"]:
    """Every resource's field at `points` (noise-free)."""
    return jnp.stack(
        [
            exponential_field(points, patches[k], amounts[k], length_scale)
            for k in range(patches.shape[0])
        ],
        axis=-1,
    )


def homeostasis(
    reserves: Float[Array, " k"], setpoint: Float[Array, ""]
) -> Float[Array, ""]:
    """1 with every reserve at the setpoint, 0 with one empty or full."""
    scale = jnp.maximum(setpoint, 1.0 - setpoint)
    return jnp.maximum(1.0 - jnp.max(jnp.abs(reserves - setpoint)) / scale, 0.0)


def sense_fields(
    position: Float[Array, "2"],
    heading: Float[Array, ""],
    patches: Float[Array, "k m 2"],
    amounts: Float[Array, "k m"],
    params: AbstractFeedingParams,
    noise: Float[Array, " k2"],
) -> Float[Array, " k2"]:
    """Log readings of every field at the two sensors: `[F_0 l, F_0 r, ...]`."""
    sensors = sensor_points(
        position, heading, params.sensor_distance, params.sensor_angle
    )
    d = distances(sensors, patches.reshape(-1, 2)).reshape(2, *amounts.shape)
    values = jnp.sum(amounts * jnp.exp(-d / params.length_scale), axis=-1)  # (2, k)
    return log_sensor(
        values.T.reshape(-1), noise, params.sensor_noise, params.detection_floor
    )


def layout(
    key: PRNGKey, shape: tuple[int, int], params: AbstractFeedingParams
) -> tuple[Float[Array, ""], Float[Array, "k m 2"], Float[Array, ""]]:
    """A new world's random layout, from one uniform draw.

    Returns `(heading, patches, coin)`: a heading uniform in [-pi, pi), patch
    positions uniform in `[-s, s]^2` (`s = patch_spread * arena_half`) and a
    uniform [0, 1) number.
    """
    size = shape[0] * shape[1] * 2
    u = jr.uniform(key, (size + 2,), jnp.float32)
    spread = params.patch_spread * params.arena_half
    patches = (2.0 * u[:size].reshape(*shape, 2) - 1.0) * spread
    return 2 * math.pi * u[size] - math.pi, patches, u[size + 1]


class ForagingState(AbstractArenaState):
    """State of `Foraging`."""

    reserves: Float[Array, " k"]
    patches: Float[Array, "k m 2"]
    amounts: Float[Array, "k m"]
    time: Int[Array, ""]


class ForagingNoise(eqx.Module):
    """The random draws of one `Foraging` step: standard normal sensor noise."""

    sensor: Float[Array, " k2"]


class Foraging(AbstractArenaEnv):
    """L2 multi-resource foraging: balance `num_resources` reserves to survive.

    Arguments:
        num_resources: resource types, each with its own field and reserve (>= 2).
        patches_per_resource: patches of each type (>= 1).
        traced_param_checks: also check traced params in `reset` (see
            `eqxevo.envs.params`; off by default).

    Example:
        >>> env = Foraging(num_resources=2, patches_per_resource=3)
        >>> obs, state = env.reset(jr.key(0), env.default_params())
    """

    num_resources: int = eqx.field(static=True)
    patches_per_resource: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    field_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(
        self,
        num_resources: int = 2,
        patches_per_resource: int = 3,
        *,
        traced_param_checks: bool = False,
    ):
        self.num_resources = check_count(
            "num_resources", num_resources, 2, "a multi-resource task"
        )
        self.patches_per_resource = check_count(
            "patches_per_resource", patches_per_resource, 1
        )
        self.traced_param_checks = traced_param_checks
        self.obs_size = 3 * num_resources
        self.action_size = 2
        self.field_names = tuple(f"resource {k}" for k in range(num_resources))

    def default_params(self) -> ForagingParams:
        return ForagingParams()

    def _observe(
        self, state: ForagingState, params: ForagingParams, noise: Array
    ) -> Float[Array, " obs"]:
        fields = sense_fields(
            state.position,
            state.heading,
            state.patches,
            state.amounts,
            params,
            noise,
        )
        return jnp.concatenate([fields, state.reserves - params.setpoint])

    def reset(
        self, key: PRNGKey, params: ForagingParams
    ) -> tuple[Float[Array, " obs"], ForagingState]:
        layout_key, noise_key = jr.split(key)
        shape = (self.num_resources, self.patches_per_resource)
        heading, patches, _ = layout(layout_key, shape, params)
        heading = params.checked(heading, traced=self.traced_param_checks)
        state = ForagingState(
            position=jnp.zeros((2,), jnp.float32),
            heading=heading,
            reserves=jnp.full((self.num_resources,), params.initial_reserve),
            patches=patches,
            amounts=jnp.ones(shape, jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        noise = jr.normal(noise_key, (2 * self.num_resources,), jnp.float32)
        return self._observe(state, params, noise), state

    def sample_noise(self, key: PRNGKey, params: ForagingParams) -> ForagingNoise:
        del params
        return ForagingNoise(
            sensor=jr.normal(key, (2 * self.num_resources,), jnp.float32)
        )

    def transition(
        self,
        state: ForagingState,
        action: Float[Array, " action"],
        params: ForagingParams,
        noise: ForagingNoise,
    ) -> StepResult:
        position, heading, intake, amounts = move_and_eat(
            state.position, state.heading, state.patches, state.amounts, action, params
        )
        reserves = jnp.clip(
            state.reserves + params.nutrition * intake - params.metabolic_rate,
            0.0,
            1.0,
        )
        time = state.time + 1
        dead = jnp.any(reserves <= 0.0)
        balance = homeostasis(reserves, params.setpoint)
        reward = jnp.where(dead, -params.death_penalty, balance)
        new_state = ForagingState(
            position=position,
            heading=heading,
            reserves=reserves,
            patches=state.patches,
            amounts=amounts,
            time=time,
        )
        obs = self._observe(new_state, params, noise.sensor)
        done = dead | (time >= params.episode_length)
        info = {"homeostasis": balance, "died": dead, "intake": jnp.sum(intake)}
        return obs, new_state, reward, done, info

    def fields(
        self, state: ForagingState, params: ForagingParams, points: Points
    ) -> Float[Array, "n k"]:
        return patch_fields(points, state.patches, state.amounts, params.length_scale)

    def landmarks(self, state: ForagingState) -> Float[Array, "k m 2"]:
        return state.patches


__all__ = [
    "Foraging",
    "ForagingNoise",
    "ForagingParams",
    "ForagingState",
    "consume",
    "homeostasis",
    "layout",
    "move_and_eat",
    "patch_fields",
    "sense_fields",
]
