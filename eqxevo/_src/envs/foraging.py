"""L2 multi-resource foraging: keep every internal reserve in balance.

See docs/environments.md ("L2: Foraging") for the model and its variants.
"""

import abc
import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import int_at_least, positive_int
from .._types import Array, Float, Int, PRNGKey
from .arena import (
    AbstractArenaEnv,
    AbstractArenaParams,
    AbstractArenaState,
    Points,
    SensorNoise,
    body_frame,
    distances,
    drive,
    exponential_field,
    log_sensor,
    sensor_points,
)
from .base import Action, EnvParams, EnvState, Observation, StepResult
from .params import count, fraction, non_negative, param, positive


class AbstractFeedingParams(AbstractArenaParams):
    """Patches and feeding: what `Foraging` and `LongHorizon` share.

    Arguments (keyword only; rates per step): the arena and body of
    `AbstractArenaParams` (`length_scale` is the fields'), plus
        patch_spread: patches are uniform in `[-s, s]^2`, `s = patch_spread *
            arena_half`.
        eat_radius: length scale of consumption around a patch.
        eat_rate: fraction of a patch eaten per step at its centre.
        nutrition: energy (a reserve, or L4's reward) gained per unit of
            (nourishing) resource eaten.
        regrowth_rate: fraction of a patch's deficit regrown per step.
    """

    length_scale: Float[Array, ""] = positive(0.3)
    patch_spread: Float[Array, ""] = fraction(0.8)
    eat_radius: Float[Array, ""] = positive(0.08)
    eat_rate: Float[Array, ""] = fraction(0.05)
    nutrition: Float[Array, ""] = non_negative(0.5)
    regrowth_rate: Float[Array, ""] = fraction(0.002)


class ForagingParams(AbstractFeedingParams):
    """Parameters of `Foraging`: every field is a scalar array (vmappable).

    Arguments (keyword only): those of `AbstractFeedingParams`, plus
        metabolic_rate: reserve spent per step.
        setpoint: the reserves' ideal level.
        death_penalty: subtracted from the reward on the step a reserve empties.
        initial_reserve: every reserve's level at birth.
        episode_length: steps before the world resets.

    Each field's default and range is declared below.
    """

    metabolic_rate: Float[Array, ""] = non_negative(0.001)
    setpoint: Float[Array, ""] = param(
        0.5, low=0.0, high=1.0, low_open=True, high_open=True
    )
    death_penalty: Float[Array, ""] = param(100.0)
    initial_reserve: Float[Array, ""] = param(0.5, low=0.0, high=1.0, low_open=True)
    episode_length: Int[Array, ""] = count(5000)


class AbstractFeedingState(AbstractArenaState):
    """An arena state with resource patches: what `move_and_eat` reads."""

    patches: eqx.AbstractVar[Float[Array, "k m 2"]]
    amounts: eqx.AbstractVar[Float[Array, "k m"]]


def move_and_eat(
    state: AbstractFeedingState, action: Action, params: AbstractFeedingParams
) -> tuple[
    Float[Array, "2"], Float[Array, ""], Float[Array, " k"], Float[Array, "k m"]
]:
    """Drive, then eat from the patches near the new position, which then regrow.

    Returns:
        `(position, heading, intake per resource, amounts)`.
    """
    position, heading = drive(state.position, state.heading, action, params)
    # A Gaussian bite around each patch: eat_rate of it at its centre.
    offset = state.patches - position
    radius = params.eat_radius
    squared = jnp.sum(offset * offset, axis=-1) / (radius * radius)
    eaten = params.eat_rate * state.amounts * jnp.exp(-squared)
    amounts = state.amounts - eaten
    amounts = amounts + params.regrowth_rate * (1.0 - amounts)
    return position, heading, jnp.sum(eaten, axis=-1), amounts


def homeostasis(
    reserves: Float[Array, " k"], setpoint: Float[Array, ""]
) -> Float[Array, ""]:
    """1 with every reserve at the setpoint, 0 with one empty or full."""
    # Scaled by the larger distance to a bound, so the worst reserve (empty or
    # full) scores exactly 0 whatever the setpoint.
    scale = jnp.maximum(setpoint, 1.0 - setpoint)
    return jnp.maximum(1.0 - jnp.max(jnp.abs(reserves - setpoint)) / scale, 0.0)


def sense_fields(
    state: AbstractFeedingState,
    params: AbstractFeedingParams,
    noise: Float[Array, " k2"],
) -> Float[Array, " k2"]:
    """Log readings of every field at the two sensors: `[F_0 l, F_0 r, ...]`."""
    sensors = sensor_points(state.position, state.heading, params)
    patches, amounts = state.patches, state.amounts
    # Both sensors against every patch of every type in one (2, k * m) block.
    d = distances(sensors, patches.reshape(-1, 2)).reshape(2, *amounts.shape)
    values = jnp.sum(amounts * jnp.exp(-d / params.length_scale), axis=-1)  # (2, k)
    return log_sensor(values.T.reshape(-1), noise, params)


def layout(
    key: PRNGKey, shape: tuple[int, int], params: AbstractFeedingParams
) -> tuple[Float[Array, ""], Float[Array, "k m 2"], Float[Array, ""]]:
    """A new world's random layout, from one uniform draw.

    Returns `(heading, patches, coin)`: a heading uniform in [-pi, pi), patch
    positions uniform in `[-s, s]^2` (`s = patch_spread * arena_half`) and a
    uniform [0, 1) number.
    """
    # One draw for the whole layout: every draw costs threefry rounds.
    size = shape[0] * shape[1] * 2
    u = jr.uniform(key, (size + 2,), jnp.float32)
    spread = params.patch_spread * params.arena_half
    patches = (2.0 * u[:size].reshape(*shape, 2) - 1.0) * spread
    return 2 * math.pi * u[size] - math.pi, patches, u[size + 1]


class ForagingState(AbstractFeedingState):
    """State of `Foraging`."""

    reserves: Float[Array, " k"]
    patches: Float[Array, "k m 2"]
    amounts: Float[Array, "k m"]
    time: Int[Array, ""]


class AbstractFeedingEnv(AbstractArenaEnv):
    """An arena of resource patches, one field per resource type: what `Foraging`
    and `LongHorizon` share."""

    def fields(
        self, state: AbstractFeedingState, params: AbstractFeedingParams, points: Points
    ) -> Float[Array, "n k"]:
        # One field per resource type, each a sum over that type's patches.
        per_type = [
            exponential_field(points, patches, amounts, params.length_scale)
            for patches, amounts in zip(state.patches, state.amounts, strict=True)
        ]
        return jnp.stack(per_type, axis=-1)

    def observe(
        self, state: AbstractFeedingState, params: AbstractFeedingParams, noise: Array
    ) -> Observation:
        """Every field's log reading at both sensors, then what `internal` says."""
        fields = sense_fields(state, params, noise)
        return jnp.concatenate([fields, self.internal(state, params)])

    @abc.abstractmethod
    def internal(self, state: EnvState, params: EnvParams) -> Float[Array, " internal"]:
        """What the body senses of itself (reserves, taste)."""

    def landmarks(self, state: AbstractFeedingState) -> Float[Array, "k m 2"]:
        return state.patches


class Foraging(AbstractFeedingEnv):
    """L2 multi-resource foraging: balance `num_resources` reserves to survive.

    Arguments:
        num_resources: resource types, each with its own field and reserve (>= 2).
        patches_per_resource: patches of each type (>= 1).
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

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
        # Two resources at least: one alone would be a chemotaxis task.
        self.num_resources = int_at_least("num_resources", num_resources, 2)
        self.patches_per_resource = positive_int(
            "patches_per_resource", patches_per_resource
        )
        self.traced_param_checks = traced_param_checks
        self.obs_size = 3 * num_resources
        self.action_size = 2
        self.field_names = tuple(f"resource {k}" for k in range(num_resources))

    def default_params(self) -> ForagingParams:
        return ForagingParams()

    def internal(
        self, state: ForagingState, params: ForagingParams
    ) -> Float[Array, " k"]:
        return state.reserves - params.setpoint

    def reset(
        self, key: PRNGKey, params: ForagingParams
    ) -> tuple[Observation, ForagingState]:
        layout_key, noise_key = jr.split(key)
        shape = (self.num_resources, self.patches_per_resource)
        heading, patches, _ = layout(layout_key, shape, params)
        # The params are checked once per episode, riding on a value reset uses.
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
        return self.observe(state, params, noise), state

    def sample_noise(self, key: PRNGKey, params: ForagingParams) -> SensorNoise:
        del params
        return SensorNoise(
            sensor=jr.normal(key, (2 * self.num_resources,), jnp.float32)
        )

    def privileged(
        self, state: ForagingState, params: ForagingParams
    ) -> Float[Array, " k3m"]:
        """Every patch from the body, (ahead, to the left), then every amount:
        `[x_00, y_00, x_01, ..., amount_00, amount_01, ...]`."""
        del params
        where = body_frame(state.patches.reshape(-1, 2), state.position, state.heading)
        return jnp.concatenate([where.reshape(-1), state.amounts.reshape(-1)])

    def transition(
        self,
        state: ForagingState,
        action: Action,
        params: ForagingParams,
        noise: SensorNoise,
    ) -> StepResult:
        position, heading, intake, amounts = move_and_eat(state, action, params)
        reserves = jnp.clip(
            state.reserves + params.nutrition * intake - params.metabolic_rate,
            0.0,
            1.0,
        )
        time = state.time + 1
        dead = jnp.any(reserves <= 0.0)
        balance = homeostasis(reserves, params.setpoint)
        reward = jnp.where(dead, -params.death_penalty, balance)
        # Patches stay where they are; only their amounts deplete and regrow.
        patches = state.patches
        new_state = ForagingState(position, heading, reserves, patches, amounts, time)
        obs = self.observe(new_state, params, noise.sensor)
        done = dead | (time >= params.episode_length)
        info = {"homeostasis": balance, "died": dead, "intake": jnp.sum(intake)}
        # each resource's intake: the mix of food eaten (a QD descriptor)
        info.update({f"intake_{i}": intake[i] for i in range(self.num_resources)})
        return obs, new_state, reward, done, info


__all__ = [
    "AbstractFeedingEnv",
    "AbstractFeedingParams",
    "AbstractFeedingState",
    "Foraging",
    "ForagingParams",
    "ForagingState",
    "homeostasis",
    "layout",
    "move_and_eat",
    "sense_fields",
]
