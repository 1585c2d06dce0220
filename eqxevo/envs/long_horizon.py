"""L4 long horizon: a lifetime of seasons whose rules change, so learning pays.

The arena, body, fields and feeding are those of L2 (`eqxevo.envs.foraging`)
with two resource types, A and B, and one energy reserve. In every season one
type nourishes (`energy += nutrition * eaten`) and the other harms
(`energy -= toxicity * eaten`); which is which is drawn at birth and, at every
season boundary (every `season_length` steps), swaps with probability
`swap_prob`; each patch also relocates (to a fresh, full patch at a uniform
position) with probability `relocate_prob`. Nothing in the observation says
which type nourishes: the agent finds out by tasting, so a policy that learns
within its lifetime (plasticity, memory) beats any fixed reflex, which is
right in some seasons and poisoned in the others.

- **Observation** (6): log readings of fields A and B at the left and right
  sensors (as in L2), `[A l, A r, B l, B r]`; energy relative to the setpoint; and
  the taste of the step, `clip(taste_gain * net energy gained from eating, -1,
  1)` (positive: nourishing, negative: harmful).
- **Action** (2): left and right motor commands in [-1, 1].
- **Reward** per step: the homeostasis of the energy reserve (1 at the setpoint,
  0 empty or full); when energy empties the body dies: reward `-death_penalty`,
  and it is reborn at a random place with `initial_energy`. The world, its
  seasons and its clock carry on: a death is a cost, never a way to reset the
  rules. The lifetime's fitness is the total reward.
- **Done** only after `episode_length` steps (by default 20,000: the whole
  lifetime).

Per step: as L2 with K = 2, plus one uniform vector of `6 M + 4` draws (season
swap, relocations, rebirth) and four Gaussian draws.
"""

import math
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._types import Array, Bool, Float, Int, PRNGKey, Scalar
from .arena import (
    AbstractArenaEnv,
    Points,
    drive,
    exponential_field,
    scalar_param,
)
from .base import check_params
from .foraging import (
    consume,
    homeostasis,
    invalid_feeding,
    layout,
    sense_fields,
)

NUM_RESOURCES = 2


class LongHorizonParams(eqx.Module):
    """Parameters of `LongHorizon`; every field is a scalar array (vmappable).

    Arguments (keyword-only): as `ForagingParams` for the arena, body, fields and
    feeding (`nutrition` for the nourishing type), plus:
        toxicity: energy lost per unit eaten of the harmful type (>= 0).
        initial_energy: energy at birth and rebirth (in (0, 1]).
        taste_gain: scale of the taste signal (>= 0).
        season_length: steps per season (>= 1).
        swap_prob: probability that the types swap roles at a season boundary.
        relocate_prob: probability that a patch relocates at a season boundary.
        episode_length: steps in the lifetime (>= 1).
    """

    arena_half: Float[Array, ""]
    max_speed: Float[Array, ""]
    axle_length: Float[Array, ""]
    sensor_distance: Float[Array, ""]
    sensor_angle: Float[Array, ""]
    length_scale: Float[Array, ""]
    sensor_noise: Float[Array, ""]
    detection_floor: Float[Array, ""]
    patch_spread: Float[Array, ""]
    eat_radius: Float[Array, ""]
    eat_rate: Float[Array, ""]
    nutrition: Float[Array, ""]
    toxicity: Float[Array, ""]
    regrowth_rate: Float[Array, ""]
    metabolic_rate: Float[Array, ""]
    setpoint: Float[Array, ""]
    initial_energy: Float[Array, ""]
    death_penalty: Float[Array, ""]
    taste_gain: Float[Array, ""]
    season_length: Int[Array, ""]
    swap_prob: Float[Array, ""]
    relocate_prob: Float[Array, ""]
    episode_length: Int[Array, ""]

    def __init__(
        self,
        *,
        arena_half: Any = 1.0,
        max_speed: Any = 0.01,
        axle_length: Any = 0.05,
        sensor_distance: Any = 0.1,
        sensor_angle: Any = 1.0,
        length_scale: Any = 0.3,
        sensor_noise: Any = 0.005,
        detection_floor: Any = 1e-3,
        patch_spread: Any = 0.8,
        eat_radius: Any = 0.08,
        eat_rate: Any = 0.05,
        nutrition: Any = 0.5,
        toxicity: Any = 0.5,
        regrowth_rate: Any = 0.002,
        metabolic_rate: Any = 0.001,
        setpoint: Any = 0.5,
        initial_energy: Any = 0.5,
        death_penalty: Any = 100.0,
        taste_gain: Any = 40.0,
        season_length: Any = 2000,
        swap_prob: Any = 1.0,
        relocate_prob: Any = 1.0,
        episode_length: Any = 20000,
    ):
        self.arena_half = scalar_param("arena_half", arena_half, low=0.0, low_open=True)
        self.max_speed = scalar_param("max_speed", max_speed, low=0.0, low_open=True)
        self.axle_length = scalar_param(
            "axle_length", axle_length, low=0.0, low_open=True
        )
        self.sensor_distance = scalar_param("sensor_distance", sensor_distance, low=0.0)
        self.sensor_angle = scalar_param(
            "sensor_angle", sensor_angle, low=-math.pi, high=math.pi
        )
        self.length_scale = scalar_param(
            "length_scale", length_scale, low=0.0, low_open=True
        )
        self.sensor_noise = scalar_param("sensor_noise", sensor_noise, low=0.0)
        self.detection_floor = scalar_param(
            "detection_floor", detection_floor, low=0.0, low_open=True
        )
        self.patch_spread = scalar_param(
            "patch_spread", patch_spread, low=0.0, high=1.0
        )
        self.eat_radius = scalar_param("eat_radius", eat_radius, low=0.0, low_open=True)
        self.eat_rate = scalar_param("eat_rate", eat_rate, low=0.0, high=1.0)
        self.nutrition = scalar_param("nutrition", nutrition, low=0.0)
        self.toxicity = scalar_param("toxicity", toxicity, low=0.0)
        self.regrowth_rate = scalar_param(
            "regrowth_rate", regrowth_rate, low=0.0, high=1.0
        )
        self.metabolic_rate = scalar_param("metabolic_rate", metabolic_rate, low=0.0)
        self.setpoint = scalar_param(
            "setpoint", setpoint, low=0.0, low_open=True, high=1.0, high_open=True
        )
        self.initial_energy = scalar_param(
            "initial_energy", initial_energy, low=0.0, low_open=True, high=1.0
        )
        self.death_penalty = scalar_param("death_penalty", death_penalty)
        self.taste_gain = scalar_param("taste_gain", taste_gain, low=0.0)
        self.season_length = scalar_param(
            "season_length", season_length, dtype=jnp.int32, low=1
        )
        self.swap_prob = scalar_param("swap_prob", swap_prob, low=0.0, high=1.0)
        self.relocate_prob = scalar_param(
            "relocate_prob", relocate_prob, low=0.0, high=1.0
        )
        self.episode_length = scalar_param(
            "episode_length", episode_length, dtype=jnp.int32, low=1
        )


class LongHorizonState(eqx.Module):
    """State of `LongHorizon`.

    Attributes:
        good: which resource type nourishes this season (0 is A, 1 is B).
        taste: the last step's taste signal (part of the observation).
        time: steps since the lifetime began (deaths do not reset it).
    """

    position: Float[Array, "2"]
    heading: Float[Array, ""]
    energy: Float[Array, ""]
    patches: Float[Array, "2 m 2"]
    amounts: Float[Array, "2 m"]
    good: Int[Array, ""]
    taste: Float[Array, ""]
    time: Int[Array, ""]


class LongHorizonNoise(eqx.Module):
    """The random draws of one `LongHorizon` step.

    Attributes:
        sensor: standard normal sensor noise.
        swap, relocate: uniform [0, 1) draws compared with `swap_prob` and
            `relocate_prob` at a season boundary.
        patches: uniform [-1, 1) positions of relocated patches (scaled by the
            patch spread).
        rebirth: uniform [-1, 1) position and heading (scaled by the spread and
            by pi) of a body reborn this step.
    """

    sensor: Float[Array, "4"]
    swap: Float[Array, ""]
    relocate: Float[Array, "2 m"]
    patches: Float[Array, "2 m 2"]
    rebirth: Float[Array, "3"]


class LongHorizon(AbstractArenaEnv):
    """L4 long horizon: which of two resources nourishes changes with the seasons.

    Arguments:
        patches_per_resource: patches of each of the two types (>= 1).

    Example:
        >>> env = LongHorizon()
        >>> fitness, summary = eqxevo.rollout(jr.key(0), policy, env,
        ...                                   env.default_params(), 20_000)
    """

    patches_per_resource: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    field_names: tuple[str, ...] = eqx.field(static=True)

    def __init__(self, patches_per_resource: int = 3):
        if not isinstance(patches_per_resource, int) or patches_per_resource < 1:
            raise ValueError(
                f"patches_per_resource must be a positive int; got "
                f"{patches_per_resource!r}"
            )
        self.patches_per_resource = patches_per_resource
        self.obs_size = 2 * NUM_RESOURCES + 2
        self.action_size = 2
        self.field_names = ("resource A", "resource B")

    def default_params(self) -> LongHorizonParams:
        return LongHorizonParams()

    def _observe(
        self, state: LongHorizonState, params: LongHorizonParams, noise: Array
    ) -> Float[Array, " obs"]:
        fields = sense_fields(
            state.position, state.heading, state.patches, state.amounts, params, noise
        )
        internal = jnp.stack([state.energy - params.setpoint, state.taste])
        return jnp.concatenate([fields, internal])

    def reset(
        self, key: PRNGKey, params: LongHorizonParams
    ) -> tuple[Float[Array, " obs"], LongHorizonState]:
        layout_key, noise_key = jr.split(key)
        shape = (NUM_RESOURCES, self.patches_per_resource)
        heading, patches, coin = layout(layout_key, shape, params)
        invalid = invalid_feeding(params) | (params.season_length < 1)
        heading = check_params(
            heading,
            invalid,
            "LongHorizon: invalid params (need arena_half, axle_length, length_scale, "
            "eat_radius, detection_floor > 0, sensor_noise >= 0, 0 < setpoint < 1, "
            "season_length >= 1, episode_length >= 1)",
        )
        state = LongHorizonState(
            position=jnp.zeros((2,), jnp.float32),
            heading=heading,
            energy=params.initial_energy,
            patches=patches,
            amounts=jnp.ones(shape, jnp.float32),
            good=(coin < 0.5).astype(jnp.int32),
            taste=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
        )
        noise = jr.normal(noise_key, (2 * NUM_RESOURCES,), jnp.float32)
        return self._observe(state, params, noise), state

    def sample_noise(self, key: PRNGKey, params: LongHorizonParams) -> LongHorizonNoise:
        del params
        m = self.patches_per_resource
        normal_key, uniform_key = jr.split(key)
        u = jr.uniform(uniform_key, (1 + 2 * m + 4 * m + 3,), jnp.float32)
        return LongHorizonNoise(
            sensor=jr.normal(normal_key, (2 * NUM_RESOURCES,), jnp.float32),
            swap=u[0],
            relocate=u[1 : 1 + 2 * m].reshape(2, m),
            patches=2.0 * u[1 + 2 * m : 1 + 6 * m].reshape(2, m, 2) - 1.0,
            rebirth=2.0 * u[1 + 6 * m :] - 1.0,
        )

    def transition(
        self,
        state: LongHorizonState,
        action: Float[Array, " action"],
        params: LongHorizonParams,
        noise: LongHorizonNoise,
    ) -> tuple[
        Float[Array, " obs"],
        LongHorizonState,
        Scalar,
        Bool[Array, ""],
        dict[str, Array],
    ]:
        position, heading = drive(
            state.position,
            state.heading,
            action,
            params.max_speed,
            params.axle_length,
            params.arena_half,
        )
        intake, amounts = consume(
            position,
            state.patches,
            state.amounts,
            params.eat_radius,
            params.eat_rate,
            params.regrowth_rate,
        )
        good_is_a = state.good == 0
        nourishing = jnp.where(good_is_a, intake[0], intake[1])
        harmful = jnp.where(good_is_a, intake[1], intake[0])
        gained = params.nutrition * nourishing - params.toxicity * harmful
        energy = jnp.clip(state.energy + gained - params.metabolic_rate, 0.0, 1.0)
        taste = jnp.clip(params.taste_gain * gained, -1.0, 1.0)
        time = state.time + 1

        # Season boundary: roles may swap, patches may relocate (fresh and full).
        boundary = (time % params.season_length) == 0
        swap = boundary & (noise.swap < params.swap_prob)
        good = jnp.where(swap, 1 - state.good, state.good)
        spread = params.patch_spread * params.arena_half
        moved = boundary & (noise.relocate < params.relocate_prob)
        patches = jnp.where(moved[..., None], noise.patches * spread, state.patches)
        amounts = jnp.where(moved, 1.0, amounts)

        # Death costs death_penalty; the body is reborn, the world carries on.
        dead = energy <= 0.0
        balance = homeostasis(energy[None], params.setpoint)
        reward = jnp.where(dead, -params.death_penalty, balance)
        position = jnp.where(dead, noise.rebirth[:2] * spread, position)
        heading = jnp.where(dead, noise.rebirth[2] * math.pi, heading)
        energy = jnp.where(dead, params.initial_energy, energy)

        new_state = LongHorizonState(
            position=position,
            heading=heading,
            energy=energy,
            patches=patches,
            amounts=amounts,
            good=good,
            taste=taste,
            time=time,
        )
        obs = self._observe(new_state, params, noise.sensor)
        done = time >= params.episode_length
        info = {
            "homeostasis": balance,
            "died": dead,
            "nourishing_intake": nourishing,
            "harmful_intake": harmful,
        }
        return obs, new_state, reward, done, info

    def fields(
        self, state: LongHorizonState, params: LongHorizonParams, points: Points
    ) -> Float[Array, "n 2"]:
        return jnp.stack(
            [
                exponential_field(
                    points, state.patches[k], state.amounts[k], params.length_scale
                )
                for k in range(NUM_RESOURCES)
            ],
            axis=-1,
        )

    def field_labels(self, state: LongHorizonState) -> tuple[str, ...]:
        good = int(state.good)
        return tuple(
            f"{name} ({'nourishing' if k == good else 'harmful'})"
            for k, name in enumerate(self.field_names)
        )

    def position(self, state: LongHorizonState) -> Float[Array, "2"]:
        return state.position

    def heading(self, state: LongHorizonState) -> Float[Array, ""]:
        return state.heading

    def arena_half(self, params: LongHorizonParams) -> Float[Array, ""]:
        return params.arena_half

    def landmarks(self, state: LongHorizonState) -> Float[Array, "k m 2"]:
        return state.patches


__all__ = [
    "LongHorizon",
    "LongHorizonNoise",
    "LongHorizonParams",
    "LongHorizonState",
]
