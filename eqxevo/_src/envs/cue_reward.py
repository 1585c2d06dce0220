"""The cue–reward association task of Miconi, Rawal, Clune & Stanley (2019),
"Backpropamine: training self-modifying neural networks with differentiable
neuromodulated plasticity", ICLR: learn within an episode which cue pays.
"""

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import int_at_least
from .._types import Array, Bool, Float, Int, PRNGKey
from .base import AbstractEnv, Action, Observation, StepResult
from .params import AbstractParams, count, positive

MAX_CUE_BITS = 30
"""Cue codes are int32 draws below `2**cue_bits`."""


class CueRewardParams(AbstractParams):
    """Parameters of `CueReward`; every field is a scalar array (vmappable).

    Arguments (keyword only):
        reward: the reward of a right answer (a wrong one gets `-reward`).
        episode_length: steps in an episode (trials need not divide it: an
            unfinished last trial has no go step).

    Each field's default and range is declared below.
    """

    reward: Float[Array, ""] = positive(1.0)
    episode_length: Int[Array, ""] = count(200)


class CueRewardState(eqx.Module):
    """State of `CueReward`.

    Attributes:
        cues: the episode's cues, one distinct non-zero bit pattern per row.
        target: the index of the rewarded cue.
        schedule: the current trial's middle steps: the index of the cue each
            shows, -1 for a blank.
        time: steps since the episode began (the trial's step is
            `time % trial_steps`).
    """

    cues: Float[Array, "cues bits"]
    target: Int[Array, ""]
    schedule: Int[Array, " slots"]
    time: Int[Array, ""]


class CueRewardNoise(eqx.Module):
    """The random draws of one `CueReward` step: what the next trial's schedule
    needs, drawn every step (used only where a trial ends).

    Attributes:
        order: uniform [0, 1) draws; the stable argsort of the first `num_cues`
            picks the trial's cues (its first `num_cues // 2`), that of the
            other `slots` the middle steps they are shown on.
    """

    order: Float[Array, " draws"]


class CueReward(AbstractEnv):
    """The cue–reward association task (Miconi et al. 2019, Backpropamine).

    An episode draws `num_cues` distinct cues (bit patterns of `cue_bits` bits)
    and makes one of them, uniformly, the target. Then come trials of
    `trial_steps = num_cues // 2 + filler + 2` steps each: a blank step; the
    `slots = num_cues // 2 + filler` middle steps, on which `num_cues // 2` cues
    (drawn without replacement) are shown once each, in random places among
    `filler` blanks; and a go step. On the go step the agent answers: respond
    (action index 1 scores higher) or not (index 0; a tie is "not"). The answer
    earns `+reward` if it responds and the target was among the trial's cues or
    it does not and the target was not, `-reward` otherwise; every other step
    earns 0. The target is shown in exactly half the trials on average, so no
    policy that does not find out which cue pays earns anything in expectation.

    The observation is `[cue (cue_bits), go, last action (one-hot, 2), last
    reward, 1]`: the cue's bits (zeros on blank and go steps), the go bit, the
    answer the agent gave on the step before, one-hot (index 1: it responded;
    zeros after a reset, which is how an agent can tell a new episode), its
    reward (the go step's reward shows on the next trial's blank step), and a
    constant bias 1: the paper's inputs without its time input.

    Cues are distinct by construction: their codes are a uniform random
    `num_cues`-subset of `1 .. 2**cue_bits - 1`, drawn with Floyd's algorithm
    (Bentley & Floyd 1987); none is all zeros, so none looks like a blank.

    Privileged information (`privileged`): whether the target has been shown in
    the current trial so far (1.0 or 0.0).

    Arguments:
        num_cues: cues per episode (even, >= 2).
        cue_bits: bits per cue (`2**cue_bits - 1 >= num_cues`, at most 30).
        filler: blank middle steps per trial (>= 0).
        traced_param_checks: also check traced params in `reset` (see
            docs/environments.md, "Params"; off by default).

    Example:
        >>> env = CueReward()
        >>> fitness, summary = eqxevo.rollout(jr.key(0), policy, env,
        ...                                   env.default_params(), 200)
    """

    num_cues: int = eqx.field(static=True)
    cue_bits: int = eqx.field(static=True)
    filler: int = eqx.field(static=True)
    traced_param_checks: bool = eqx.field(static=True)
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self,
        num_cues: int = 4,
        cue_bits: int = 20,
        filler: int = 1,
        *,
        traced_param_checks: bool = False,
    ):
        num_cues = int_at_least("num_cues", num_cues, 2)
        if num_cues % 2:
            raise ValueError(
                f"num_cues must be even (half the cues show in each trial); got "
                f"{num_cues}"
            )
        cue_bits = int_at_least("cue_bits", cue_bits, 1)
        if not num_cues <= 2**cue_bits - 1 or cue_bits > MAX_CUE_BITS:
            least = num_cues.bit_length()  # the fewest bits with num_cues codes > 0
            raise ValueError(
                f"cue_bits must be in [{least}, {MAX_CUE_BITS}] for {num_cues} "
                f"distinct non-zero cues; got {cue_bits}"
            )
        self.num_cues = num_cues
        self.cue_bits = cue_bits
        self.filler = int_at_least("filler", filler, 0)
        self.traced_param_checks = traced_param_checks
        # cue bits, go, last action (2), last reward, bias
        self.obs_size = cue_bits + 5
        self.action_size = 2

    @property
    def slots(self) -> int:
        """Middle steps of a trial: `num_cues // 2` cues and `filler` blanks."""
        return self.num_cues // 2 + self.filler

    @property
    def trial_steps(self) -> int:
        """Steps per trial: a blank, the middle steps, the go step."""
        return self.slots + 2

    def default_params(self) -> CueRewardParams:
        return CueRewardParams()

    def arrange(self, order: Float[Array, " draws"]) -> Int[Array, " slots"]:
        """A trial's schedule (`CueRewardState.schedule`) from its draws
        (`CueRewardNoise.order`)."""
        n, half = self.num_cues, self.num_cues // 2
        picked = jnp.argsort(order[:n], stable=True)[:half].astype(jnp.int32)
        places = jnp.argsort(order[n:], stable=True)[:half]
        return jnp.full((self.slots,), -1, jnp.int32).at[places].set(picked)

    def draw_cues(self, key: PRNGKey) -> Float[Array, "cues bits"]:
        """`num_cues` distinct non-zero bit patterns: their codes a uniform random
        subset of `1 .. 2**cue_bits - 1` (Floyd's algorithm), in bits (LSB first)."""
        n, top = self.num_cues, 2**self.cue_bits - 1
        # Floyd: for j = top - n + 1 .. top draw t in [1, j]; keep t, or j if t
        # is taken. Every n-subset comes out equally likely, distinct by design.
        highs = jnp.arange(top - n + 1, top + 1, dtype=jnp.int32)
        draws = jr.randint(key, (n,), 1, highs + 1, jnp.int32)
        codes = jnp.zeros((n,), jnp.int32)  # 0: no code yet (codes are >= 1)
        for i in range(n):
            taken = jnp.any(codes == draws[i])
            codes = codes.at[i].set(jnp.where(taken, highs[i], draws[i]))
        places = jnp.arange(self.cue_bits, dtype=jnp.int32)
        return ((codes[:, None] >> places) & 1).astype(jnp.float32)

    def observe(
        self,
        state: CueRewardState,
        respond: Bool[Array, ""] | None,
        reward: Float[Array, ""],
    ) -> Observation:
        """The observation of `state`, after an answer `respond` (None: a reset)
        that earned `reward`."""
        phase = state.time % self.trial_steps
        slot = jnp.clip(phase - 1, 0, self.slots - 1)
        shown = state.schedule[slot]
        visible = (phase >= 1) & (phase <= self.slots) & (shown >= 0)
        cue = jnp.where(visible, state.cues[jnp.maximum(shown, 0)], 0.0)
        go = (phase == self.trial_steps - 1).astype(jnp.float32)
        if respond is None:
            last = jnp.zeros((2,), jnp.float32)
        else:
            last = (jnp.arange(2) == respond.astype(jnp.int32)).astype(jnp.float32)
        bias = jnp.ones((1,), jnp.float32)
        return jnp.concatenate([cue, go[None], last, reward[None], bias])

    def reset(
        self, key: PRNGKey, params: CueRewardParams
    ) -> tuple[Observation, CueRewardState]:
        cue_key, target_key, order_key = jr.split(key, 3)
        target = jr.randint(target_key, (), 0, self.num_cues, jnp.int32)
        # The params are checked once per episode, riding on a value reset uses.
        target = params.checked(target, traced=self.traced_param_checks)
        state = CueRewardState(
            cues=self.draw_cues(cue_key),
            target=target,
            schedule=self.arrange(self._draw_order(order_key)),
            time=jnp.zeros((), jnp.int32),
        )
        return self.observe(state, None, jnp.zeros((), jnp.float32)), state

    def _draw_order(self, key: PRNGKey) -> Float[Array, " draws"]:
        return jr.uniform(key, (self.num_cues + self.slots,), jnp.float32)

    def step(
        self,
        key: PRNGKey,
        state: CueRewardState,
        action: Action,
        params: CueRewardParams,
    ) -> StepResult:
        return self.transition(state, action, params, self.sample_noise(key, params))

    def sample_noise(self, key: PRNGKey, params: CueRewardParams) -> CueRewardNoise:
        del params
        # Drawn every step, used where a trial ends: draws cannot depend on
        # the state.
        return CueRewardNoise(self._draw_order(key))

    def transition(
        self,
        state: CueRewardState,
        action: Action,
        params: CueRewardParams,
        noise: CueRewardNoise,
    ) -> StepResult:
        respond = action[1] > action[0]  # argmax; a tie does not respond
        go = state.time % self.trial_steps == self.trial_steps - 1
        right = respond == jnp.any(state.schedule == state.target)
        reward = jnp.where(go, jnp.where(right, params.reward, -params.reward), 0.0)
        new_state = CueRewardState(
            cues=state.cues,
            target=state.target,
            schedule=jnp.where(go, self.arrange(noise.order), state.schedule),
            time=state.time + 1,
        )
        obs = self.observe(new_state, respond, reward)
        done = new_state.time >= params.episode_length
        info = {"answered": go, "correct": go & right}
        return obs, new_state, reward, done, info

    def privileged(
        self, state: CueRewardState, params: CueRewardParams
    ) -> Float[Array, "1"]:
        """Whether the target has been shown in the current trial so far (1.0/0.0)."""
        del params
        phase = state.time % self.trial_steps
        so_far = jnp.arange(1, self.slots + 1) <= phase
        seen = jnp.any((state.schedule == state.target) & so_far)
        return seen.astype(jnp.float32)[None]


__all__ = [
    "CueReward",
    "CueRewardNoise",
    "CueRewardParams",
    "CueRewardState",
]
