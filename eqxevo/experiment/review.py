"""A finished run looked at again: its saved genomes evaluated held out
(`eqxevo eval`) and drawn living a lifetime (`eqxevo plot`).
"""

import dataclasses
import functools
from pathlib import Path
from typing import Any

import jax
import jax.random as jr
import numpy as np

from .._types import Genome, PRNGKey
from ..heldout import (
    HeldOut,
    episode_fitness,
    evaluates_mean,
    heldout_keys,
    heldout_settings,
    summarize,
)
from ..keys import seed_keys
from ..metrics import format_bytes
from .build import Built, build
from .resources import ResourceError, available_memory, exhausted, memory_estimate
from .rundir import RunDir, RunDirError

TRAJECTORY_STEPS = 5000
"""At most this many lifetime steps are drawn."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What `eval_run` measured (see there)."""

    result: HeldOut
    genome: str
    """"best" or "mean"."""
    stream: str
    """Whose held-out lifetimes: "run" (the run's own) or "seed S"."""
    run_seed: int
    """Which seed of a run of several the genome comes from (0 for one)."""
    generations: int | None
    """Generations the run had run when the genome was saved."""
    key: PRNGKey
    """The held-out key used (episode e is `fold_in(key, e)`)."""


def load_genome(run_dir: str | Path, which: str = "best") -> tuple[Built, Genome]:
    """A run's built experiment and its saved genome `which` ("best" or "mean");
    no code from the run directory is executed.

    Raises:
        RunDirError: no run there, or the genome file is missing or damaged.
        ConfigError: the run's config.toml is unreadable or invalid.
    """
    directory = RunDir(run_dir)
    built = build(directory.read_config())
    if which == "mean" and not evaluates_mean(built.strategy):
        raise RunDirError(
            f"strategy {built.experiment.strategy.name!r} ({built.strategy.family} "
            "family) has no distribution mean; evaluate the best genome (--genome "
            "best)"
        )
    return built, directory.load_genome(which, built.genome)


MAX_EPISODES = 2**31 - 1
"""At most this many held-out lifetimes (episode indices are 32-bit integers)."""


def _episodes_program(
    built: Built, genome: Genome, key: PRNGKey, num_episodes: int
) -> tuple[Any, int | None]:
    """The compiled held-out program for `num_episodes` lifetimes, and XLA's
    estimate of its memory (bytes; None when XLA gives none)."""
    settings = heldout_settings(built.settings(), num_episodes)
    args = (key, built.fitness, genome, num_episodes, built.strategy.filter_spec)
    # the same program `heldout_evaluate` runs, compiled ahead of time (pyright
    # sees a function: equinox's filter_jit wrapper has `lower`)
    lower: Any = episode_fitness.lower  # pyright: ignore[reportFunctionMemberAccess]
    compiled = lower(*args, settings).compile()
    program = functools.partial(compiled, *args, settings)
    return program, memory_estimate(compiled.compiled).get("total")


def _heldout_checked(
    built: Built, genome: Genome, key: PRNGKey, num_episodes: int
) -> HeldOut:
    """`heldout_evaluate`, refused up front when `num_episodes` is out of bounds
    or XLA's memory estimate of the program exceeds the memory available; the
    program compiled for the estimate is the one that runs (same bits)."""
    if num_episodes > MAX_EPISODES:
        raise ResourceError(
            f"--episodes {num_episodes}: at most {MAX_EPISODES} held-out lifetimes "
            "(episode indices are 32-bit)"
        )
    program, needed = _episodes_program(built, genome, key, num_episodes)
    available, where = available_memory()
    if needed is not None and available is not None and needed > available:
        # Memory grows about linearly with the episodes (XLA's layout varies a
        # little with the count): a tenth held back keeps the advice true.
        most = int(0.9 * available * num_episodes / needed)
        raise ResourceError(
            f"--episodes {num_episodes} needs about {format_bytes(needed)} (XLA's "
            f"memory analysis) but {where} has {format_bytes(available)} available; "
            f"use at most about {most} episodes"
        )
    try:
        fitness = program()
    except jax.errors.JaxRuntimeError as err:
        if not exhausted(err):
            raise
        raise ResourceError(
            f"--episodes {num_episodes}: the device ran out of memory ("
            + " ".join(str(err).split())[:160]
            + "); use fewer episodes"
        ) from None
    return summarize(np.asarray(fitness))


def eval_run(
    run_dir: str | Path,
    *,
    genome: str = "best",
    num_episodes: int | None = None,
    seed: int | None = None,
) -> tuple[Evaluation, Built, Genome]:
    """Held-out evaluation of a run's saved genome (`eqxevo eval`).

    Arguments:
        run_dir: a run directory (of `eqxevo run` or of a study).
        genome: "best" (`best_genome.eqx`) or "mean" (`mean_genome.eqx`, the
            distribution mean of the seed the best genome comes from).
        num_episodes: lifetimes (default the run's `run.eval_episodes`).
        seed: None (default): the run's own held-out lifetimes, those its
            evaluations used (with several seeds, those of the best genome's
            seed), so the result equals the run's final held-out record. An
            int S: the lifetimes a run with `run.seed = S` holds out.

    Raises:
        RunDirError: no run there, a genome file missing or damaged, or
            `genome="mean"` for an algorithm without a mean.
        ConfigError: the run's config.toml is unreadable or invalid.
        ResourceError: `num_episodes` above `MAX_EPISODES`, or more than the
            memory available holds (XLA's estimate).
    """
    if genome not in ("best", "mean"):
        raise ValueError(f"genome must be 'best' or 'mean'; got {genome!r}")
    directory = RunDir(run_dir)
    built, loaded = load_genome(run_dir, genome)
    summary = directory.read_summary()
    run_seed = 0
    if built.num_seeds is not None:
        if not isinstance(summary.get("best_seed"), int):
            raise RunDirError(
                f"{directory.path}/summary.json is missing or damaged: it does not "
                "say which seed the saved genome comes from (best_seed)"
            )
        run_seed = summary["best_seed"]
    # The held-out rule of the run itself (or of the run a seed S would have been),
    # so the default reproduces the run's own summary.json record.
    run_key = built.key if seed is None else seed_keys(seed)[1]
    key = heldout_keys(run_key, built.num_seeds)[run_seed]
    result = _heldout_checked(
        built, loaded, key, num_episodes or built.experiment.run.eval_episodes
    )
    evaluation = Evaluation(
        result,
        genome,
        "run" if seed is None else f"seed {seed}",
        run_seed,
        summary.get("generations"),
        key,
    )
    return evaluation, built, loaded


def render_lifetime(
    built: Built,
    genome: Genome,
    key: PRNGKey,
    path: str | Path,
    title: str,
    steps: int | None = None,
) -> Path:
    """Draw `genome` living `steps` steps (default the lifetime, at most
    `TRAJECTORY_STEPS`) of the lifetime of `key`.

    Raises:
        NotImplementedError: the environment has no picture (not an arena).
    """
    from ..envs.arena import AbstractArenaEnv
    from ..plots import render_policy

    if not isinstance(built.env, AbstractArenaEnv):
        raise NotImplementedError(
            f"{type(built.env).__name__} has no trajectory picture (only arenas have)"
        )
    steps = steps or min(built.experiment.run.lifetime, TRAJECTORY_STEPS)
    return render_policy(
        key, genome, built.env, built.env_params, steps, path, title=title
    )


def plot_best(run_dir: str | Path, steps: int | None = None) -> Path:
    """Draw the run's best genome living `steps` steps of one lifetime (see
    `render_lifetime`): `run_dir/trajectory.png`, the same lifetime every time.

    Raises:
        NotImplementedError: the environment has no picture (not an arena).
    """
    built, genome = load_genome(run_dir, "best")
    # Not a held-out key: a picture, the same one each time ("plot").
    key = jr.fold_in(built.key, 0x706C6F74)  # a fixed key per run
    steps = steps or min(built.experiment.run.lifetime, TRAJECTORY_STEPS)
    return render_lifetime(
        built,
        genome,
        key,
        Path(run_dir) / "trajectory.png",
        f"best genome of {Path(run_dir).name}, {steps} steps",
        steps,
    )


__all__ = ["Evaluation", "eval_run", "load_genome", "plot_best", "render_lifetime"]
