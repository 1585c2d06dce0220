"""Reference agents of the arena environments: Braitenberg vehicles for L0 and
L2, and the taste learner of L4 (docs/environments.md, "Reference agents").

Braitenberg, V. (1984). Vehicles: Experiments in Synthetic Psychology. MIT Press.
"""

import abc

import equinox as eqx
import jax.numpy as jnp

from .._checks import int_at_least, positive_int
from .._types import Array, Float, PRNGKey, Scalar
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy, AbstractStatelessPolicy

_EPS = 1e-6
"""Keeps a normalisation finite when every need is zero."""


def _motors(base_speed: Scalar, steer: Array) -> Float[Array, "2"]:
    # The left wheel speeds up with `steer`: steer > 0 turns the body right.
    return jnp.clip(jnp.stack([base_speed + steer, base_speed - steer]), -1.0, 1.0)


class AbstractSteeringAgent(AbstractStatelessPolicy):
    """A reflex without memory: both motors at `base_speed`, differentially
    steered by `steer(obs)` (> 0 turns right), clipped to [-1, 1].

    `gain` and `base_speed` are arrays, so an agent is itself a small genome.
    """

    gain: Float[Array, ""]
    base_speed: Float[Array, ""]
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    @abc.abstractmethod
    def steer(self, obs: Observation) -> Float[Array, ""]:
        """The steering signal for one observation."""

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        return _motors(self.base_speed, self.steer(obs)), state


class BraitenbergAgent(AbstractSteeringAgent):
    """Braitenberg vehicle 2b on the first two observations (left, right sensor).

    Vehicle 2b ("aggression": crossed excitatory connections) steers with
    `gain * c`, `c = right - left`: the wheel on the weaker side runs faster,
    turning the body toward the stronger reading. On the arena's logarithmic
    sensors `c` is the field's relative contrast, so the steering does not fade
    with distance from the source.

    Arguments:
        obs_size: observation size (>= 2); observations 0 and 1 are the left and
            right readings of the field to climb.
        gain: steering gain (default: the best of a grid on L0, see
            `examples/baselines.py`).
        base_speed: forward command, in [-1, 1] (default: likewise tuned).
    """

    def __init__(
        self,
        obs_size: int = 2,
        gain: float | int = 12.0,
        base_speed: float | int = 0.5,
    ):
        self.obs_size = int_at_least("obs_size", obs_size, 2)
        self.action_size = 2
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)

    def steer(self, obs: Observation) -> Float[Array, ""]:
        return self.gain * (obs[1] - obs[0])


class ForagerAgent(AbstractSteeringAgent):
    """A homeostatic Braitenberg vehicle for `Foraging` with K resources.

    It reads `Foraging`'s observation layout (K pairs of left/right readings,
    then the K reserves relative to the setpoint). Each reserve's need is
    `-(reserve - setpoint)`; the steering is `gain * sum_k need_k * c_k /
    max_k |need_k|`, with `c_k` the contrast of field k (right minus left log
    reading), so it heads for what it lacks most and turns away from what it
    has too much of.

    Arguments:
        num_resources: K (>= 1).
        gain: steering gain (default: the best of a grid on L2, see
            `examples/baselines.py`).
        base_speed: forward command, in [-1, 1] (default: likewise tuned).
    """

    num_resources: int = eqx.field(static=True)

    def __init__(
        self,
        num_resources: int = 2,
        gain: float | int = 4.0,
        base_speed: float | int = 1.0,
    ):
        self.num_resources = positive_int("num_resources", num_resources)
        self.obs_size = 3 * num_resources
        self.action_size = 2
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)

    def steer(self, obs: Observation) -> Float[Array, ""]:
        k = self.num_resources
        readings = obs[: 2 * k].reshape(k, 2)  # (left, right) per resource
        need = -obs[2 * k :]
        contrast = readings[:, 1] - readings[:, 0]
        # Normalised by the largest need, so the steering's scale is `gain`
        # whatever the reserves' absolute levels.
        weight = need / (jnp.max(jnp.abs(need)) + _EPS)
        return self.gain * jnp.sum(weight * contrast)


def _taste_steering(
    obs: Observation,
    belief: Float[Array, ""],
    gain: Array,
    base_speed: Array,
) -> Action:
    """`LongHorizon` steering given a belief in [-1, 1] that A nourishes (+1) or
    B does (-1): toward what nourishes, away from what harms, less strongly, so
    an undecided agent (0) goes to whichever patch is nearer. Steered hard
    and slowly, it circles on a patch and eats."""
    a_left, a_right, b_left, b_right = obs[:4]
    weight_a = 0.5 * (1 + belief) - 0.25 * (1 - belief)
    weight_b = 0.5 * (1 - belief) - 0.25 * (1 + belief)
    steer = gain * (weight_a * (a_right - a_left) + weight_b * (b_right - b_left))
    return _motors(base_speed, 0.5 * steer)


def _closer_to_a(obs: Observation) -> Float[Array, ""]:
    """How much closer to A than to B: tanh of the mean log readings' difference."""
    a_left, a_right, b_left, b_right = obs[:4]
    return jnp.tanh(0.5 * (a_left + a_right) - 0.5 * (b_left + b_right))


class TasteMemory(eqx.Module):
    """`TasteLearnerAgent`'s lifetime state.

    Attributes:
        belief: in [-1, 1]: +1 A nourishes, -1 B does.
        recent: which resource it was closer to on each of the last `digestion`
            steps (oldest first): what a taste now is the taste of.
        readings: the last step's field readings (to see the patches move).
    """

    belief: Float[Array, ""]
    recent: Float[Array, " digestion"]
    readings: Float[Array, "4"]


class TasteLearnerAgent(AbstractPolicy):
    """A forager for `LongHorizon` that learns which resource nourishes.

    Its lifetime state holds a belief `b` in [-1, 1] (+1: A nourishes, -1: B
    does). Food tastes `digestion` steps after it is eaten, so the agent also
    remembers where it was on each of the last `digestion` steps: `a_t =
    tanh(mean log reading of A - that of B)`, how much closer to A than to B. It
    credits the taste to where it was when it ate, adding up noisy tastes:
    `b <- clip(b + learning_rate * taste * a_{t - digestion}, -1, 1)`. When a
    field reading jumps by more than `jump` in one step (the patches relocated:
    a season ended), the belief and what it remembers of where it ate are
    multiplied by `flip` (-1: the roles swap at every season, L4's default;
    0: start again; 1: ignore seasons). It steers toward the resource it
    believes nourishing and away from the other, weighting the two contrasts by
    the belief.

    Arguments:
        learning_rate: belief change per unit of taste (0: no learning; the
            default is the best of a grid on L4, see `examples/baselines.py`).
        initial_belief: belief at birth (+1: A nourishes; 0: undecided).
        gain: steering gain.
        base_speed: forward command, in [-1, 1].
        digestion: the environment's `digestion` (steps from eating to taste).
        flip: what a new season does to the belief (see above).
        jump: the change of a log reading in one step taken for a relocation
            (a body at full speed changes its readings by at most about 0.03).
    """

    learning_rate: Float[Array, ""]
    initial_belief: Float[Array, ""]
    gain: Float[Array, ""]
    base_speed: Float[Array, ""]
    flip: Float[Array, ""]
    jump: Float[Array, ""]
    digestion: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True, default=5)  # LongHorizon's
    action_size: int = eqx.field(static=True, default=2)

    def __init__(
        self,
        learning_rate: float | int = 0.02,
        initial_belief: float | int = 0.0,
        gain: float | int = 16.0,
        base_speed: float | int = 0.6,
        digestion: int = 0,
        flip: float | int = -1.0,
        jump: float | int = 0.5,
    ):
        self.learning_rate = jnp.asarray(learning_rate, jnp.float32)
        self.initial_belief = jnp.asarray(initial_belief, jnp.float32)
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)
        self.flip = jnp.asarray(flip, jnp.float32)
        self.jump = jnp.asarray(jump, jnp.float32)
        self.digestion = int_at_least("digestion", digestion, 0)

    def initial_state(self, key: PRNGKey) -> TasteMemory:
        del key
        recent = jnp.zeros((self.digestion,), jnp.float32)
        # NaN readings: the first step sees no jump (NaN compares false).
        return TasteMemory(
            self.initial_belief, recent, jnp.full((4,), jnp.nan, jnp.float32)
        )

    def __call__(
        self, obs: Observation, state: TasteMemory
    ) -> tuple[Action, TasteMemory]:
        taste, readings = obs[4], obs[:4]
        moved = jnp.max(jnp.abs(readings - state.readings)) > self.jump
        scale = jnp.where(moved, self.flip, 1.0)
        belief, remembered = scale * state.belief, scale * state.recent
        closer_to_a = _closer_to_a(obs)
        if self.digestion:
            eaten_at = remembered[0]
            recent = jnp.concatenate([remembered[1:], closer_to_a[None]])
        else:
            eaten_at, recent = closer_to_a, remembered
        update = self.learning_rate * taste * eaten_at
        belief = jnp.clip(belief + update, -1.0, 1.0)
        action = _taste_steering(obs, belief, self.gain, self.base_speed)
        return action, TasteMemory(belief, recent, readings)


class ReactiveTasteAgent(AbstractStatelessPolicy):
    """`TasteLearnerAgent`'s steering with a belief from this step alone, stay or
    flee: `b = clip(a_t * (stay + taste_gain * taste), -1, 1)` (`a_t` as there),
    remembering nothing. With `stay > 0` it keeps to the type it is nearer
    until a taste below `-stay / taste_gain` sends it to the other; with
    `stay = 0` it flees what tastes bad while it tastes it. A memoryless
    reference of `LongHorizon`.

    Arguments (the defaults are the best of a grid on L4, see
    `examples/baselines.py`):
        taste_gain: belief per unit of taste.
        stay: belief in the nearer type before tasting (0: none).
        gain, base_speed: as `TasteLearnerAgent`'s.
    """

    taste_gain: Float[Array, ""]
    stay: Float[Array, ""]
    gain: Float[Array, ""]
    base_speed: Float[Array, ""]
    obs_size: int = eqx.field(static=True, default=5)
    action_size: int = eqx.field(static=True, default=2)

    def __init__(
        self,
        taste_gain: float | int = 0.5,
        stay: float | int = 0.5,
        gain: float | int = 16.0,
        base_speed: float | int = 0.6,
    ):
        self.taste_gain = jnp.asarray(taste_gain, jnp.float32)
        self.stay = jnp.asarray(stay, jnp.float32)
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        belief = _closer_to_a(obs) * (self.stay + self.taste_gain * obs[4])
        belief = jnp.clip(belief, -1.0, 1.0)
        action = _taste_steering(obs, belief, self.gain, self.base_speed)
        return action, state


class SeasonOracleAgent(AbstractStatelessPolicy):
    """`TasteLearnerAgent`'s steering told which resource nourishes: it reads
    `eqxevo.envs.privileged(LongHorizon())`'s observation, whose last entry is +1
    while A nourishes and -1 while B does, and steers with that as its belief.

    Arguments:
        gain, base_speed: as `TasteLearnerAgent`'s.
    """

    gain: Float[Array, ""]
    base_speed: Float[Array, ""]
    obs_size: int = eqx.field(static=True, default=6)
    action_size: int = eqx.field(static=True, default=2)

    def __init__(
        self,
        gain: float | int = 16.0,
        base_speed: float | int = 0.6,
    ):
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        action = _taste_steering(obs, obs[5], self.gain, self.base_speed)
        return action, state


def _go_to(
    ahead: Float[Array, ""], left: Float[Array, ""], gain: Array, slow_radius: Array
) -> Action:
    """Motor commands that drive to the point (ahead, to the left) of the body,
    slowing down within `slow_radius` of it and turning on the spot when it lies
    behind."""
    angle = jnp.arctan2(left, ahead)
    distance = jnp.sqrt(ahead * ahead + left * left)
    speed = jnp.clip(distance / slow_radius, 0.0, 1.0) * jnp.maximum(
        jnp.cos(angle), 0.0
    )
    return _motors(speed, -gain * angle)


class SourceOracleAgent(AbstractStatelessPolicy):
    """An L0 agent told where the source is: it reads
    `eqxevo.envs.privileged(Chemotaxis())`'s observation (the two readings, then
    the source from the body: ahead, to the left) and drives straight to it,
    slowing down within `slow_radius`.

    Arguments:
        gain: turning command per radian of bearing.
        slow_radius: distance below which it slows down.
    """

    gain: Float[Array, ""]
    slow_radius: Float[Array, ""]
    obs_size: int = eqx.field(static=True, default=4)
    action_size: int = eqx.field(static=True, default=2)

    def __init__(self, gain: float | int = 2.0, slow_radius: float | int = 0.05):
        self.gain = jnp.asarray(gain, jnp.float32)
        self.slow_radius = jnp.asarray(slow_radius, jnp.float32)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        return _go_to(obs[2], obs[3], self.gain, self.slow_radius), state


class PatchOracleAgent(AbstractStatelessPolicy):
    """An L2 agent told where every patch is and how full: it reads
    `eqxevo.envs.privileged(Foraging(...))`'s observation (the readings and
    reserves, then every patch from the body and every amount) and drives to the
    patch with the most `need_k * amount / (distance + reach)` (`need_k` how far
    reserve k sits below the setpoint); while every reserve is at or above it,
    it drives away from the nearest patch, so as not to eat more.

    Arguments:
        num_resources, patches_per_resource: the environment's K and M.
        reach: distance added in the score, so near patches do not win by
            nearness alone.
        gain, slow_radius: as `SourceOracleAgent`'s.
    """

    reach: Float[Array, ""]
    gain: Float[Array, ""]
    slow_radius: Float[Array, ""]
    num_resources: int = eqx.field(static=True)
    patches_per_resource: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self,
        num_resources: int = 2,
        patches_per_resource: int = 3,
        reach: float | int = 0.2,
        gain: float | int = 2.0,
        slow_radius: float | int = 0.02,
    ):
        self.num_resources = positive_int("num_resources", num_resources)
        self.patches_per_resource = positive_int(
            "patches_per_resource", patches_per_resource
        )
        self.obs_size = 3 * num_resources + 3 * num_resources * patches_per_resource
        self.action_size = 2
        self.reach = jnp.asarray(reach, jnp.float32)
        self.gain = jnp.asarray(gain, jnp.float32)
        self.slow_radius = jnp.asarray(slow_radius, jnp.float32)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        k, m = self.num_resources, self.patches_per_resource
        need = jnp.maximum(-obs[2 * k : 3 * k], 0.0)  # below the setpoint
        told = obs[3 * k :]
        where = told[: 2 * k * m].reshape(k, m, 2)
        amounts = told[2 * k * m :].reshape(k, m)
        distance = jnp.sqrt(jnp.sum(where * where, axis=-1))
        score = (need[:, None] * amounts / (distance + self.reach)).reshape(-1)
        flat = where.reshape(-1, 2)
        target = jnp.where(
            jnp.max(score) > 0,
            flat[jnp.argmax(score)],
            -flat[jnp.argmin(distance.reshape(-1))],  # away from the nearest
        )
        return _go_to(target[0], target[1], self.gain, self.slow_radius), state


__all__ = [
    "AbstractSteeringAgent",
    "BraitenbergAgent",
    "ForagerAgent",
    "PatchOracleAgent",
    "ReactiveTasteAgent",
    "SeasonOracleAgent",
    "SourceOracleAgent",
    "TasteLearnerAgent",
    "TasteMemory",
]
