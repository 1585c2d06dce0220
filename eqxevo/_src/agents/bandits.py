"""Reference agents of the meta-RL bandits (`eqxevo._src.envs.bandits`): win-stay
lose-shift, Thompson sampling, Bayes-UCB, the change-point Bayes filter, an oracle.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jax.scipy.special import betainc

from .._checks import int_at_least
from .._types import Array, Float, Int, PRNGKey
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy, AbstractStatelessPolicy


def _is_traced(x: Array) -> bool:
    return isinstance(x, jax.core.Tracer)  # pyright: ignore[reportAttributeAccessIssue]


def _show(x: Array) -> str:
    """A concrete float32 scalar as its shortest text (`0.9`, not `0.899999976`)."""
    return str(np.asarray(x)[()])


class AbstractKArmedAgent(AbstractPolicy):
    """An agent for a K-armed `AbstractBandit`, reading its observation
    `[one-hot last arm (K), last reward, t / H]` and scoring the arms (the bandit
    pulls the argmax, the lowest index on a tie)."""

    num_arms: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def read(
        self, obs: Observation
    ) -> tuple[Int[Array, ""], Float[Array, ""], Float[Array, ""]]:
        """`(last arm, last reward, t / H)`; the last arm is -1 before the
        episode's first pull (a one-hot of zeros)."""
        k = self.num_arms
        onehot = obs[:k]
        arm = jnp.where(jnp.max(onehot) > 0.5, jnp.argmax(onehot), -1)
        return arm.astype(jnp.int32), obs[k], obs[k + 1]


def _sizes(agent: AbstractKArmedAgent, num_arms: int, privileged: int = 0) -> None:
    agent.num_arms = int_at_least("num_arms", num_arms, 2)
    agent.obs_size = agent.num_arms + 2 + privileged
    agent.action_size = agent.num_arms


def _pick(arm: Int[Array, ""], num_arms: int) -> Action:
    """Scores that pull `arm`: 1 for it, -1 for the others."""
    return jnp.where(jnp.arange(num_arms) == arm, 1.0, -1.0).astype(jnp.float32)


class KArmedWinStayLoseShiftAgent(AbstractKArmedAgent, AbstractStatelessPolicy):
    """Win-stay, lose-shift over K arms: pull the last arm again after a reward,
    the next one, `(last + 1) mod K`, after none; arm 0 before the first pull.

    It reads only the current observation: a policy without memory (Robbins,
    H. (1952). Some aspects of the sequential design of experiments. Bull. AMS
    58(5)).

    Arguments:
        num_arms: K (>= 2).
    """

    def __init__(self, num_arms: int = 2):
        _sizes(self, num_arms)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        arm, reward, _ = self.read(obs)
        shift = (arm + 1) % self.num_arms
        pull = jnp.where(arm < 0, 0, jnp.where(reward > 0.5, arm, shift))
        return _pick(pull, self.num_arms), state


class ArmCounts(eqx.Module):
    """Successes and failures of every arm this episode.

    Attributes:
        successes, failures: per arm, as floats (Beta posterior parameters less 1).
        clock: the last observation's `t / H` (a lower or equal one starts a new
            episode: the counts start afresh).
    """

    successes: Float[Array, " k"]
    failures: Float[Array, " k"]
    clock: Float[Array, ""]

    @classmethod
    def empty(cls, num_arms: int) -> "ArmCounts":
        zeros = jnp.zeros((num_arms,), jnp.float32)
        # An infinite last clock: the first observation starts an episode.
        return cls(zeros, zeros, jnp.full((), jnp.inf, jnp.float32))


def _count(
    agent: AbstractKArmedAgent, obs: Observation, counts: ArmCounts
) -> ArmCounts:
    """`counts` with the pull `obs` reports added (or emptied on a new episode)."""
    arm, reward, clock = agent.read(obs)
    fresh = clock <= counts.clock  # a reset observation carries no pull
    pulled = (jnp.arange(agent.num_arms) == arm).astype(jnp.float32)
    successes = jnp.where(fresh, 0.0, counts.successes + pulled * reward)
    failures = jnp.where(fresh, 0.0, counts.failures + pulled * (1.0 - reward))
    return ArmCounts(successes, failures, clock)


class ThompsonState(eqx.Module):
    """`ThompsonSamplingAgent`'s lifetime state: the counts and the key it draws
    its samples from."""

    counts: ArmCounts
    key: PRNGKey


class ThompsonSamplingAgent(AbstractKArmedAgent):
    """Thompson sampling (Thompson 1933) under a uniform prior: every step draws
    `theta_k ~ Beta(1 + s_k, 1 + f_k)` for each arm (s, f its successes and
    failures this episode) and pulls `argmax_k theta_k`; its action is
    `2 theta - 1`.

    Thompson, W. R. (1933). On the likelihood that one unknown probability
    exceeds another in view of the evidence of two samples. Biometrika 25(3/4).

    Arguments:
        num_arms: K (>= 2).
    """

    def __init__(self, num_arms: int = 2):
        _sizes(self, num_arms)

    def initial_state(self, key: PRNGKey) -> ThompsonState:
        # The key is part of the lifetime state: the agent stays a pure function.
        return ThompsonState(ArmCounts.empty(self.num_arms), key)

    def __call__(
        self, obs: Observation, state: ThompsonState
    ) -> tuple[Action, ThompsonState]:
        counts = _count(self, obs, state.counts)
        next_key, draw_key = jr.split(state.key)
        theta = jr.beta(
            draw_key, 1.0 + counts.successes, 1.0 + counts.failures, dtype=jnp.float32
        )
        return 2.0 * theta - 1.0, ThompsonState(counts, next_key)


QUANTILE_STEPS = 24
"""Bisection steps of `beta_quantile`: the bracket shrinks to 2^-24 (float32's
resolution below 1)."""


def beta_quantile(
    a: Float[Array, "*shape"],
    b: Float[Array, "*shape"],
    level: Float[Array, "*shape"],
    num_steps: int = QUANTILE_STEPS,
) -> Float[Array, "*shape"]:
    """The quantile of level `level` of `Beta(a, b)`, by `num_steps` bisection
    steps on `jax.scipy.special.betainc` over [0, 1].

    The answer is the midpoint of a bracket of width `2^-num_steps` around where
    float32 `betainc` crosses `level`. With the default 24 steps, for `a, b >= 1`
    and levels in [0, 0.999], it is within 1e-5 of the exact quantile for
    `a + b <= 102` (the counts of a 100-pull episode) and within 5e-5 for
    `a + b <= 1002` (measured against `scipy.stats.beta.ppf` on 400,000 random
    cases each: at most 5.3e-6 and 2.1e-5); beyond the bisection's 3e-8 the
    error is float32 `betainc`'s, divided by the density.

    Arguments:
        a, b: the Beta parameters (> 0), of one shape.
        level: in [0, 1], of the same shape.
        num_steps: bisection steps (a static int).

    Returns:
        the quantile, in [0, 1], of the arguments' shape.
    """
    low = jnp.zeros(level.shape, jnp.float32)
    high = jnp.ones_like(low)

    def halve(_: Array, bracket: tuple[Array, Array]) -> tuple[Array, Array]:
        low, high = bracket
        mid = 0.5 * (low + high)
        below = betainc(a, b, mid) < level
        return jnp.where(below, mid, low), jnp.where(below, high, mid)

    low, high = jax.lax.fori_loop(0, num_steps, halve, (low, high))
    return 0.5 * (low + high)


class BayesUCBAgent(AbstractKArmedAgent):
    """Bayes-UCB (Kaufmann, Cappé & Garivier 2012, with c = 0) under a uniform
    prior: at the t-th pull of an episode (t from 1) it pulls the arm whose
    posterior `Beta(1 + s_k, 1 + f_k)` has the largest quantile of level
    `1 - 1/t` (`beta_quantile`); its action is `2 q - 1`. Deterministic: the
    first pull (level 0, every quantile 0) is arm 0.

    Kaufmann, E., Cappé, O. & Garivier, A. (2012). On Bayesian upper confidence
    bounds for bandit problems. AISTATS, PMLR 22.

    Arguments:
        num_arms: K (>= 2).
    """

    def __init__(self, num_arms: int = 2):
        _sizes(self, num_arms)

    def initial_state(self, key: PRNGKey) -> ArmCounts:
        del key
        return ArmCounts.empty(self.num_arms)

    def __call__(self, obs: Observation, state: ArmCounts) -> tuple[Action, ArmCounts]:
        counts = _count(self, obs, state)
        pulls = jnp.sum(counts.successes + counts.failures)
        level = jnp.full((self.num_arms,), 1.0 - 1.0 / (pulls + 1.0), jnp.float32)
        q = beta_quantile(1.0 + counts.successes, 1.0 + counts.failures, level)
        return 2.0 * q - 1.0, counts


class ReversalBelief(eqx.Module):
    """`ChangePointBayesAgent`'s lifetime state.

    Attributes:
        belief: `belief[g, s]`, the posterior probability that arm g paid
            `p_high` at the last pull and that the swap had (s = 1) or had not
            (s = 0) happened by then, given the episode's pulls; before the first
            pull, the prior (g a fair coin, no swap).
        pulls: pulls so far this episode, t.
        clock: the last observation's `t / H` (a lower or equal one starts a new
            episode).
    """

    belief: Float[Array, "2 2"]
    pulls: Int[Array, ""]
    clock: Float[Array, ""]


def _prior() -> Float[Array, "2 2"]:
    return jnp.array([[0.5, 0.0], [0.5, 0.0]], jnp.float32)


class ChangePointBayesAgent(AbstractKArmedAgent):
    """The exact Bayesian filter of `ReversalBandit`: it knows `p_high`, `p_low`
    and the uniform prior of the swap's step tau, keeps the posterior over
    (which arm is good, whether the swap has happened) and pulls the arm more
    likely good now (arm 0 on a tie); its action is `(P_0 - P_1, P_1 - P_0)`.

    Uniform tau on `[lo, hi] = [round(change_min H), round(change_max H)]` is a
    hazard `h_t = P(tau = t | tau >= t) = 1 / (hi - t + 1)` for `lo <= t <= hi`
    (0 elsewhere), so the filter over the four states `(g, swapped)` is exact:
    before pull t, mass `h_t` of each unswapped state moves to the swapped state
    of the other arm; after it, each state is weighted by the likelihood of the
    outcome (`p_high` or `p_low` for a reward on the arm it says is good or
    not; 1 minus that for none) and the belief renormalised. H is read from the
    observation: `t / (t / H)` once a pull has been made (before it, the prior
    is symmetric and the hazard does not change which arm is likelier). It
    starts afresh when the observation's time goes back (a new episode).

    Arguments:
        p_high, p_low: the arms' success probabilities (0 <= p_low <= p_high <= 1).
        change_min, change_max: the swap's range as fractions of H (in [0, 1],
            change_min <= change_max): `ReversalBanditParams`'s.
    """

    p_high: Float[Array, ""]
    p_low: Float[Array, ""]
    change_min: Float[Array, ""]
    change_max: Float[Array, ""]

    def __init__(
        self,
        p_high: float | Float[Array, ""] = 0.8,
        p_low: float | Float[Array, ""] = 0.2,
        change_min: float | Float[Array, ""] = 0.25,
        change_max: float | Float[Array, ""] = 0.75,
    ):
        _sizes(self, 2)
        values = {
            "p_high": p_high,
            "p_low": p_low,
            "change_min": change_min,
            "change_max": change_max,
        }
        arrays = {name: jnp.asarray(v, jnp.float32) for name, v in values.items()}
        for name, x in arrays.items():
            if not _is_traced(x) and not 0.0 <= float(x) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]; got {_show(x)}")
        for low, high in (("p_low", "p_high"), ("change_min", "change_max")):
            xl, xh = arrays[low], arrays[high]
            if not (_is_traced(xl) or _is_traced(xh)) and float(xl) > float(xh):
                raise ValueError(
                    f"{low} must be <= {high}; got {low}={_show(xl)}, "
                    f"{high}={_show(xh)}"
                )
        self.p_high, self.p_low = arrays["p_high"], arrays["p_low"]
        self.change_min, self.change_max = arrays["change_min"], arrays["change_max"]

    def initial_state(self, key: PRNGKey) -> ReversalBelief:
        del key
        return ReversalBelief(
            _prior(), jnp.zeros((), jnp.int32), jnp.full((), jnp.inf, jnp.float32)
        )

    def _hazard(
        self, belief: Float[Array, "2 2"], t: Int[Array, ""], horizon: Array
    ) -> Float[Array, "2 2"]:
        """The belief before pull t, from the belief after pull t - 1."""
        first = jnp.round(self.change_min * horizon).astype(jnp.int32)
        last = jnp.round(self.change_max * horizon).astype(jnp.int32)
        remaining = jnp.maximum(last - t + 1, 1).astype(jnp.float32)
        h = jnp.where((t >= first) & (t <= last), 1.0 / remaining, 0.0)
        moved = h * belief[:, 0]  # unswapped, good arm g -> swapped, good arm 1 - g
        return jnp.stack(
            [belief[:, 0] - moved, belief[:, 1] + moved[::-1]], axis=1
        ).astype(jnp.float32)

    def __call__(
        self, obs: Observation, state: ReversalBelief
    ) -> tuple[Action, ReversalBelief]:
        arm, reward, clock = self.read(obs)
        fresh = clock <= state.clock
        pulls = jnp.where(fresh, 0, state.pulls + 1).astype(jnp.int32)
        # t / (t / H) is within a few ulps of H, so it rounds to H exactly (for
        # H < 2^22); unknown (and unused) before the first pull.
        horizon = jnp.round(pulls.astype(jnp.float32) / jnp.maximum(clock, 1e-30))
        before = self._hazard(state.belief, pulls - 1, horizon)
        good = jnp.arange(2) == arm  # states whose good arm is the one pulled
        paid = jnp.where(good, self.p_high, self.p_low)[:, None]
        likelihood = jnp.where(reward > 0.5, paid, 1.0 - paid)
        after = before * likelihood
        total = jnp.sum(after)
        # Outcomes the model rules out (p 0 or 1 and the wrong result): keep the
        # prior rather than divide by 0.
        after = jnp.where(total > 0.0, after / jnp.maximum(total, 1e-30), _prior())
        belief = jnp.where(fresh, _prior(), after)
        # Before the first pull the prior is symmetric: no hazard is needed.
        upcoming = jnp.where(fresh, _prior(), self._hazard(belief, pulls, horizon))
        good_now = jnp.sum(upcoming, axis=1)
        lead = good_now[0] - good_now[1]
        action = jnp.stack([lead, -lead])
        return action, ReversalBelief(belief, pulls, clock)


class OracleBanditAgent(AbstractKArmedAgent, AbstractStatelessPolicy):
    """The oracle of the bandits: it reads the privileged observation
    (`eqxevo.envs.privileged(env)`: the observation, then the bandit's
    `privileged` vector of K values) and pulls the arm with the largest value:
    the best p of `IndependentBandit`, the good arm of `ReversalBandit`.

    Arguments:
        num_arms: K (>= 2); its `obs_size` is the bandit's plus K.
    """

    def __init__(self, num_arms: int = 2):
        _sizes(self, num_arms, privileged=num_arms)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        told = obs[self.num_arms + 2 :]
        return _pick(jnp.argmax(told), self.num_arms), state


__all__ = [
    "QUANTILE_STEPS",
    "AbstractKArmedAgent",
    "ArmCounts",
    "BayesUCBAgent",
    "ChangePointBayesAgent",
    "KArmedWinStayLoseShiftAgent",
    "OracleBanditAgent",
    "ReversalBelief",
    "ThompsonSamplingAgent",
    "ThompsonState",
    "beta_quantile",
]
