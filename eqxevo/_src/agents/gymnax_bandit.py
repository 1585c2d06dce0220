"""Reference agents of gymnax's two-armed BernoulliBandit-misc: win-stay
lose-shift (no memory) and the greedy Bayesian learner.

Robbins, H. (1952). Some aspects of the sequential design of experiments. Bulletin
of the AMS 58(5) (win-stay, lose-shift).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array, Float, Int, PRNGKey
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy, AbstractStatelessPolicy
from .base import observation_map


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
        self.obs_center, self.obs_scale = observation_map(
            obs_center, obs_scale, 4, "BernoulliBandit-misc"
        )
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
        self.obs_center, self.obs_scale = observation_map(
            obs_center, obs_scale, 4, "BernoulliBandit-misc"
        )
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
    "BanditBelief",
    "GreedyBayesAgent",
    "WinStayLoseShiftAgent",
]
