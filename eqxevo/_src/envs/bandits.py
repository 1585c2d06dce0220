"""Meta-RL Bernoulli bandits: independent arms drawn per episode (Wang et al. 2016,
Duan et al. 2016) and a two-armed reversal task whose good arm swaps once.
"""

import abc
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import int_at_least
from .._types import Array, Float, Int, PRNGKey
from .base import AbstractEnv, Action, Observation, StepResult
from .params import AbstractParams, count, fraction


class AbstractBanditState(eqx.Module):
    """What every bandit's observation shows: the last pull and the time.

    Attributes:
        last_arm: the arm pulled last, -1 before the episode's first pull.
        last_reward: its reward (0 before the first pull).
        time: pulls so far this episode, t.
    """

    last_arm: Int[Array, ""]
    last_reward: Float[Array, ""]
    time: Int[Array, ""]


def _first_pull_state() -> dict[str, Array]:
    # Strongly typed scalars: a weakly typed leaf would change the state's type.
    return {
        "last_arm": jnp.full((), -1, jnp.int32),
        "last_reward": jnp.zeros((), jnp.float32),
        "time": jnp.zeros((), jnp.int32),
    }


class AbstractBandit(AbstractEnv):
    """A Bernoulli bandit with `num_arms` arms and episodes of `episode_length`
    pulls H; members say what each arm pays at each step (`arm_probs`).

    Action: K float scores; the arm pulled is `argmax(action)` (the lowest index
    on a tie). It pays 1 with probability `p[arm]`, else 0: `reward = u < p[arm]`,
    u ~ U[0, 1) the step's only draw (`sample_noise`). Observation (K + 2): the
    one-hot of the last arm pulled (zeros before the first pull), the last
    reward, and `t / H` (0 at reset). `done` once `t` reaches H. `info`:
    `regret`, the step's expected regret `max_k p_k - p[arm]`, and `best_arm`,
    1 where the arm pulled is a best one.
    """

    num_arms: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    traced_param_checks: bool = eqx.field(static=True)

    @abc.abstractmethod
    def arm_probs(self, state: Any, params: Any) -> Float[Array, " k"]:
        """Each arm's probability of paying at the next pull (step `state.time`)."""

    def observe(self, state: AbstractBanditState, params: Any) -> Observation:
        """`[one-hot last arm (K), last reward, t / H]`."""
        arms = jnp.arange(self.num_arms, dtype=jnp.int32)
        last = (arms == state.last_arm).astype(jnp.float32)  # none: all zeros
        horizon = params.episode_length.astype(jnp.float32)
        clock = state.time.astype(jnp.float32) / horizon
        return jnp.concatenate([last, state.last_reward[None], clock[None]])

    def sample_noise(self, key: PRNGKey, params: Any) -> Float[Array, ""]:
        del params
        return jr.uniform(key, (), jnp.float32)

    def transition(
        self,
        state: AbstractBanditState,
        action: Action,
        params: Any,
        noise: Float[Array, ""],
    ) -> StepResult:
        probs = self.arm_probs(state, params)
        arm = jnp.argmax(action).astype(jnp.int32)
        paid = probs[arm]
        reward = (noise < paid).astype(jnp.float32)
        time = state.time + 1
        new_state = eqx.tree_at(
            lambda s: (s.last_arm, s.last_reward, s.time),
            state,
            (arm, reward, time),
        )
        best = jnp.max(probs)
        info = {
            "regret": best - paid,
            "best_arm": (paid >= best).astype(jnp.float32),
        }
        done = time >= params.episode_length
        return self.observe(new_state, params), new_state, reward, done, info

    def step(self, key: PRNGKey, state: Any, action: Action, params: Any) -> StepResult:
        # One home for the step's randomness, so a reference can replay it.
        return self.transition(state, action, params, self.sample_noise(key, params))


# -- independent arms ------------------------------------------------------------------


class IndependentBanditParams(AbstractParams):
    """Parameters of `IndependentBandit`; every field is a scalar array (vmappable).

    Arguments (keyword only):
        episode_length: pulls per episode, H.
    """

    episode_length: Int[Array, ""] = count(100)


class IndependentBanditState(AbstractBanditState):
    """State of `IndependentBandit`: the last pull, the time (see
    `AbstractBanditState`) and `probs`, each arm's success probability."""

    probs: Float[Array, " k"]


class IndependentBandit(AbstractBandit):
    """The meta-RL Bernoulli bandit: every episode draws each arm's success
    probability `p_k ~ U[0, 1]` independently, so the best arm must be found
    again within each episode.

    Wang, J. X. et al. (2016). Learning to reinforcement learn. arXiv:1611.05763.
    Duan, Y. et al. (2016). RL^2: Fast reinforcement learning via slow
    reinforcement learning. arXiv:1611.02779.

    Pulls, observation, reward and `info` are `AbstractBandit`'s. A uniform prior
    makes Thompson sampling and Bayes-UCB the natural learners; an oracle that
    knows p earns `E[max_k p_k] = K / (K + 1)` per pull. `privileged` is p.

    Arguments:
        num_arms: K (>= 2).
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

    Example:
        >>> env = IndependentBandit(5)
        >>> obs, state = env.reset(jr.key(0), env.default_params())
    """

    def __init__(self, num_arms: int = 2, *, traced_param_checks: bool = False):
        self.num_arms = int_at_least("num_arms", num_arms, 2)
        self.obs_size = self.num_arms + 2
        self.action_size = self.num_arms
        self.traced_param_checks = traced_param_checks

    def default_params(self) -> IndependentBanditParams:
        return IndependentBanditParams()

    def arm_probs(
        self, state: IndependentBanditState, params: IndependentBanditParams
    ) -> Float[Array, " k"]:
        del params
        return state.probs

    def privileged(
        self, state: IndependentBanditState, params: IndependentBanditParams
    ) -> Float[Array, " k"]:
        del params
        return state.probs

    def reset(
        self, key: PRNGKey, params: IndependentBanditParams
    ) -> tuple[Observation, IndependentBanditState]:
        probs = jr.uniform(key, (self.num_arms,), jnp.float32)
        # The params are checked once per episode, riding on a value reset uses.
        probs = params.checked(probs, traced=self.traced_param_checks)
        state = IndependentBanditState(probs=probs, **_first_pull_state())
        return self.observe(state, params), state


# -- reversal --------------------------------------------------------------------------


class ReversalBanditParams(AbstractParams):
    """Parameters of `ReversalBandit`; every field is a scalar array (vmappable).

    Arguments (keyword only):
        p_high: the good arm's success probability.
        p_low: the other arm's (<= p_high).
        change_min, change_max: the swap's step tau is uniform on the integers
            from `round(change_min * H)` to `round(change_max * H)` (rounded
            half to even; change_min <= change_max).
        episode_length: pulls per episode, H.
    """

    orders = (("p_low", "p_high"), ("change_min", "change_max"))

    p_high: Float[Array, ""] = fraction(0.8)
    p_low: Float[Array, ""] = fraction(0.2)
    change_min: Float[Array, ""] = fraction(0.25)
    change_max: Float[Array, ""] = fraction(0.75)
    episode_length: Int[Array, ""] = count(200)


def change_range(
    params: ReversalBanditParams, horizon: Float[Array, ""]
) -> tuple[Int[Array, ""], Int[Array, ""]]:
    """The first and last step the swap may come at, for a horizon H (float32):
    `round(change_min * H)` and `round(change_max * H)`, computed in float32."""
    first = jnp.round(params.change_min * horizon).astype(jnp.int32)
    last = jnp.round(params.change_max * horizon).astype(jnp.int32)
    return first, last


class ReversalBanditState(AbstractBanditState):
    """State of `ReversalBandit`: the last pull, the time (see
    `AbstractBanditState`), plus

    Attributes:
        first_good: the arm that pays `p_high` before the swap (0 or 1).
        change: tau, the first step at which the other arm pays `p_high`.
    """

    first_good: Int[Array, ""]
    change: Int[Array, ""]


class ReversalBandit(AbstractBandit):
    """Reversal learning: two arms pay `p_high` and `p_low`; which is good is a
    fair coin per episode, and they swap once, unannounced, at step tau.

    Step t pays with `p_high` on arm `g_t` and `p_low` on the other, where
    `g_t = first_good` for `t < tau` and `1 - first_good` from tau on; tau is
    uniform on `[round(change_min H), round(change_max H)]`, drawn at reset
    (`change_range`). A learner must notice the swap and shift; an agent that
    learned once and holds on does not. `privileged` is the one-hot of `g_t`.

    The classic reversal-learning task, here as a two-armed bandit with a
    single unannounced reversal: Costa, V. D. et al. (2015). Reversal learning
    and dopamine: a Bayesian perspective. J. Neurosci. 35(6).

    Pulls, observation (K = 2), reward and `info` are `AbstractBandit`'s.

    Arguments:
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).
    """

    def __init__(self, *, traced_param_checks: bool = False):
        self.num_arms = 2
        self.obs_size = 4
        self.action_size = 2
        self.traced_param_checks = traced_param_checks

    def default_params(self) -> ReversalBanditParams:
        return ReversalBanditParams()

    def good_arm(self, state: ReversalBanditState) -> Int[Array, ""]:
        """The arm paying `p_high` at step `state.time`."""
        swapped = state.time >= state.change
        return jnp.where(swapped, 1 - state.first_good, state.first_good)

    def arm_probs(
        self, state: ReversalBanditState, params: ReversalBanditParams
    ) -> Float[Array, "2"]:
        good = self.good_arm(state) == jnp.arange(2, dtype=jnp.int32)
        return jnp.where(good, params.p_high, params.p_low)

    def privileged(
        self, state: ReversalBanditState, params: ReversalBanditParams
    ) -> Float[Array, "2"]:
        del params
        good = self.good_arm(state) == jnp.arange(2, dtype=jnp.int32)
        return good.astype(jnp.float32)

    def reset(
        self, key: PRNGKey, params: ReversalBanditParams
    ) -> tuple[Observation, ReversalBanditState]:
        coin_key, change_key = jr.split(key)
        first, last = change_range(params, params.episode_length.astype(jnp.float32))
        change = jr.randint(change_key, (), first, last + 1, jnp.int32)
        change = params.checked(change, traced=self.traced_param_checks)
        state = ReversalBanditState(
            first_good=jr.bernoulli(coin_key).astype(jnp.int32),
            change=change,
            **_first_pull_state(),
        )
        return self.observe(state, params), state


__all__ = [
    "AbstractBandit",
    "AbstractBanditState",
    "IndependentBandit",
    "IndependentBanditParams",
    "IndependentBanditState",
    "ReversalBandit",
    "ReversalBanditParams",
    "ReversalBanditState",
    "change_range",
]
