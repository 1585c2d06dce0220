"""L4 long horizon: a lifetime of seasons whose rules change.

See docs/environments.md ("L4: LongHorizon") for the model.
"""

import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import int_at_least, positive_int
from .._types import Array, Float, Int, PRNGKey
from .base import Action, Observation, StepResult
from .foraging import (
    AbstractFeedingEnv,
    AbstractFeedingParams,
    AbstractFeedingState,
    homeostasis,
    layout,
    move_and_eat,
)
from .params import count, fraction, non_negative, param

NUM_RESOURCES = 2
"""Two resource types, A and B: in every season one nourishes, the other harms."""

DIGESTION = 20
"""Steps from eating to tasting and being nourished (or harmed), by default. It
was meant to hide what a type is worth from the current observation; a
memoryless network still reads it (docs/environments.md, "What the L4
certificate found")."""


class LongHorizonParams(AbstractFeedingParams):
    """Parameters of `LongHorizon`; every field is a scalar array (vmappable).

    Arguments (keyword only): those of `AbstractFeedingParams` (`nutrition` is
    the nourishing type's, `setpoint` the energy's), plus
        toxicity: energy lost per unit eaten of the harmful type.
        initial_energy: energy at birth and rebirth.
        taste_gain: scale of the taste signal.
        season_length: steps per season.
        swap_prob: probability that the types swap roles at a season boundary.
        relocate_prob: probability that a patch relocates at a season boundary.
        episode_length: steps in the lifetime.

    Each field's default and range is declared below.
    """

    toxicity: Float[Array, ""] = non_negative(0.5)
    initial_energy: Float[Array, ""] = param(0.5, low=0.0, high=1.0, low_open=True)
    taste_gain: Float[Array, ""] = non_negative(40.0)
    season_length: Int[Array, ""] = count(2000)
    swap_prob: Float[Array, ""] = fraction(1.0)
    relocate_prob: Float[Array, ""] = fraction(1.0)
    episode_length: Int[Array, ""] = count(20000)


class LongHorizonState(AbstractFeedingState):
    """State of `LongHorizon`.

    Attributes:
        good: which resource type nourishes this season (0 is A, 1 is B).
        taste: the last step's taste signal (part of the observation).
        time: steps since the lifetime began (deaths do not reset it).
        gut: the net energy of the food eaten on each of the last `digestion`
            steps, oldest first (empty without digestion).
    """

    energy: Float[Array, ""]
    patches: Float[Array, "2 m 2"]
    amounts: Float[Array, "2 m"]
    good: Int[Array, ""]
    taste: Float[Array, ""]
    time: Int[Array, ""]
    gut: Float[Array, " digestion"]


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


class LongHorizon(AbstractFeedingEnv):
    """L4 long horizon: which of two resources nourishes changes with the seasons.

    Nothing in the observation says which type nourishes, and food is digested
    `digestion` steps after it is eaten: only then does its taste show and its
    energy count. What a type is worth this season was meant to be unreadable
    from the current observation. Measured, it is not: a memoryless MLP evolved
    long enough beats the taste learner (docs/environments.md, "What the L4
    certificate found").

    Arguments:
        patches_per_resource: patches of each of the two types (>= 1).
        digestion: steps from eating to tasting and being nourished or harmed
            (>= 0; 0: at once, the L4 of eqxevo 0.1, where a reflex reading the
            taste came within 10% of the learner).
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

    Example:
        >>> env = LongHorizon()
        >>> fitness, summary = eqxevo.rollout(jr.key(0), policy, env,
        ...                                   env.default_params(), 20_000)
    """

    patches_per_resource: int = eqx.field(static=True)
    digestion: int = eqx.field(static=True)
    # Fields A and B at both sensors, energy, taste.
    obs_size: int = eqx.field(static=True, default=2 * NUM_RESOURCES + 2)
    action_size: int = eqx.field(static=True, default=2)
    field_names: tuple[str, ...] = eqx.field(
        static=True, default=("resource A", "resource B")
    )

    def __init__(
        self,
        patches_per_resource: int = 3,
        digestion: int = DIGESTION,
        *,
        traced_param_checks: bool = False,
    ):
        self.patches_per_resource = positive_int(
            "patches_per_resource", patches_per_resource
        )
        self.digestion = int_at_least("digestion", digestion, 0)
        self.traced_param_checks = traced_param_checks

    def default_params(self) -> LongHorizonParams:
        return LongHorizonParams()

    def internal(
        self, state: LongHorizonState, params: LongHorizonParams
    ) -> Float[Array, "2"]:
        return jnp.stack([state.energy - params.setpoint, state.taste])

    def reset(
        self, key: PRNGKey, params: LongHorizonParams
    ) -> tuple[Observation, LongHorizonState]:
        layout_key, noise_key = jr.split(key)
        shape = (NUM_RESOURCES, self.patches_per_resource)
        heading, patches, coin = layout(layout_key, shape, params)
        # The params are checked once per episode, riding on a value reset uses.
        heading = params.checked(heading, traced=self.traced_param_checks)
        state = LongHorizonState(
            position=jnp.zeros((2,), jnp.float32),
            heading=heading,
            energy=params.initial_energy,
            patches=patches,
            amounts=jnp.ones(shape, jnp.float32),
            good=(coin < 0.5).astype(jnp.int32),  # a fair coin: A or B first
            taste=jnp.zeros((), jnp.float32),
            time=jnp.zeros((), jnp.int32),
            gut=jnp.zeros((self.digestion,), jnp.float32),
        )
        noise = jr.normal(noise_key, (2 * NUM_RESOURCES,), jnp.float32)
        return self.observe(state, params, noise), state

    def sample_noise(self, key: PRNGKey, params: LongHorizonParams) -> LongHorizonNoise:
        del params
        # Every step draws what a season boundary or a death might need, used or
        # not: the draws cannot depend on the state, and one uniform vector
        # costs fewer threefry rounds than one draw per use.
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
        action: Action,
        params: LongHorizonParams,
        noise: LongHorizonNoise,
    ) -> StepResult:
        position, heading, intake, amounts = move_and_eat(state, action, params)
        # Roles are applied to what was eaten under this step's season.
        good_is_a = state.good == 0
        nourishing = jnp.where(good_is_a, intake[0], intake[1])
        harmful = jnp.where(good_is_a, intake[1], intake[0])
        gained = params.nutrition * nourishing - params.toxicity * harmful
        if self.digestion:
            digested = state.gut[0]
            gut = jnp.concatenate([state.gut[1:], gained[None]])
        else:
            digested, gut = gained, state.gut
        energy = jnp.clip(state.energy + digested - params.metabolic_rate, 0.0, 1.0)
        taste = jnp.clip(params.taste_gain * digested, -1.0, 1.0)
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
        gut = jnp.where(dead, 0.0, gut)

        new_state = LongHorizonState(
            position, heading, energy, patches, amounts, good, taste, time, gut
        )
        obs = self.observe(new_state, params, noise.sensor)
        done = time >= params.episode_length
        info = {
            "homeostasis": balance,
            "died": dead,
            "nourishing_intake": nourishing,
            "harmful_intake": harmful,
        }
        return obs, new_state, reward, done, info

    def privileged(
        self, state: LongHorizonState, params: LongHorizonParams
    ) -> Float[Array, "1"]:
        """Which type nourishes now: +1 for A, -1 for B."""
        del params
        return jnp.where(state.good == 0, 1.0, -1.0)[None]

    def field_labels(self, state: LongHorizonState) -> tuple[str, ...]:
        good = int(state.good)  # concrete: called for a picture, not under jit
        return tuple(
            f"{name} ({'nourishing' if k == good else 'harmful'})"
            for k, name in enumerate(self.field_names)
        )


__all__ = [
    "LongHorizon",
    "LongHorizonNoise",
    "LongHorizonParams",
    "LongHorizonState",
]
