"""L0 chemotaxis: find a diffusing source by its gradient, and stay there.

See docs/environments.md ("L0: Chemotaxis") for the model and its variants.
"""

import math
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._types import Array, Float, Int, PRNGKey
from .arena import (
    AbstractArenaEnv,
    AbstractArenaParams,
    AbstractArenaState,
    Points,
    SensorNoise,
    body_frame,
    drive,
    exponential_field,
    log_sensor,
    reflect,
    sensor_points,
)
from .base import Action, Observation, StepResult
from .params import count, non_negative, positive


class ChemotaxisParams(AbstractArenaParams):
    """Parameters of `Chemotaxis`: every field is a scalar array (vmappable).

    Arguments (all keyword-only; lengths in arena units, times in steps): the
    arena and body of `AbstractArenaParams` (`length_scale` is the
    concentration's), plus
        source_min_distance, source_max_distance: the source's initial
            distance from the centre is uniform in this interval
            (`source_min_distance <= source_max_distance <= arena_half`).
        drift_speed: the source's speed, per step (0 is still).
        reward_length: the reward's length scale.
        episode_length: steps per episode.

    Each field's default and range is declared below.
    """

    source_min_distance: Float[Array, ""] = non_negative(0.5)
    source_max_distance: Float[Array, ""] = non_negative(0.9)
    drift_speed: Float[Array, ""] = non_negative(0.0)
    reward_length: Float[Array, ""] = positive(0.25)
    episode_length: Int[Array, ""] = count(1000)

    orders: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("source_min_distance", "source_max_distance", "arena_half"),
    )


class ChemotaxisState(AbstractArenaState):
    """State of `Chemotaxis`."""

    source: Float[Array, "2"]
    source_velocity: Float[Array, "2"]
    time: Int[Array, ""]


class Chemotaxis(AbstractArenaEnv):
    """L0 chemotaxis: steer up a diffusing gradient to its source and stay there.

    The concentration is `C(p) = exp(-|p - source| / length_scale)`; the reward
    per step `exp(-distance / reward_length)`; the observation the log
    concentration at the two sensors.

    Arguments:
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

    Example:
        >>> env = Chemotaxis()
        >>> params = env.default_params()
        >>> obs, state = env.reset(jr.key(0), params)
        >>> obs, state, reward, done, info = env.step(jr.key(1), state, action, params)
    """

    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=2)
    field_names: tuple[str, ...] = eqx.field(static=True, default=("concentration",))

    def default_params(self) -> ChemotaxisParams:
        return ChemotaxisParams()

    def _sense(
        self, state: ChemotaxisState, params: ChemotaxisParams, noise: Array
    ) -> Float[Array, "2"]:
        sensors = sensor_points(state.position, state.heading, params)
        concentration = exponential_field(
            sensors,
            state.source[None],
            jnp.ones((1,), jnp.float32),
            params.length_scale,
        )
        return log_sensor(concentration, noise, params)

    def reset(
        self, key: PRNGKey, params: ChemotaxisParams
    ) -> tuple[Observation, ChemotaxisState]:
        # Few random draws (each costs threefry rounds): one uniform vector for
        # the layout, one normal vector for the sensors.
        layout_key, noise_key = jr.split(key)
        u = jr.uniform(layout_key, (4,), jnp.float32)
        # The params are checked once per episode, riding on a value reset uses.
        heading = params.checked(
            2 * math.pi * u[0] - math.pi, traced=self.traced_param_checks
        )
        distance = params.source_min_distance + u[1] * (
            params.source_max_distance - params.source_min_distance
        )
        bearing = 2 * math.pi * u[2]
        drift = 2 * math.pi * u[3]
        state = ChemotaxisState(
            position=jnp.zeros((2,), jnp.float32),
            heading=heading,
            source=distance * jnp.stack([jnp.cos(bearing), jnp.sin(bearing)]),
            source_velocity=params.drift_speed
            * jnp.stack([jnp.cos(drift), jnp.sin(drift)]),
            time=jnp.zeros((), jnp.int32),
        )
        noise = jr.normal(noise_key, (2,), jnp.float32)
        return self._sense(state, params, noise), state

    def sample_noise(self, key: PRNGKey, params: ChemotaxisParams) -> SensorNoise:
        del params
        return SensorNoise(sensor=jr.normal(key, (2,), jnp.float32))

    def transition(
        self,
        state: ChemotaxisState,
        action: Action,
        params: ChemotaxisParams,
        noise: SensorNoise,
    ) -> StepResult:
        position, heading = drive(state.position, state.heading, action, params)
        # The source drifts first; the body then senses where it now is.
        source, velocity = reflect(
            state.source + state.source_velocity,
            state.source_velocity,
            params.arena_half,
        )
        time = state.time + 1
        offset = position - source
        distance = jnp.sqrt(jnp.sum(offset * offset))
        reward = jnp.exp(-distance / params.reward_length)
        new_state = ChemotaxisState(position, heading, source, velocity, time)
        obs = self._sense(new_state, params, noise.sensor)
        done = time >= params.episode_length
        info = {"distance": distance, "x": position[0], "y": position[1]}
        return obs, new_state, reward, done, info

    def fields(
        self, state: ChemotaxisState, params: ChemotaxisParams, points: Points
    ) -> Float[Array, "n 1"]:
        ones = jnp.ones((1,), jnp.float32)
        return exponential_field(points, state.source[None], ones, params.length_scale)[
            :, None
        ]

    def landmarks(self, state: ChemotaxisState) -> Float[Array, "1 1 2"]:
        return state.source[None, None]

    def privileged(
        self, state: ChemotaxisState, params: ChemotaxisParams
    ) -> Float[Array, "2"]:
        """Where the source is from the body: (ahead, to the left)."""
        del params
        return body_frame(state.source[None], state.position, state.heading)[0]


__all__ = ["Chemotaxis", "ChemotaxisParams", "ChemotaxisState"]
