"""Reference agents: the baselines evolved agents must beat (docs/environments.md).

Braitenberg, V. (1984). Vehicles: Experiments in Synthetic Psychology. MIT Press.
Robbins, H. (1952). Some aspects of the sequential design of experiments. Bulletin
of the AMS 58(5) (win-stay, lose-shift).
"""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from ._checks import int_at_least, positive_int
from ._types import Array, Float, Int, PRNGKey, Scalar
from .envs.base import Action, Observation
from .nets.base import AbstractPolicy, AbstractStatelessPolicy

_EPS = 1e-6
"""Keeps a normalisation finite when every need is zero."""


class RandomAgent(AbstractPolicy):
    """Uniform random motor commands in [-1, 1]; its lifetime state is a key.

    Arguments:
        obs_size: size of the observation it ignores.
        action_size: number of commands.
    """

    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(self, obs_size: int, action_size: int = 2):
        self.obs_size = positive_int("obs_size", obs_size)
        self.action_size = positive_int("action_size", action_size)

    def initial_state(self, key: PRNGKey) -> PRNGKey:
        # The key is the lifetime state: the agent stays a pure function.
        return key

    def __call__(self, obs: Observation, state: PRNGKey) -> tuple[Action, PRNGKey]:
        del obs
        next_key, action_key = jr.split(state)
        action = jr.uniform(action_key, (self.action_size,), jnp.float32, -1.0, 1.0)
        return action, next_key


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


# -- gymnax's BernoulliBandit-misc ---------------------------------------------------


class AbstractBanditAgent(AbstractPolicy):
    """An agent for gymnax's two-armed BernoulliBandit-misc, reading its observation
    `[last reward, one-hot last arm (2), time]` (undoing `GymnaxEnv`'s
    `normalize_obs` map when given its `obs_center` and `obs_scale`) and scoring
    the two arms: `GymnaxEnv.to_gymnax_action` pulls the argmax (arm 0 on a tie).
    """

    obs_center: tuple[float, ...] = eqx.field(static=True)
    obs_scale: tuple[float, ...] = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def read(
        self, obs: Observation
    ) -> tuple[Float[Array, ""], Int[Array, ""], Float[Array, ""]]:
        """`(last reward, last arm, time)` from an observation; the time in the
        environment's own units (increasing within an episode, lowest at reset)."""
        center = jnp.asarray(self.obs_center, jnp.float32)
        scale = jnp.asarray(self.obs_scale, jnp.float32)
        raw = obs / scale + center
        return raw[0], (raw[2] > raw[1]).astype(jnp.int32), raw[3]


def _bandit_sizes(agent: AbstractBanditAgent) -> None:
    # The observation `[reward, one-hot arm (2), time]`; a score per arm.
    agent.obs_size, agent.action_size = 4, 2


def _check_affine(
    obs_center: tuple[float, ...] | None, obs_scale: tuple[float, ...] | None
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    center = (0.0,) * 4 if obs_center is None else tuple(map(float, obs_center))
    scale = (1.0,) * 4 if obs_scale is None else tuple(map(float, obs_scale))
    if len(center) != 4 or len(scale) != 4 or 0.0 in scale:
        raise ValueError(
            "obs_center and obs_scale must be 4 numbers each (scales non-zero), "
            f"as GymnaxEnv('BernoulliBandit-misc') has; got {center} and {scale}"
        )
    return center, scale


class WinStayLoseShiftAgent(AbstractBanditAgent, AbstractStatelessPolicy):
    """Win-stay, lose-shift on BernoulliBandit-misc: pull the last arm again after
    a reward, the other one after none (Robbins 1952). It reads only the current
    observation, so it has no memory: the best such policy when the arms pay
    p and 1 - p (with p = 0.1 it pulls the better arm 90% of the time).

    Arguments:
        obs_center, obs_scale: `GymnaxEnv`'s observation map with
            `normalize_obs=True` (`env.obs_center`, `env.obs_scale`); None: raw
            observations.
    """

    def __init__(
        self,
        obs_center: tuple[float, ...] | None = None,
        obs_scale: tuple[float, ...] | None = None,
    ):
        self.obs_center, self.obs_scale = _check_affine(obs_center, obs_scale)
        _bandit_sizes(self)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        reward, arm, _ = self.read(obs)
        pull = jnp.where(reward > 0.5, arm, 1 - arm)
        return jnp.where(jnp.arange(2) == pull, 1.0, -1.0), state


class BanditBelief(eqx.Module):
    """`GreedyBayesAgent`'s lifetime state.

    Attributes:
        evidence: successes of arm 0 plus failures of arm 1, less failures of arm
            0 and successes of arm 1, this episode.
        time: the last observation's time (a lower one starts a new episode).
    """

    evidence: Float[Array, ""]
    time: Float[Array, ""]


class GreedyBayesAgent(AbstractBanditAgent):
    """The greedy Bayesian learner of BernoulliBandit-misc: it knows that the arms
    pay `(p, 1 - p)` or `(1 - p, p)`, each with prior 1/2 (`p = reward_prob`), keeps
    the posterior, and pulls the arm with the higher posterior mean.

    Every pull is evidence: a reward from arm 0 or none from arm 1 counts +1 for
    "arm 0 pays 1 - p" (H), the other outcomes -1, so after evidence `e` the
    posterior is `P(H) = sigmoid(e * log((1 - p) / p))` and the arms' posterior
    means are `P(H) (1 - p) + (1 - P(H)) p` and its mirror. It starts afresh when
    the observation's time goes back (a new episode). Its action is
    `(m_0 - m_1, m_1 - m_0)`, `m` the posterior means.

    Arguments:
        reward_prob: p, the bandit's `reward_prob` param (in (0, 1)).
        obs_center, obs_scale: as for `WinStayLoseShiftAgent`.
    """

    reward_prob: Float[Array, ""]

    def __init__(
        self,
        reward_prob: float | Float[Array, ""] = 0.1,
        obs_center: tuple[float, ...] | None = None,
        obs_scale: tuple[float, ...] | None = None,
    ):
        self.obs_center, self.obs_scale = _check_affine(obs_center, obs_scale)
        _bandit_sizes(self)
        p = jnp.asarray(reward_prob, jnp.float32)
        traced = isinstance(p, jax.core.Tracer)  # pyright: ignore[reportAttributeAccessIssue]
        if not traced and not 0.0 < float(p) < 1.0:
            raise ValueError(f"reward_prob must be in (0, 1); got {float(p)}")
        self.reward_prob = p

    def initial_state(self, key: PRNGKey) -> BanditBelief:
        del key
        # An infinite last time: the first observation starts an episode.
        return BanditBelief(jnp.zeros((), jnp.float32), jnp.full((), jnp.inf))

    def __call__(
        self, obs: Observation, state: BanditBelief
    ) -> tuple[Action, BanditBelief]:
        reward, arm, time = self.read(obs)
        fresh = time <= state.time  # a reset observation carries no pull
        vote = jnp.where((arm == 0) == (reward > 0.5), 1.0, -1.0)
        evidence = jnp.where(fresh, 0.0, state.evidence + vote)
        p = self.reward_prob
        belief = jax.nn.sigmoid(evidence * jnp.log((1.0 - p) / p))
        # mean_0 - mean_1 = (2 P(H) - 1)(1 - 2p): exactly 0 on no evidence (the
        # tie goes to arm 0), whatever rounding the means would have.
        lead = (2.0 * belief - 1.0) * (1.0 - 2.0 * p)
        return jnp.stack([lead, -lead]), BanditBelief(evidence, time)


__all__ = [
    "AbstractBanditAgent",
    "AbstractSteeringAgent",
    "BanditBelief",
    "BraitenbergAgent",
    "ForagerAgent",
    "GreedyBayesAgent",
    "RandomAgent",
    "TasteLearnerAgent",
    "WinStayLoseShiftAgent",
]
