"""Reference agents of the cue–reward association task (`eqxevo.envs.CueReward`):
constant answers (no memory), the Bayes-optimal learner and the oracle.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from .._checks import int_at_least
from .._types import Array, Bool, Float, Int, PRNGKey
from ..envs.base import Action, Observation
from ..nets.base import AbstractPolicy, AbstractStatelessPolicy


def _answer(respond: Bool[Array, ""]) -> Action:
    """Scores `(don't respond, respond)` that pick `respond`."""
    return jnp.where(respond, jnp.array([-1.0, 1.0]), jnp.array([1.0, -1.0]))


class AbstractCueRewardAgent(AbstractPolicy):
    """An agent reading `CueReward`'s observation `[cue (cue_bits), go, last
    action (one-hot, 2), last reward, 1]` (then, for an oracle, the privileged
    vector) and scoring `(don't respond, respond)`."""

    cue_bits: int = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def read(
        self, obs: Observation
    ) -> tuple[
        Float[Array, " bits"],
        Bool[Array, ""],
        Float[Array, "2"],
        Float[Array, ""],
    ]:
        """`(cue bits, go, last action one-hot, last reward)` from an observation."""
        b = self.cue_bits
        return obs[:b], obs[b] > 0.5, obs[b + 1 : b + 3], obs[b + 3]


def _sizes(agent: AbstractCueRewardAgent, cue_bits: int, extra: int = 0) -> None:
    agent.cue_bits = int_at_least("cue_bits", cue_bits, 1)
    agent.obs_size, agent.action_size = agent.cue_bits + 5 + extra, 2


class ConstantResponseAgent(AbstractCueRewardAgent, AbstractStatelessPolicy):
    """Always respond, or never: no memory. Since the target is among a trial's
    cues in half the trials, either earns 0 per trial in expectation.

    Arguments:
        respond: whether it responds.
        cue_bits: the environment's `cue_bits`.
    """

    respond: bool = eqx.field(static=True)

    def __init__(self, respond: bool, cue_bits: int = 20):
        if not isinstance(respond, bool):
            raise ValueError(f"respond must be a bool; got {respond!r}")
        self.respond = respond
        _sizes(self, cue_bits)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        del obs
        return _answer(jnp.asarray(self.respond)), state


class CueBelief(eqx.Module):
    """`CueRewardLearner`'s lifetime state: what it knows of this episode.

    Attributes:
        patterns: the distinct cues seen, in the order first seen (rows from
            `num_seen` on are unused zeros).
        num_seen: how many distinct cues it has seen.
        in_trial: which of them the current trial has shown.
        candidate: which cues may still be the target; rows from `num_seen` on
            stand for the cues not seen yet (interchangeable: what it has
            learnt rules them all in or all out).
    """

    patterns: Float[Array, "cues bits"]
    num_seen: Int[Array, ""]
    in_trial: Bool[Array, " cues"]
    candidate: Bool[Array, " cues"]


class CueRewardLearner(AbstractCueRewardAgent):
    """The Bayes-optimal learner of `CueReward`.

    It knows the task's structure: `num_cues` cues, one the target with a
    uniform prior, the go step's reward telling whether the target was among
    the trial's cues (rewarded: it was iff it responded). Each such outcome
    rules out the cues it contradicts, so the posterior is uniform over the
    cues still consistent, the unseen ones included (they were in no trial).
    On the go step it responds iff the posterior probability that the target
    was among this trial's cues is > 1/2 (on exactly 1/2 it does not respond;
    both answers then earn 0 in expectation). What it learns does not depend
    on its answers, so answering greedily is optimal.

    Cues are told apart by their exact bits (each bit thresholded at 1/2). It
    starts afresh on an observation whose last-action one-hot is all zeros,
    which only a reset gives.

    Arguments:
        num_cues: the environment's `num_cues`.
        cue_bits: the environment's `cue_bits`.
    """

    num_cues: int = eqx.field(static=True)

    def __init__(self, num_cues: int = 4, cue_bits: int = 20):
        self.num_cues = int_at_least("num_cues", num_cues, 2)
        _sizes(self, cue_bits)

    def initial_state(self, key: PRNGKey) -> CueBelief:
        del key
        return self._start()

    def _start(self) -> CueBelief:
        n = self.num_cues
        return CueBelief(
            patterns=jnp.zeros((n, self.cue_bits), jnp.float32),
            num_seen=jnp.zeros((), jnp.int32),
            in_trial=jnp.zeros((n,), jnp.bool_),
            candidate=jnp.ones((n,), jnp.bool_),
        )

    def posterior(self, state: CueBelief) -> Float[Array, " cues"]:
        """The posterior over which cue is the target: the seen cues in the order
        first seen, then the unseen ones (each with an equal share)."""
        candidate = state.candidate.astype(jnp.float32)
        return candidate / jnp.sum(candidate)

    def __call__(self, obs: Observation, state: CueBelief) -> tuple[Action, CueBelief]:
        cue, go, last, reward = self.read(obs)
        fresh = jnp.sum(last) < 0.5  # no last action: a reset observation
        state = jax.tree.map(lambda a, b: jnp.where(fresh, a, b), self._start(), state)

        # A non-zero reward is a go step's outcome: the target was among that
        # trial's cues iff the answer (the last action) earned a reward.
        outcome = reward != 0.0
        target_in = (last[1] > last[0]) == (reward > 0.0)
        consistent = jnp.where(target_in, state.in_trial, ~state.in_trial)
        candidate = jnp.where(outcome, state.candidate & consistent, state.candidate)
        in_trial = state.in_trial & ~outcome

        # A cue: the row it matches, or the next free row if new.
        bits = (cue > 0.5).astype(jnp.float32)
        present = jnp.any(bits > 0.5)
        rows = jnp.arange(self.num_cues)
        match = jnp.all(state.patterns == bits, axis=1) & (rows < state.num_seen)
        known = jnp.any(match)
        row = jnp.where(known, jnp.argmax(match), state.num_seen)
        # A full table only happens in an environment with more than num_cues cues.
        row = jnp.minimum(row, self.num_cues - 1)
        new = present & ~known
        patterns = jnp.where(new & (rows == row)[:, None], bits, state.patterns)
        num_seen = state.num_seen + new.astype(jnp.int32)
        in_trial = in_trial | (present & (rows == row))

        # Respond iff P(target among this trial's cues) > 1/2, in whole numbers.
        inside = jnp.sum(candidate & in_trial)
        respond = go & (2 * inside > jnp.sum(candidate))
        return _answer(respond), CueBelief(patterns, num_seen, in_trial, candidate)


class CueRewardOracle(AbstractCueRewardAgent, AbstractStatelessPolicy):
    """Answers every trial right: it reads `eqxevo.envs.privileged(CueReward())`'s
    observation, whose last entry says whether the target has been shown in the
    trial so far, and on the go step responds iff it has.

    Arguments:
        cue_bits: the environment's `cue_bits`.
    """

    def __init__(self, cue_bits: int = 20):
        _sizes(self, cue_bits, extra=1)

    def __call__(self, obs: Observation, state: None) -> tuple[Action, None]:
        _, go, _, _ = self.read(obs)
        return _answer(go & (obs[-1] > 0.5)), state


__all__ = [
    "AbstractCueRewardAgent",
    "ConstantResponseAgent",
    "CueBelief",
    "CueRewardLearner",
    "CueRewardOracle",
]
