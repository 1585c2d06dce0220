"""A finished run looked at again: its saved genomes evaluated held out
(`eqxevo eval`) and drawn living a lifetime (`eqxevo plot`).
"""

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

from eqxevo._src._types import Genome, PRNGKey
from eqxevo._src.envs.arena import AbstractArenaEnv
from eqxevo._src.heldout import (
    HeldOut,
    agent_filter_spec,
    episode_fitness,
    evaluates_mean,
    heldout_evaluate,
    heldout_keys,
    heldout_settings,
    summarize,
)
from eqxevo._src.keys import seed_keys
from eqxevo._src.memory import format_bytes
from eqxevo._src.nets.lesion import lesion as lesion_policy
from eqxevo._src.qd.map_elites import MapElites
from eqxevo._src.references import Scale, Scored, references, scale, score_references
from eqxevo._src.runs import best_run

from .. import config as config_module
from ..checkpoint import saved_generations
from ..figures import render_policy
from .build import Built, build
from .certify import Stored, find_certificate
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
    references: tuple[Scored, ...] = ()
    """The environment's reference agents on the same lifetimes
    (`eqxevo._src.references`), and the memoryless network of the task's headroom
    certificate, when one is stored."""
    certificate: Stored | None = None
    """The task's stored headroom certificate (`eqxevo certify`), if any."""
    lesion: str | None = None
    """The lesion the genome was evaluated under (`eqxevo._src.nets.lesion`), if any."""

    @property
    def scale(self) -> Scale:
        """The normalised scale the references give (0: the best without memory,
        1: the best learner or oracle)."""
        return scale((r.name, r.kind, r.result.mean) for r in self.references)

    def reference_fields(self) -> dict[str, Any]:
        """`eqxevo eval --json`'s reference fields: the genome's normalised score
        (null where undefined), whether it is below the best reference without
        memory, and each reference's held-out record and normalised score."""
        scale = self.scale
        certificate = self.certificate
        return {
            "certificate": None
            if certificate is None
            else {
                "path": str(certificate.path),
                "headroom": _number(certificate.headroom),
                "headroom_ci": certificate.record["headroom_ci"],
            },
            "normalised": _number(scale.normalise(self.result.mean)),
            "below_no_memory": scale.below_floor(self.result.mean),
            "references": [
                {
                    "name": r.name,
                    "kind": r.kind,
                    **r.result.summary(),
                    "normalised": _number(scale.normalise(r.result.mean)),
                }
                for r in self.references
            ],
        }

    def reference_lines(self) -> list[str]:
        """`eqxevo eval`'s lines after the genome's: the references on the same
        lifetimes, the normalised score, and a warning below the floor."""
        if not self.references:
            return []
        scale = self.scale
        width = max(len(r.name) + len(r.kind) for r in self.references) + 3
        lines = [f"reference agents on the same {self.result.num_episodes} lifetimes:"]
        for r in self.references:
            half = (r.result.ci_high - r.result.ci_low) / 2
            normalised = scale.normalise(r.result.mean)
            lines.append(
                f"  {f'{r.name} ({r.kind})'.ljust(width)} {r.result.mean:.6g} "
                f"± {half:.2g}"
                + (
                    f"  normalised {normalised:.3f}"
                    if math.isfinite(normalised)
                    else ""
                )
            )
        normalised = scale.normalise(self.result.mean)
        if math.isfinite(normalised):
            lines.append(
                f"normalised score: {normalised:.3f} (0 = {scale.floor_name}, the "
                f"best without memory; 1 = {scale.ceiling_name}, the best learner "
                "or oracle)"
            )
        elif scale.ceiling_name is None or scale.floor_name is None:
            missing = "learner or oracle" if scale.floor_name else "memoryless"
            lines.append(f"normalised score: none (no {missing} reference here)")
        else:
            lines.append(
                f"normalised score: none ({scale.ceiling_name} does not score above "
                f"{scale.floor_name} on these lifetimes)"
            )
        if scale.below_floor(self.result.mean):
            lines.append(
                "warning: the genome scores below the best reference without memory "
                f"({scale.floor_name}: {scale.floor:.6g})"
            )
        lines.append(self.certificate_line())
        return lines

    def certificate_line(self) -> str:
        """The task's headroom certificate in one line, or how to make one."""
        stored = self.certificate
        if stored is None:
            return (
                "no headroom certificate for this task: `eqxevo certify RUN_DIR` "
                "makes one (the normalised score's 0 is then the certified "
                "memoryless bound)"
            )
        low, high = (math.nan if x is None else x for x in stored.record["headroom_ci"])
        line = (
            f"headroom certificate: h = {stored.headroom:.3f} [{low:.3f}, {high:.3f}] "
            f"(95% CI; {stored.path})"
        )
        if stored.record.get("still_improving"):
            line += (
                "; its memoryless search was still improving when its budget ran "
                "out: the bound may be low, h high"
            )
        return line


def _number(value: float) -> float | None:
    # JSON has no NaN: an undefined normalised score is null.
    return value if math.isfinite(value) else None


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
    return built, directory.load_genome(which, built.agent)


MAX_EPISODES = 2**31 - 1
"""At most this many held-out lifetimes (episode indices are 32-bit integers)."""


def _episodes_program(
    built: Built, scored: tuple[Any, Genome, Any], key: PRNGKey, num_episodes: int
) -> tuple[Any, int | None]:
    """The compiled held-out program for `num_episodes` lifetimes of `scored`
    (fitness function, genome, filter spec), and XLA's estimate of its memory
    (bytes; None when XLA gives none)."""
    settings = heldout_settings(built.options().evaluation(), num_episodes)
    fitness_fn, genome, filter_spec = scored
    args = (key, fitness_fn, genome, num_episodes, filter_spec)
    # the same program `heldout_evaluate` runs, compiled ahead of time (pyright
    # sees a function: equinox's filter_jit wrapper has `lower`)
    lower: Any = episode_fitness.lower  # pyright: ignore[reportFunctionMemberAccess]
    compiled = lower(*args, settings).compile()
    program = functools.partial(compiled, *args, settings)
    return program, memory_estimate(compiled.compiled).get("total")


def _heldout_checked(
    built: Built, scored: tuple[Any, Genome, Any], key: PRNGKey, num_episodes: int
) -> HeldOut:
    """`heldout_evaluate` of `scored` (fitness function, genome, filter spec),
    refused up front when `num_episodes` is out of bounds or XLA's memory
    estimate of the program exceeds the memory available; the program compiled
    for the estimate is the one that runs (same bits)."""
    if num_episodes > MAX_EPISODES:
        raise ResourceError(
            f"--episodes {num_episodes}: at most {MAX_EPISODES} held-out lifetimes "
            "(episode indices are 32-bit)"
        )
    program, needed = _episodes_program(built, scored, key, num_episodes)
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
    lesion: str | None = None,
    with_references: bool = True,
) -> tuple[Evaluation, Built, Genome]:
    """Held-out evaluation of a run's saved genome (`eqxevo eval`), and of the
    environment's reference agents on the same lifetimes
    (`Evaluation.references`, `eqxevo._src.references`).

    Arguments:
        run_dir: a run directory (of `eqxevo run` or of a study).
        genome: "best" (`best_genome.eqx`) or "mean" (`mean_genome.eqx`, the
            distribution mean of the seed the best genome comes from).
        num_episodes: lifetimes (default the run's `run.eval_episodes`).
        seed: None (default): the run's own held-out lifetimes, those its
            evaluations used (with several seeds, those of the best genome's
            seed), so the result equals the run's final held-out record. An
            int S: the lifetimes a run with `run.seed = S` holds out.
        lesion: None, or "plasticity" or "memory": evaluate the genome with
            that cut (`eqxevo._src.nets.lesion`); the references are not lesioned.
        with_references: also score the references and the certificate's
            memoryless network on the same lifetimes (default).

    Raises:
        RunDirError: no run there, a genome file missing or damaged, or
            `genome="mean"` for an algorithm without a mean.
        ConfigError: the run's config.toml is unreadable or invalid.
        ResourceError: `num_episodes` above `MAX_EPISODES`, or more than the
            memory available holds (XLA's estimate).
        LesionError: the network has nothing for `lesion` to act on.
    """
    if genome not in ("best", "mean"):
        raise ValueError(f"genome must be 'best' or 'mean'; got {genome!r}")
    directory = RunDir(run_dir)
    built, loaded = load_genome(run_dir, genome)
    filter_spec = agent_filter_spec(built.strategy, loaded)
    if lesion is not None:
        loaded = lesion_policy(loaded, lesion)
        filter_spec = eqx.is_inexact_array  # a lesion may wrap the genome
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
    episodes = num_episodes or built.experiment.run.eval_episodes
    result = _heldout_checked(
        built, (built.heldout_fitness, loaded, filter_spec), key, episodes
    )
    refs: tuple[Scored, ...] = ()
    if with_references:
        refs = _references(built, key, episodes)
        refs += certified_reference(built, key, episodes)
    evaluation = Evaluation(
        result,
        genome,
        "run" if seed is None else f"seed {seed}",
        run_seed,
        summary.get("generations"),
        key,
        refs,
        find_certificate(built) if with_references else None,
        lesion,
    )
    return evaluation, built, loaded


def certified_reference(
    built: Built, key: PRNGKey, num_episodes: int
) -> tuple[Scored, ...]:
    """The memoryless network of the task's stored headroom certificate
    (`find_certificate`) on the held-out lifetimes of `key`, as a reference of
    kind "no_memory"; none without a certificate or a network in it."""
    stored = find_certificate(built)
    if stored is None or stored.genome is None:
        return ()
    result = heldout_evaluate(
        key,
        built.heldout_fitness,
        stored.genome,
        num_episodes,
        settings=built.options().evaluation(),
    )
    return (Scored("certified memoryless MLP", "no_memory", result),)


def _references(built: Built, key: PRNGKey, num_episodes: int) -> tuple[Scored, ...]:
    """The environment's references on the held-out lifetimes of `key`. Their
    programs hold a policy where the genome's holds a population of copies: the
    genome's fitted the memory check, so theirs are not estimated again (each
    estimate compiles a program once more)."""
    refs = references(built.env, built.env_params)
    try:
        return score_references(
            key,
            built.heldout_fitness,
            refs,
            num_episodes,
            settings=built.options().evaluation(),
        )
    except jax.errors.JaxRuntimeError as err:
        if not exhausted(err):
            raise
        raise ResourceError(
            f"--episodes {num_episodes}: the device ran out of memory scoring the "
            "reference agents; use fewer episodes"
        ) from None


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


def plot_archive(run_dir: str | Path) -> Path | None:
    """Draw a MAP-Elites run's archive.png again from its newest checkpoint (the
    best seed's archive, as `eqxevo run` draws it); None for other runs and for
    archives of one descriptor dimension.

    Raises:
        RunDirError: no run there, or it has no checkpoint yet.
        ConfigError: the run's config.toml is unreadable or invalid.
        CheckpointError: no checkpoint of the run can be read.
    """
    directory = RunDir(run_dir)
    built = build(directory.read_config())
    strategy = built.strategy
    if not isinstance(strategy, MapElites) or strategy.archive.descriptor_size < 2:
        return None  # no heatmap of one descriptor dimension
    if not saved_generations(directory.path / "checkpoints"):  # creates nothing
        raise RunDirError(
            f"{directory.path} has no checkpoint to draw its archive from"
        )
    with directory.checkpointer(built.experiment.run.keep_checkpoints) as saved:
        _, state = saved.restore(
            jax.eval_shape(built.initial_state),
            config_module.to_dict(built.experiment),
            ignore=config_module.RESUMABLE_CHANGES,
        )
    _, state, _ = best_run(strategy, state)
    directory.plot_archive(built.experiment, strategy.archive, state.inner.archive)
    return directory.path / "archive.png"


__all__ = [
    "Evaluation",
    "certified_reference",
    "eval_run",
    "load_genome",
    "plot_archive",
    "plot_best",
    "render_lifetime",
]
