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


class TasteLearnerAgent(AbstractPolicy):
    """A forager for `LongHorizon` that learns which resource nourishes.

    Its lifetime state is a belief `b` in [-1, 1] (+1: A nourishes, -1: B
    does). After every step it credits the taste to the resource it is closer
    to: `b <- clip(b + learning_rate * taste * tanh(a), -1, 1)`, with `a` the
    mean log reading of A minus that of B. It steers like `ForagerAgent`: toward
    the resource it believes nourishing while its energy is below the setpoint,
    away from it above, and always away from the other, weighting the two
    contrasts by the belief.

    Arguments:
        learning_rate: belief change per unit of taste (0: no learning; the
            default is the best of a grid on L4, see `examples/baselines.py`).
        initial_belief: belief at birth (+1: A nourishes; 0: undecided).
        gain: steering gain (default: the L2 forager's).
        base_speed: forward command, in [-1, 1] (default: the L2 forager's).
    """

    learning_rate: Float[Array, ""]
    initial_belief: Float[Array, ""]
    gain: Float[Array, ""]
    base_speed: Float[Array, ""]
    obs_size: int = eqx.field(static=True, default=6)  # LongHorizon's
    action_size: int = eqx.field(static=True, default=2)

    def __init__(
        self,
        learning_rate: float | int = 0.5,
        initial_belief: float | int = 0.0,
        gain: float | int = 4.0,
        base_speed: float | int = 1.0,
    ):
        self.learning_rate = jnp.asarray(learning_rate, jnp.float32)
        self.initial_belief = jnp.asarray(initial_belief, jnp.float32)
        self.gain = jnp.asarray(gain, jnp.float32)
        self.base_speed = jnp.asarray(base_speed, jnp.float32)

    def initial_state(self, key: PRNGKey) -> Float[Array, ""]:
        del key
        return self.initial_belief

    def __call__(
        self, obs: Observation, state: Float[Array, ""]
    ) -> tuple[Action, Float[Array, ""]]:
        a_left, a_right, b_left, b_right, energy, taste = obs
        closer_to_a = jnp.tanh(0.5 * (a_left + a_right) - 0.5 * (b_left + b_right))
        belief = jnp.clip(state + self.learning_rate * taste * closer_to_a, -1.0, 1.0)
        need = -energy  # energy relative to the setpoint: > 0 is hungry
        scale = jnp.maximum(jnp.abs(need), _EPS)
        # Approach what nourishes (avoid it when full); shun what harms, less
        # strongly, so an undecided agent (b = 0) still explores both.
        good, bad = need / scale, -0.5
        weight_a = 0.5 * (1 + belief) * good + 0.5 * (1 - belief) * bad
        weight_b = 0.5 * (1 - belief) * good + 0.5 * (1 + belief) * bad
        steer = self.gain * (
            weight_a * (a_right - a_left) + weight_b * (b_right - b_left)
        )
        return _motors(self.base_speed, 0.5 * steer), belief


__all__ = [
    "AbstractSteeringAgent",
    "BraitenbergAgent",
    "ForagerAgent",
    "TasteLearnerAgent",
]
