"""Reference policies: what each environment declares (`references`), their scores
on a run's held-out lifetimes, and the normalised score (docs/environments.md,
"Reference agents").
"""

import dataclasses
import functools
import math
import sys
from collections.abc import Callable, Iterable
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from ._checks import one_of
from ._types import Genome, PRNGKey
from .agents.arena import (
    BraitenbergAgent,
    ForagerAgent,
    PatchOracleAgent,
    ReactiveTasteAgent,
    SeasonOracleAgent,
    SourceOracleAgent,
    TasteLearnerAgent,
)
from .agents.bandits import (
    BayesUCBAgent,
    ChangePointBayesAgent,
    KArmedWinStayLoseShiftAgent,
    OracleBanditAgent,
    ThompsonSamplingAgent,
)
from .agents.base import RandomAgent
from .agents.cue_reward import ConstantResponseAgent, CueRewardLearner, CueRewardOracle
from .agents.gymnax_bandit import GreedyBayesAgent, WinStayLoseShiftAgent
from .agents.maze import MazeExploreExploitAgent, MazeOracleAgent, MazeWallFollowerAgent
from .envs.bandits import IndependentBandit, ReversalBandit
from .envs.base import AbstractEnv, EnvParams
from .envs.chemotaxis import Chemotaxis
from .envs.cue_reward import CueReward
from .envs.foraging import Foraging
from .envs.long_horizon import LongHorizon
from .envs.privileged_view import privileged
from .evaluate import EvalSettings
from .heldout import HeldOut, heldout_evaluate
from .nets.base import AbstractPolicy
from .rollout import LifetimeFitness

KINDS = ("no_memory", "random", "learner", "oracle")
"""What a reference is: the best policy without memory the environment allows, a
random policy, a policy that learns within its lifetime, or one that is told what
a learner must find out."""

FLOOR_KINDS = ("no_memory",)
"""The kind whose best scores 0 on the normalised scale: the best policy without
memory (random is not one: it is a floor only a task without room would have)."""

CEILING_KINDS = ("learner", "oracle")
"""Kinds with memory or knowledge: the best of them scores 1."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """A named reference policy of an environment.

    Attributes:
        name: what reports call it ("win-stay lose-shift").
        kind: one of `KINDS`.
        policy: the agent (any `AbstractPolicy` sized for the environment).
        privileged: the agent reads `eqxevo.envs.privileged(env)`'s observations
            (the environment's own, then its hidden variables): an oracle told
            what a learner must find out, or a learner told part of it (where it
            is, not where the goal is). It plays the same lifetimes. Only the
            `CEILING_KINDS` may: a floor reads what an evolved agent reads.
    """

    name: str
    kind: str
    policy: AbstractPolicy
    privileged: bool = False

    def __post_init__(self) -> None:
        one_of("kind", self.kind, KINDS)
        if self.privileged and self.kind not in CEILING_KINDS:
            raise ValueError(
                f"reference {self.name!r}: only a learner or an oracle reads "
                f"privileged information; got kind {self.kind!r}"
            )


@functools.singledispatch
def references(env: AbstractEnv, params: EnvParams) -> tuple[Reference, ...]:
    """The reference policies of `env` with `params`.

    Built in: L0 `Chemotaxis`, L2 `Foraging`, L4 `LongHorizon`, and the gymnax
    environments in `GYMNAX_REFERENCES`; any other environment has a random
    agent only. Declare your own environment's with
    `@references.register(MyEnv)` on a function `(env, params) -> tuple[Reference,
    ...]` (subclasses inherit it).

    Example:
        >>> for ref in references(LongHorizon(), LongHorizonParams()):
        ...     print(ref.name, ref.kind)
        random random
        ...
    """
    gymnax = sys.modules.get("eqxevo._src.envs.gymnax")  # loaded if env is a GymnaxEnv
    if gymnax is not None and isinstance(env, gymnax.GymnaxEnv):
        named: Any = env  # a GymnaxEnv: its gymnax name
        declared = GYMNAX_REFERENCES.get(named.name)
        if declared is not None:
            return declared(env, params)
    return (_random(env),)


def _random(env: AbstractEnv) -> Reference:
    return Reference("random", "random", RandomAgent(env.obs_size, env.action_size))


@references.register(Chemotaxis)
def _chemotaxis(env: Chemotaxis, params: EnvParams) -> tuple[Reference, ...]:
    del params
    return (
        _random(env),
        Reference("Braitenberg vehicle 2b", "no_memory", BraitenbergAgent(2)),
        Reference("told the source", "oracle", SourceOracleAgent(), privileged=True),
    )


@references.register(Foraging)
def _foraging(env: Foraging, params: EnvParams) -> tuple[Reference, ...]:
    del params
    forager = ForagerAgent(env.num_resources)
    oracle = PatchOracleAgent(env.num_resources, env.patches_per_resource)
    return (
        _random(env),
        Reference("homeostatic forager", "no_memory", forager),
        Reference("told the patches", "oracle", oracle, privileged=True),
    )


@references.register(LongHorizon)
def _long_horizon(env: LongHorizon, params: EnvParams) -> tuple[Reference, ...]:
    del params
    # A TasteLearnerAgent that never learns and ignores seasons (flip 1) is a
    # fixed reflex: toward A (belief +1), or undecided (0). Toward B is A's
    # mirror image (the first season's roles are a fair coin).
    d = env.digestion
    toward_a = TasteLearnerAgent(0.0, 1.0, flip=1.0)
    undecided = TasteLearnerAgent(0.0, 0.0, flip=1.0)
    return (
        _random(env),
        Reference("fixed reflex toward A", "no_memory", toward_a),
        Reference("undecided fixed reflex", "no_memory", undecided),
        Reference("reactive taste", "no_memory", ReactiveTasteAgent()),
        Reference("taste learner", "learner", TasteLearnerAgent(digestion=d)),
        Reference("told the season", "oracle", SeasonOracleAgent(), privileged=True),
    )


@references.register(CueReward)
def _cue_reward(env: CueReward, params: EnvParams) -> tuple[Reference, ...]:
    del params
    # Either constant answer earns 0 per trial in expectation (the target is in
    # half the trials); the oracle reads whether the target has been shown.
    bits = env.cue_bits
    return (
        _random(env),
        Reference("always respond", "no_memory", ConstantResponseAgent(True, bits)),
        Reference("never respond", "no_memory", ConstantResponseAgent(False, bits)),
        Reference("Bayes learner", "learner", CueRewardLearner(env.num_cues, bits)),
        Reference("oracle", "oracle", CueRewardOracle(bits), privileged=True),
    )


@references.register(IndependentBandit)
def _independent_bandit(
    env: IndependentBandit, params: EnvParams
) -> tuple[Reference, ...]:
    del params
    k = env.num_arms
    return (
        _random(env),
        Reference("win-stay lose-shift", "no_memory", KArmedWinStayLoseShiftAgent(k)),
        Reference("Thompson sampling", "learner", ThompsonSamplingAgent(k)),
        Reference("Bayes-UCB", "learner", BayesUCBAgent(k)),
        Reference("oracle", "oracle", OracleBanditAgent(k), privileged=True),
    )


@references.register(ReversalBandit)
def _reversal_bandit(env: ReversalBandit, params: EnvParams) -> tuple[Reference, ...]:
    bayes = ChangePointBayesAgent(
        params.p_high, params.p_low, params.change_min, params.change_max
    )
    return (
        _random(env),
        Reference("win-stay lose-shift", "no_memory", KArmedWinStayLoseShiftAgent(2)),
        Reference("change-point Bayes filter", "learner", bayes),
        Reference("oracle", "oracle", OracleBanditAgent(2), privileged=True),
    )


def _affine(env: Any) -> dict[str, Any]:
    """`GymnaxEnv`'s observation map, for agents that read raw observations."""
    if not env.normalize_obs:
        return {}
    return {"obs_center": env.obs_center, "obs_scale": env.obs_scale}


def _bernoulli_bandit(env: Any, params: Any) -> tuple[Reference, ...]:
    return (
        _random(env),
        Reference(
            "win-stay lose-shift", "no_memory", WinStayLoseShiftAgent(**_affine(env))
        ),
        Reference(
            "greedy Bayes",
            "learner",
            GreedyBayesAgent(params.reward_prob, **_affine(env)),
        ),
    )


def _meta_maze(env: Any, params: Any) -> tuple[Reference, ...]:
    del params
    affine = _affine(env)
    return (
        _random(env),
        Reference("wall follower", "no_memory", MazeWallFollowerAgent(**affine)),
        # told where it is, not where the goal is: it still has to find it
        Reference(
            "explore then exploit",
            "learner",
            MazeExploreExploitAgent(**affine),
            privileged=True,
        ),
        Reference(
            "shortest path", "oracle", MazeOracleAgent(**affine), privileged=True
        ),
    )


GYMNAX_REFERENCES: dict[str, Callable[[Any, Any], tuple[Reference, ...]]] = {
    "BernoulliBandit-misc": _bernoulli_bandit,
    "MetaMaze-misc": _meta_maze,
}
"""gymnax environments' references by gymnax name: `(env, params) -> references`
(a `GymnaxEnv` not listed has a random agent only)."""


# -- scores ---------------------------------------------------------------------------


class PolicyFitness(eqx.Module):
    """`fitness_fn` of one fixed policy, with a placeholder in the genome's place,
    so held-out evaluation (`eqxevo._src.heldout`) runs it like a genome: episode e is
    `fitness_fn(policy, fold_in(key, e))`, whatever the policy's leaves."""

    fitness_fn: Callable[..., Any]
    policy: AbstractPolicy

    def __call__(self, placeholder: Any, key: PRNGKey) -> Any:
        del placeholder
        return self.fitness_fn(self.policy, key)


def as_genome(
    fitness_fn: Callable[..., Any], policy: AbstractPolicy
) -> tuple[PolicyFitness, Genome]:
    """`(fitness, genome)` that held-out evaluation takes for a fixed `policy`:
    the genome is one float placeholder (with `eqx.is_inexact_array` as filter)."""
    return PolicyFitness(fitness_fn, policy), jnp.zeros((), jnp.float32)


def _fitness_for(fitness_fn: Callable[..., Any], ref: Reference) -> Callable[..., Any]:
    """`fitness_fn` as `ref` plays it: in the privileged environment for an oracle
    that reads it (the same lifetimes: same keys, same draws)."""
    if not ref.privileged:
        return fitness_fn
    if not isinstance(fitness_fn, LifetimeFitness):
        raise ValueError(
            f"reference {ref.name!r} reads privileged information, which needs the "
            "environment: score it with an eqxevo.LifetimeFitness; got "
            f"{type(fitness_fn).__name__}"
        )
    env = privileged(fitness_fn.env, fitness_fn.env_params)
    return dataclasses.replace(fitness_fn, env=env)


@dataclasses.dataclass(frozen=True)
class Scored:
    """A reference's held-out evaluation: its `name`, `kind` and `result`."""

    name: str
    kind: str
    result: HeldOut


def score_references(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    refs: Iterable[Reference],
    num_episodes: int,
    *,
    settings: EvalSettings | None = None,
) -> tuple[Scored, ...]:
    """Each reference's held-out evaluation on the lifetimes of `key`: episode e is
    `fitness_fn(policy, fold_in(key, e))`, a run's genomes' own lifetimes when
    `key` is the run's held-out key (`eqxevo._src.heldout.heldout_keys`).

    Example:
        >>> scored = score_references(key, built.fitness, references(env, p), 64)
        >>> scale((s.name, s.kind, s.result.mean) for s in scored).normalise(81.7)
        0.0
    """
    out = []
    for ref in refs:
        fitness, placeholder = as_genome(_fitness_for(fitness_fn, ref), ref.policy)
        result = heldout_evaluate(
            key, fitness, placeholder, num_episodes, settings=settings
        )
        out.append(Scored(ref.name, ref.kind, result))
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class Scale:
    """The normalised scale: `floor` (the best reference without memory) scores 0,
    `ceiling` (the best learner or oracle) 1. Either is NaN, and its name None,
    where no such reference was scored."""

    floor: float
    floor_name: str | None
    ceiling: float
    ceiling_name: str | None

    def normalise(self, score: float | None) -> float:
        """`(score - floor) / (ceiling - floor)`; NaN without a score, a floor or a
        ceiling, or where the ceiling does not score above the floor."""
        span = self.ceiling - self.floor
        if score is None or not (math.isfinite(span) and span > 0):
            return math.nan
        return (float(score) - self.floor) / span

    def below_floor(self, score: float | None) -> bool:
        """Whether `score` is below the best reference without memory."""
        return score is not None and math.isfinite(self.floor) and score < self.floor


def scale(entries: Iterable[tuple[str, str, float | None]]) -> Scale:
    """The normalised scale of references' scores, given as `(name, kind, score)`:
    the best score of `FLOOR_KINDS` is 0, the best of `CEILING_KINDS` 1
    (non-finite scores left out)."""
    finite = [
        (float(score), name, kind)
        for name, kind, score in entries
        if score is not None and math.isfinite(score)
    ]

    def best(of: tuple[str, ...]) -> tuple[float, str | None]:
        found = [(score, name) for score, name, kind in finite if kind in of]
        if not found:
            return math.nan, None
        return max(found)

    return Scale(*best(FLOOR_KINDS), *best(CEILING_KINDS))


__all__ = [
    "CEILING_KINDS",
    "FLOOR_KINDS",
    "GYMNAX_REFERENCES",
    "KINDS",
    "PolicyFitness",
    "Reference",
    "Scale",
    "Scored",
    "as_genome",
    "references",
    "scale",
    "score_references",
]
