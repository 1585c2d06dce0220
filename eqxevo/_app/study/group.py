"""A study's runs grouped into compiled programs: runs whose strategies and
fitness functions differ only in array values share one `evolve(..., runs=R)`.
"""

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqxevo._src.runs import stack_runs

from ..config import ConfigError, Experiment
from ..experiment.build import Built, build
from .spec import Study, StudyError, Trial


@dataclasses.dataclass(frozen=True)
class Member:
    """A run and its built objects (strategy, fitness, key)."""

    run: Trial
    built: Built


def build_run(run: Trial) -> Member:
    """Build a run's environment, genome, strategy and fitness.

    Raises:
        StudyError: the run's experiment fails to build; names the cell and seed.
    """
    try:
        built = build(run.experiment)
    except ConfigError as err:
        raise StudyError(f"cell {run.cell.name!r} (seed {run.seed}): {err}") from err
    return Member(run, built)


def _compatible(a: Member, b: Member) -> bool:
    # What `evolve` itself takes (its options, the generations) must agree.
    if a.run.experiment.run.generations != b.run.experiment.run.generations:
        return False
    if a.built.options() != b.built.options():
        return False
    try:
        # `stack_runs` refusing is the test: anything it cannot stack (shapes, code,
        # configuration) needs a program of its own.
        stack_runs([a.built.strategy, b.built.strategy])
        stack_runs([a.built.fitness, b.built.fitness])
    except ValueError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Program:
    """Runs that one compiled program runs (one `evolve(..., runs=R)` call).

    Attributes:
        index: position in the study's plan.
        members: the runs, in study order.
    """

    index: int
    members: tuple[Member, ...]

    @property
    def runs(self) -> tuple[Trial, ...]:
        return tuple(m.run for m in self.members)

    @property
    def cells(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.run.cell.name for m in self.members))

    @property
    def experiment(self) -> Experiment:
        """The first run's experiment (every run shares sizes and settings)."""
        return self.members[0].run.experiment

    @property
    def agent_steps(self) -> int:
        """Environment steps the whole program takes (every run, every genome)."""
        return sum(
            m.built.strategy.population_size
            * m.run.experiment.run.lifetime
            * m.run.experiment.run.lifetimes_per_fitness
            * m.run.experiment.run.generations
            for m in self.members
        )

    def stacked(self) -> tuple[jax.Array, Any, Any]:
        """`(keys, strategy, fitness)` for `evolve(..., runs=R)`."""
        return stacked([m.built for m in self.members])

    def memory_bytes(self) -> int:
        """Estimated device memory: R strategy states plus one generation's P
        lifetime states and genomes (XLA's temporaries not counted)."""
        built = self.members[0].built

        def lifetime_state(key: jax.Array) -> Any:
            reset_key, policy_key = jax.random.split(key)
            return (
                built.genome.initial_state(policy_key),
                built.env.reset(reset_key, built.env_params),
            )

        def nbytes(tree: Any) -> int:
            return sum(
                int(np.prod(x.shape)) * np.dtype(x.dtype).itemsize
                for x in jax.tree.leaves(tree)
            )

        state = jax.eval_shape(built.initial_state)
        lifetime = jax.eval_shape(lifetime_state, jax.random.key(0))
        population = built.strategy.population_size
        genome = built.strategy.num_params * 4
        return len(self.members) * nbytes(state) + population * (
            nbytes(lifetime) + genome
        )


def stacked(builts: Sequence[Built]) -> tuple[jax.Array, Any, Any]:
    """`(keys, strategy, fitness)` of built runs stacked for `evolve(..., runs=R)`.

    Every strategy param is a traced array (`experiment.build`), so runs that
    differ in one share the program, and each run's bits equal a run of its own.
    """
    keys = jnp.stack([b.key for b in builts])
    strategy = stack_runs([b.strategy for b in builts])
    fitness = stack_runs([b.fitness for b in builts])
    return keys, strategy, fitness


def group(members: Sequence[Member], max_runs: int | None = None) -> list[Program]:
    """Gather runs into as few programs as their shapes allow, in study order.

    Arguments:
        members: built runs.
        max_runs: split groups larger than this (None: no limit).
    """
    groups: list[list[Member]] = []
    # First fit in study order: a run joins the first program it can share, so the
    # plan (and the order of runs in a program) does not depend on the machine.
    for member in members:
        for g in groups:
            if (max_runs is None or len(g) < max_runs) and _compatible(g[0], member):
                g.append(member)
                break
        else:
            groups.append([member])
    return [Program(i, tuple(g)) for i, g in enumerate(groups)]


def plan(study: Study, runs: Sequence[Trial] | None = None) -> list[Program]:
    """Build every run of the study (or `runs`) and group them into programs.

    Raises:
        StudyError: a run fails to build (before anything runs).
    """
    members = [build_run(run) for run in (study.runs if runs is None else runs)]
    return group(members, study.max_runs_per_program)


__all__ = [
    "Member",
    "Program",
    "build_run",
    "group",
    "plan",
    "stacked",
]
