"""Build an experiment from its config, and run it: the loop behind `eqxevo run`.

`build(experiment)` turns a validated `config.Experiment` into objects: the
environment and its params, the initial genome (the network), the `Strategy`
and the fitness function (a lifetime rollout). `run(experiment, run_dir)` calls
`eqxevo.evolve` on them (the same `evolve` the Python API and the benchmark
use), and keeps a run directory:

    run_dir/config.toml       the resolved experiment (every value)
    run_dir/metrics.jsonl     one record per generation (and seed)
    run_dir/fitness.png       fitness curves
    run_dir/best_genome.eqx   the best genome (eqx.tree_serialise_leaves)
    run_dir/summary.json      final figures: best fitness, wall time, agent-steps/s
    run_dir/checkpoints/      orbax checkpoints every `run.checkpoint_every`

`run` calls `evolve` once; its callback, after every chunk of `run.chunk_size`
generations, appends the metrics, updates the progress display and writes a
checkpoint when one is due. An interrupt (Ctrl-C, SIGTERM) loses at most one
chunk: the state reached after the last complete chunk is checkpointed before
exiting. `resume(run_dir)` continues from the newest checkpoint and reproduces
the uninterrupted run bit-for-bit (keys depend on the seed and the generation
index only).
"""

import dataclasses
import importlib
import json
import platform
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import numpy as np

from . import config as config_module
from ._types import Array, Genome, PRNGKey
from .checkpoint import Checkpointer
from .config import ConfigError, Experiment
from .envs.base import AbstractEnv
from .evolve import Chunk, evolve, initial_state
from .metrics import MetricsLog, Progress, history_records
from .plots import plot_fitness
from .rollout import rollout
from .strategy import Strategy, StrategyState

ENVS: dict[str, str] = {
    "chemotaxis": "eqxevo.envs.chemotaxis:Chemotaxis",
    "foraging": "eqxevo.envs.foraging:Foraging",
    "long_horizon": "eqxevo.envs.long_horizon:LongHorizon",
}
"""Environments by name; `env.name` may also be "gymnax:<id>" or "module:Class"."""

NETS: dict[str, str] = {
    "sparse_rate": "eqxevo.nets.factories:sparse_rate",
    "sparse_lif": "eqxevo.nets.factories:sparse_lif",
    "recurrent": "eqxevo.nets.recurrent:RecurrentPolicy",
    "mlp": "eqxevo.nets.mlp:MLPPolicy",
}
"""Networks by name; `net.name` may also be "module:Class"."""

RESUMABLE_CHANGES = (
    "run.generations",
    "run.chunk_size",
    "run.checkpoint_every",
    "run.keep_checkpoints",
)
"""Config keys a resumed run may change (they do not alter the trajectory)."""


def _import(spec: str, key: str) -> Any:
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{key} = {spec!r} cannot be imported: {err}") from err


def _lookup(kind: str, name: str, table: Mapping[str, str]) -> Any:
    if name in table:
        return _import(table[name], f"{kind}.name")
    if ":" in name:
        return _import(name, f"{kind}.name")
    raise ConfigError(
        f"{kind}.name = {name!r} is unknown; built in: {', '.join(sorted(table))}, "
        "or 'package.module:Class'"
        + (", or 'gymnax:<environment id>'" if kind == "env" else "")
    )


def _construct(cls: Any, key: str, kwargs: Mapping[str, Any]) -> Any:
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: cannot build {cls.__name__}: {err}") from err


def make_env(experiment: Experiment) -> tuple[AbstractEnv, Any]:
    """The environment and its params, with `env.params` overrides applied."""
    name = experiment.env.name
    if name.startswith("gymnax:"):
        from .envs.gymnax import GymnaxEnv

        env = _construct(
            GymnaxEnv,
            "env.options",
            {"name": name.split(":", 1)[1], **experiment.env.options},
        )
    else:
        env = _construct(
            _lookup("env", name, ENVS), "env.options", experiment.env.options
        )
    params = env.default_params()
    overrides = dict(experiment.env.params)
    if overrides:
        known = {f.name for f in dataclasses.fields(params)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(
                f"env.params.{unknown[0]} is not a parameter of {type(env).__name__}; "
                f"it has: {', '.join(sorted(known))}"
            )
        try:
            params = dataclasses.replace(params, **overrides)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"env.params: {err}") from err
    return env, params


def make_genome(experiment: Experiment, env: AbstractEnv, key: PRNGKey) -> Genome:
    """The initial genome: the configured network sized for the environment."""
    cls = _lookup("net", experiment.net.name, NETS)
    kwargs = {
        "obs_size": env.obs_size,
        "action_size": env.action_size,
        **experiment.net.options,
        "key": key,
    }
    return _construct(cls, "net.options", kwargs)


class LifetimeFitness(eqx.Module):
    """`fitness(genome, key)`: one lifetime of the genome in the environment.

    A module rather than a closure, so the environment's params are traced
    arrays (not constants baked into the program) and equal experiments share
    one compilation.
    """

    env: AbstractEnv
    env_params: Any
    num_steps: int = eqx.field(static=True)
    reset_on_done: bool = eqx.field(static=True, default=True)

    def __call__(self, genome: Genome, key: PRNGKey) -> tuple[Array, Any]:
        return rollout(
            key,
            genome,
            self.env,
            self.env_params,
            self.num_steps,
            reset_on_done=self.reset_on_done,
        )


@dataclasses.dataclass(frozen=True)
class Built:
    """An experiment's objects (see `build`)."""

    experiment: Experiment
    env: AbstractEnv
    env_params: Any
    genome: Genome
    strategy: Strategy
    fitness: Callable[..., Any]
    key: PRNGKey
    """The key handed to `evolve` (the genome's key is split off the same seed)."""

    @property
    def num_seeds(self) -> int | None:
        seeds = self.experiment.run.num_seeds
        return None if seeds == 1 else seeds

    @property
    def agent_steps_per_generation(self) -> int:
        run = self.experiment.run
        return self.strategy.population_size * run.lifetime * run.num_seeds

    def initial_state(self) -> StrategyState:
        """The state `evolve` starts from (batched over seeds with num_seeds)."""
        return initial_state(self.key, self.strategy, self.num_seeds)


def build(experiment: Experiment) -> Built:
    """Build the environment, genome, strategy and fitness function.

    Raises:
        ConfigError: an unknown name, or options/params the classes reject.
    """
    genome_key, evolve_key = jr.split(jr.key(experiment.run.seed))
    env, env_params = make_env(experiment)
    genome = make_genome(experiment, env, genome_key)
    try:
        strategy = Strategy(
            experiment.strategy.name,
            genome,
            experiment.strategy.population_size,
            maximize=True,
            init_scale=experiment.strategy.init_scale,
            params=dict(experiment.strategy.params) or None,
        )
    except (ValueError, TypeError) as err:
        raise ConfigError(f"strategy: {err}") from err
    fitness = LifetimeFitness(
        env, env_params, experiment.run.lifetime, experiment.run.reset_on_done
    )
    return Built(experiment, env, env_params, genome, strategy, fitness, evolve_key)


# -- running ------------------------------------------------------------------------


class RunDirError(RuntimeError):
    """The run directory cannot be used (exists already, or holds no run)."""


def _best_of_seeds(built: Built, state: StrategyState) -> tuple[Genome, float]:
    fitness = np.asarray(built.strategy.best_fitness(state))
    if fitness.ndim == 0:
        return built.strategy.best(state), float(fitness)
    seed = int(np.nanargmax(np.where(np.isfinite(fitness), fitness, -np.inf)))
    return built.strategy.best(jax.tree.map(lambda x: x[seed], state)), float(
        fitness[seed]
    )


def save_genome(path: str | Path, genome: Genome) -> None:
    """Write a genome's leaves with Equinox serialisation."""
    eqx.tree_serialise_leaves(path, genome)


def load_best_genome(run_dir: str | Path) -> tuple[Built, Genome]:
    """The run's experiment and its saved best genome (no code is executed)."""
    run_dir = Path(run_dir)
    built = build(config_module.load(run_dir / "config.toml"))
    return built, eqx.tree_deserialise_leaves(run_dir / "best_genome.eqx", built.genome)


def plot_best(run_dir: str | Path, steps: int | None = None) -> Path:
    """Draw the run's best genome living one lifetime: `run_dir/trajectory.png`.

    Arguments:
        run_dir: a run directory with `config.toml` and `best_genome.eqx`.
        steps: lifetime steps to draw (default `run.lifetime`, at most 5000).

    Raises:
        NotImplementedError: the environment has no picture (not an arena).
    """
    from .envs.arena import AbstractArenaEnv
    from .plots import render_policy

    run_dir = Path(run_dir)
    built, genome = load_best_genome(run_dir)
    if not isinstance(built.env, AbstractArenaEnv):
        raise NotImplementedError(
            f"{type(built.env).__name__} has no trajectory picture (only arenas have)"
        )
    steps = steps or min(built.experiment.run.lifetime, 5000)
    # A fixed key per run: the same picture every time it is drawn.
    key = jr.fold_in(built.key, 0x706C6F74)
    return render_policy(
        key,
        genome,
        built.env,
        built.env_params,
        steps,
        run_dir / "trajectory.png",
        title=f"best genome of {run_dir.name}, {steps} steps",
    )


def run(
    experiment: Experiment,
    run_dir: str | Path,
    *,
    resume: bool = False,
    quiet: bool = False,
    stream: Any = None,
    mesh: Any = None,
) -> dict[str, Any]:
    """Run (or resume) an experiment in `run_dir`; returns the run summary.

    `mesh` (`eqxevo.population_mesh()`) splits each generation over devices;
    results do not depend on it.

    Raises:
        RunDirError: a new run in a folder that already holds a run, or a resume
            of a folder without one.
        CheckpointError: the checkpoint does not fit the experiment.
        KeyboardInterrupt: after checkpointing, when interrupted.
    """
    run_dir = Path(run_dir)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    if resume:
        if not (run_dir / "config.toml").exists():
            raise RunDirError(f"{run_dir} holds no run (no config.toml)")
    else:
        if (run_dir / "config.toml").exists():
            raise RunDirError(
                f"{run_dir} already holds a run; continue it with `eqxevo resume "
                f"{run_dir}` or choose another --out/--name"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.toml").write_text(config_module.dumps(experiment))

    built = build(experiment)
    record = config_module.to_dict(experiment)
    checkpoints = Checkpointer(
        run_dir / "checkpoints", keep=experiment.run.keep_checkpoints
    )
    generation, state = 0, None
    if resume and checkpoints.latest() is not None:
        generation, state = checkpoints.restore(
            built.initial_state(), record, ignore=RESUMABLE_CHANGES
        )
    metrics.truncate(generation)

    total = experiment.run.generations
    started = time.perf_counter()
    interrupted = False
    every = experiment.run.checkpoint_every
    # What the last completed chunk reached, and what is on disk.
    latest: dict[str, Any] = {"generation": generation, "state": state}
    saved = {"generation": generation}
    with Progress(
        total,
        built.agent_steps_per_generation,
        start=generation,
        quiet=quiet,
        stream=stream,
    ) as progress:

        def on_chunk(chunk: Chunk) -> bool:
            records = history_records(chunk.history)
            metrics.append(records)
            progress.update(records)
            latest["generation"], latest["state"] = chunk.generation, chunk.state
            if chunk.generation // every > saved["generation"] // every:
                checkpoints.save(chunk.generation, chunk.state, record)
                saved["generation"] = chunk.generation
            return False

        try:
            if generation < total:
                evolve(
                    built.key,
                    built.strategy,
                    built.fitness,
                    num_generations=total - generation,
                    chunk_size=experiment.run.chunk_size,
                    num_seeds=built.num_seeds,
                    callback=on_chunk,
                    state=state,
                    on_nonfinite=experiment.run.on_nonfinite,
                    mesh=mesh,
                    episodes=experiment.run.episodes,
                )
        except KeyboardInterrupt:
            interrupted = True
        generation, state = latest["generation"], latest["state"]
        if state is not None and saved["generation"] != generation:
            checkpoints.save(generation, state, record)
        checkpoints.close()
        rate = progress.agent_steps_per_second

    if state is None:  # nothing ran (already complete, or interrupted at once)
        summary = (
            json.loads((run_dir / "summary.json").read_text())
            if (run_dir / "summary.json").exists()
            else {"generations": generation}
        )
    else:
        best, best_fitness = _best_of_seeds(built, state)
        save_genome(run_dir / "best_genome.eqx", best)
        plot_fitness(metrics.read(), run_dir / "fitness.png")
        summary = {
            "generations": generation,
            "best_fitness": best_fitness,
            "wall_time_s": round(time.perf_counter() - started, 3),
            "agent_steps_per_s": rate,
            "platform": jax.default_backend(),
            "devices": [str(d) for d in jax.devices()],
            "host": platform.node(),
            "interrupted": interrupted,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if interrupted:
        raise KeyboardInterrupt(f"interrupted at generation {generation}")
    return summary


def resume(run_dir: str | Path, overrides: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """Continue a run from its newest checkpoint (see `run`)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").exists():
        raise RunDirError(f"{run_dir} holds no run (no config.toml)")
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key not in RESUMABLE_CHANGES:
            raise ConfigError(
                f"--set {item!r}: a resumed run can only change "
                f"{', '.join(RESUMABLE_CHANGES)}; others would change its trajectory"
            )
    experiment = config_module.load(run_dir / "config.toml", overrides)
    if overrides:
        (run_dir / "config.toml").write_text(config_module.dumps(experiment))
    return run(experiment, run_dir, resume=True, **kwargs)
