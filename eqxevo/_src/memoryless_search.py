"""The search for the best memoryless policy a headroom certificate reports: MLPs
of the current observation evolved through `evolve` with several settings, and
whether each search was still improving when its budget ran out
(docs/environments.md, "Headroom certificates").
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.random as jr
import numpy as np

from ._checks import positive_int
from ._types import Genome, PRNGKey
from .envs.base import AbstractEnv, EnvParams
from .evaluate import EvalSettings
from .evolve import Chunk, evolve
from .heldout import heldout_genomes
from .nets.mlp import MLPPolicy
from .rollout import LifetimeFitness
from .runs import take
from .strategy.strategy import Strategy


@dataclasses.dataclass(frozen=True)
class SearchSetting:
    """One search setting of the memoryless network: an algorithm (any name
    `eqxevo.Strategy` takes) and `[strategy.params]` overrides."""

    algorithm: str
    params: tuple[tuple[str, float], ...] = ()

    @property
    def label(self) -> str:
        """`snes std_init=0.1`: the setting in words."""
        shown = " ".join(f"{k}={v:g}" for k, v in self.params)
        return f"{self.algorithm} {shown}".strip()


DEFAULT_SETTINGS = (
    SearchSetting("snes", (("std_init", 0.1),)),
    SearchSetting("snes", (("std_init", 0.5),)),
    SearchSetting("pgpe"),
    SearchSetting("sep_cma_es", (("std_init", 0.3),)),
)
"""The search settings a certificate tries by default: SNES with a small and a
large initial step, PGPE and Sep-CMA-ES (the shipped presets)."""

STILL_IMPROVING = 0.02
"""The search was still improving when its budget ran out where its last quarter
of generations raised the bound (on the held-out lifetimes) by more than this
fraction of (ceiling - random), significantly (`LATE_P`): the bound may be low,
h high."""

LATE_P = 0.01
"""The one-sided p-value (paired over held-out lifetimes) below which that late
rise is no noise."""


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A memoryless network the search found.

    Attributes:
        name: "evolved MLP (pgpe, seed 0, mean)"; with ", generation 150" for one
            taken when three quarters of the generations had run.
        genome, filter_spec: the network and its `eqx.partition` filter spec.
        early: taken at three quarters: the certificate compares the bound
            without the last quarter's networks against the bound with them.
    """

    name: str
    genome: Genome
    filter_spec: Any
    early: bool = False


@dataclasses.dataclass(frozen=True)
class SearchBudget:
    """How hard a certificate searches for the best memoryless policy: an MLP of
    the current observation (`MLPPolicy(width, depth)`), evolved with every
    setting for `seeds` seeds of `generations` generations of `population_size`
    genomes, each living `lifetimes` lifetimes per evaluation."""

    population_size: int = 128
    generations: int = 200
    seeds: int = 2
    lifetimes: int = 2
    width: int = 32
    depth: int = 2
    settings: tuple[SearchSetting, ...] = DEFAULT_SETTINGS

    def __post_init__(self) -> None:
        for name in ("population_size", "generations", "seeds", "lifetimes", "width"):
            positive_int(name, getattr(self, name))
        if not isinstance(self.depth, int) or self.depth < 0:
            raise ValueError(f"depth must be an int >= 0; got {self.depth!r}")
        if not self.settings:
            raise ValueError("settings must name at least one search setting")

    def as_record(self) -> dict[str, Any]:
        """The budget as plain values (a certificate's provenance)."""
        record = dataclasses.asdict(self)
        record["settings"] = [
            {"algorithm": s.algorithm, "params": dict(s.params)} for s in self.settings
        ]
        return record


DEFAULT_BUDGET = SearchBudget()
"""The default search: 4 settings x 2 seeds x 200 generations of 128 MLPs."""


Progress = Callable[[str], None]


def search_memoryless(
    key: PRNGKey,
    env: AbstractEnv,
    params: EnvParams,
    num_steps: int,
    budget: SearchBudget,
    *,
    reset_on_done: bool = True,
    settings: EvalSettings | None = None,
    progress: Progress | None = None,
) -> list[Candidate]:
    """Evolve memoryless MLPs (`budget`) on the task.

    Returns:
        Every run's (setting's and seed's) best-so-far and, where the algorithm
        has one, mean genome: at the end, and (`early`) when three quarters of
        the generations had run (none with fewer than 4 generations), taken
        from the same run by its callback.
    """
    settings = settings or EvalSettings()
    fitness = LifetimeFitness(
        env, params, num_steps, reset_on_done, lifetimes=budget.lifetimes
    )
    total = budget.generations
    first = total - total // 4
    candidates = []
    for i, setting in enumerate(budget.settings):
        net_key, run_key = jr.split(jr.fold_in(key, i))
        mlp = MLPPolicy(
            env.obs_size, env.action_size, budget.width, budget.depth, key=net_key
        )
        strategy = Strategy(
            setting.algorithm,
            mlp,
            budget.population_size,
            maximize=True,
            params=dict(setting.params) or None,
        )

        snapshots: dict[int, Any] = {}

        def report(
            chunk: Chunk, label: str = setting.label, snapshots: dict = snapshots
        ) -> None:
            if chunk.generation == first < total:
                snapshots[first] = chunk.state  # the early candidates' state
            if progress is not None:
                best = float(np.max(chunk.best_fitness))
                progress(
                    f"memoryless search {label}: generation {chunk.generation}/"
                    f"{total}, best training fitness {best:.6g}"
                )

        # One run; its chunks also end at three quarters (`align`), where the
        # callback keeps the state: results do not depend on the chunks.
        snapshots[total] = evolve(
            run_key,
            strategy,
            fitness,
            num_generations=total,
            num_seeds=budget.seeds,
            callback=report,
            chunk_seconds=5.0,  # progress every few seconds; results unchanged
            align=first,
            mesh=settings.mesh,
            batch_size=settings.batch_size,
        ).state
        for stop, state in sorted(snapshots.items()):
            early = stop < total
            at = f", generation {stop}" if early else ""
            for seed in range(budget.seeds):
                genomes = heldout_genomes(strategy, take(state, seed))
                for which, genome in genomes.items():
                    if genome is not None:
                        label = f"{setting.label}, seed {seed}, {which}{at}"
                        candidates.append(
                            Candidate(
                                f"evolved MLP ({label})",
                                genome,
                                strategy.filter_spec,
                                early,
                            )
                        )
    return candidates


__all__ = [
    "DEFAULT_BUDGET",
    "DEFAULT_SETTINGS",
    "LATE_P",
    "STILL_IMPROVING",
    "SearchBudget",
    "SearchSetting",
    "search_memoryless",
]
