"""L4 long horizon: a lifetime of seasons whose rules change.

See docs/environments.md ("L4: LongHorizon") for the model.
"""

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
    layout,
    move_and_eat,
)
from .params import count, fraction, non_negative, positive

NUM_RESOURCES = 2
"""Two resource types, A and B: in every season one nourishes, the other harms."""

DIGESTION = 100
"""Steps from eating to tasting and being nourished (or harmed), by default:
longer than it takes to cross from one type's patch to the other's, so a taste
is often the taste of a patch the body has left."""


class LongHorizonParams(AbstractFeedingParams):
    """Parameters of `LongHorizon`; every field is a scalar array (vmappable).

    Arguments (keyword only): those of `AbstractFeedingParams` (`nutrition` is
    the nourishing type's energy per unit eaten), plus
        eat_radius: as there, 0.15 by default (0.08 there).
        regrowth_rate: as there, but 1 by default: patches never deplete, so
            the fields show where patches are, never what was eaten from them.
        toxicity: energy lost per unit eaten of the harmful type.
        taste_gain: scale of the taste signal.
        taste_noise: standard deviation of the Gaussian noise added to the
            taste on every step.
        season_length: steps per season.
        swap_prob: probability that the types swap roles at a season boundary.
        relocate_prob: probability that a patch relocates at a season boundary.
        episode_length: steps in the lifetime.

    Each field's default and range is declared below.
    """

    eat_radius: Float[Array, ""] = positive(0.15)
    regrowth_rate: Float[Array, ""] = fraction(1.0)
    toxicity: Float[Array, ""] = non_negative(0.5)
    taste_gain: Float[Array, ""] = non_negative(40.0)
    taste_noise: Float[Array, ""] = non_negative(4.0)
    season_length: Int[Array, ""] = count(500)
    swap_prob: Float[Array, ""] = fraction(1.0)
    relocate_prob: Float[Array, ""] = fraction(1.0)
    episode_length: Int[Array, ""] = count(20000)


class LongHorizonState(AbstractFeedingState):
    """State of `LongHorizon`.

    Attributes:
        good: which resource type nourishes this season (0 is A, 1 is B).
        taste: this step's taste signal, noise included (the observation's
            last entry).
        time: steps since the lifetime began.
        gut: the net energy of the food eaten on each of the last `digestion`
            steps, oldest first (empty without digestion).
    """

    patches: Float[Array, "2 m 2"]
    amounts: Float[Array, "2 m"]
    good: Int[Array, ""]
    taste: Float[Array, ""]
    time: Int[Array, ""]
    gut: Float[Array, " digestion"]


class LongHorizonNoise(eqx.Module):
    """The random draws of one `LongHorizon` step.

    Attributes:
        sensor: standard normal noise of the four field readings.
        taste: standard normal noise of the taste.
        swap, relocate: uniform [0, 1) draws compared with `swap_prob` and
            `relocate_prob` at a season boundary.
        patches: uniform [-1, 1) positions of relocated patches (scaled by the
            patch spread).
    """

    sensor: Float[Array, "4"]
    taste: Float[Array, ""]
    swap: Float[Array, ""]
    relocate: Float[Array, "2 m"]
    patches: Float[Array, "2 m 2"]


def _normals(key: PRNGKey) -> tuple[Float[Array, "4"], Float[Array, ""]]:
    """The field readings' and the taste's noise, from one draw."""
    z = jr.normal(key, (2 * NUM_RESOURCES + 1,), jnp.float32)
    return z[:-1], z[-1]


class LongHorizon(AbstractFeedingEnv):
    """L4 long horizon: which of two resources nourishes changes with the seasons.

    Nothing in the observation says which type nourishes. Food is digested
    `digestion` steps after it is eaten: only then does its taste show, noisy,
    and its energy count as reward. Patches never deplete, so the fields show
    where they are, not what was eaten. A policy that remembers nothing cannot
    tell which type its taste is the taste of, nor add up noisy tastes; a
    learner can (docs/environments.md, "L4: LongHorizon", with its certificate).

    Arguments:
        patches_per_resource: patches of each of the two types (>= 1).
        digestion: steps from eating to tasting and being nourished or harmed
            (>= 0; 0: at once).
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

    Example:
        >>> env = LongHorizon()
        >>> fitness, summary = eqxevo.rollout(jr.key(0), policy, env,
        ...                                   env.default_params(), 20_000)
    """

    patches_per_resource: int = eqx.field(static=True)
    digestion: int = eqx.field(static=True)
    # Fields A and B at both sensors, taste.
    obs_size: int = eqx.field(static=True, default=2 * NUM_RESOURCES + 1)
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
    ) -> Float[Array, "1"]:
        del params
        return state.taste[None]

    def reset(
        self, key: PRNGKey, params: LongHorizonParams
    ) -> tuple[Observation, LongHorizonState]:
        layout_key, noise_key = jr.split(key)
        shape = (NUM_RESOURCES, self.patches_per_resource)
        heading, patches, coin = layout(layout_key, shape, params)
        # The params are checked once per episode, riding on a value reset uses.
        heading = params.checked(heading, traced=self.traced_param_checks)
        sensor, taste = _normals(noise_key)
        state = LongHorizonState(
            position=jnp.zeros((2,), jnp.float32),
            heading=heading,
            patches=patches,
            amounts=jnp.ones(shape, jnp.float32),
            good=(coin < 0.5).astype(jnp.int32),  # a fair coin: A or B first
            taste=params.taste_noise * taste,  # nothing eaten yet: noise alone
            time=jnp.zeros((), jnp.int32),
            gut=jnp.zeros((self.digestion,), jnp.float32),
        )
        return self.observe(state, params, sensor), state

    def sample_noise(self, key: PRNGKey, params: LongHorizonParams) -> LongHorizonNoise:
        del params
        # Every step draws what a season boundary might need, used or not: the
        # draws cannot depend on the state, and one uniform vector costs fewer
        # threefry rounds than one draw per use.
        m = self.patches_per_resource
        normal_key, uniform_key = jr.split(key)
        u = jr.uniform(uniform_key, (1 + 2 * m + 4 * m,), jnp.float32)
        sensor, taste = _normals(normal_key)
        return LongHorizonNoise(
            sensor=sensor,
            taste=taste,
            swap=u[0],
            relocate=u[1 : 1 + 2 * m].reshape(2, m),
            patches=2.0 * u[1 + 2 * m :].reshape(2, m, 2) - 1.0,
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
        taste = jnp.clip(params.taste_gain * digested, -1.0, 1.0)
        taste = taste + params.taste_noise * noise.taste
        time = state.time + 1

        # Season boundary: roles may swap, patches may relocate (fresh and full).
        boundary = (time % params.season_length) == 0
        swap = boundary & (noise.swap < params.swap_prob)
        good = jnp.where(swap, 1 - state.good, state.good)
        spread = params.patch_spread * params.arena_half
        moved = boundary & (noise.relocate < params.relocate_prob)
        patches = jnp.where(moved[..., None], noise.patches * spread, state.patches)
        amounts = jnp.where(moved, 1.0, amounts)

        new_state = LongHorizonState(
            position, heading, patches, amounts, good, taste, time, gut
        )
        obs = self.observe(new_state, params, noise.sensor)
        done = time >= params.episode_length
        info = {"nourishing_intake": nourishing, "harmful_intake": harmful}
        # The reward is the energy digested this step.
        return obs, new_state, digested, done, info

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
