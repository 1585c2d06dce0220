"""Build an experiment from its config, and run it: the loop behind `eqxevo run`.

`build(experiment)` turns a validated `config.Experiment` into objects: the
environment and its params, the initial genome (the network), the `Strategy`
and the fitness function (a lifetime rollout), and the experiment *resolved*:
every default the classes filled in, written out. `run(experiment, run_dir)`
calls `eqxevo.evolve` on them once (the same `evolve` the Python API and the
benchmark use), and keeps a run directory:

    run_dir/config.toml       the resolved experiment: `eqxevo run` on it repeats
                              the run exactly
    run_dir/metrics.jsonl     one record per generation (and seed)
    run_dir/fitness.png       fitness curves
    run_dir/best_genome.eqx   the best genome (eqx.tree_serialise_leaves)
    run_dir/mean_genome.eqx   the distribution mean (algorithms with one)
    run_dir/summary.json      totals over every segment (run, resumes): wall
                              time, agent-steps, best fitness; one entry per
                              segment; the final held-out evaluation (`heldout`)
    run_dir/checkpoints/      verified orbax checkpoints every `run.checkpoint_every`
    run_dir/tensorboard/, run_dir/wandb/   with `[sinks]` switched on

Before the first generation the chunk program is compiled ahead of time and
XLA's memory analysis is checked against the device's memory (a run that
cannot fit stops with a message naming the estimate and what to change).
At the end, and every `run.eval_every` generations, the callback evaluates
the distribution mean and the best-so-far genome held out (`evaluate_heldout`,
docs/operations.md). `evolve`'s callback, after every chunk, appends the
metrics, updates the
progress display and writes a checkpoint when one is due; it stops the loop
when a first Ctrl-C/SIGTERM asked for it (`eqxevo.interrupts`). `resume(run_dir)`
continues from the newest checkpoint that passes verification and reproduces
the uninterrupted run bit-for-bit (keys depend on the seed and the generation
index only).
"""

import dataclasses
import datetime
import importlib
import inspect
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from . import config as config_module
from ._types import Array, Genome, PRNGKey
from .checkpoint import Checkpointer
from .config import ConfigError, Experiment
from .envs.base import AbstractEnv
from .evolve import Chunk, compile_chunk, evolve, initial_state
from .heldout import HeldOut, heldout_evaluate, heldout_key
from .interrupts import StopRequest, exit_code
from .metrics import (
    MetricsLog,
    Progress,
    TensorBoardSink,
    WandbSink,
    format_bytes,
    format_seconds,
    history_records,
)
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
    "run.chunk_seconds",
    "run.checkpoint_every",
    "run.keep_checkpoints",
    "run.batch_size",
    "run.eval_every",
    "run.eval_episodes",
    "sinks.",
)
"""Config keys (or prefixes ending in ".") a resumed run may change: they do not
alter the trajectory (held-out evaluations are outside it; a changed
`run.eval_episodes` makes later evaluations use that many lifetimes, the first
ones the same)."""

_SIGNATURE_SKIP = {"self", "obs_size", "action_size", "key", "name"}


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


# -- resolved values ------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A TOML-writable form of `value` (numbers, strings, lists), or None."""
    if isinstance(value, jax.Array | np.ndarray | np.generic):
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.ndim > 1 or array.size > 64:
            return None
        if array.dtype == np.float32:  # the shortest decimal that reads back exactly
            values = [float(str(np.float32(x))) for x in array.ravel()]
            return values[0] if array.ndim == 0 else values
        return array.tolist()
    if isinstance(value, bool | int | float | str):
        return value
    return None


def _scalar_defaults(cls: Any) -> dict[str, Any]:
    """Constructor arguments with a plain scalar default (what TOML can hold)."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in parameters:
        if p.name in _SIGNATURE_SKIP or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if isinstance(p.default, bool | int | float | str):
            out[p.name] = p.default
    return out


def _coerce(key: str, default: Any, value: Any) -> Any:
    """`value` in the type of `default`: an array of its dtype and shape, or the
    same Python type. Values from TOML and from code then compile alike."""
    if isinstance(default, jax.Array | np.ndarray):
        try:
            out = jnp.asarray(value, dtype=default.dtype)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{key} = {value!r}: {err}") from err
        if out.shape != default.shape:
            raise ConfigError(
                f"{key} has shape {list(out.shape)}; it must have shape "
                f"{list(default.shape)}"
            )
        return out
    if isinstance(default, bool) or not isinstance(value, int | float):
        return value
    if isinstance(default, float):
        return float(value)
    return value


def _scalars(params: Any) -> dict[str, Any]:
    """The scalar fields of a params dataclass as plain values."""
    out = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if isinstance(value, jax.Array | np.ndarray) and np.ndim(value) == 0:
            out[f.name] = _plain(value)
        elif isinstance(value, bool | int | float):
            out[f.name] = value
    return out


# -- building -------------------------------------------------------------------------


def make_env(experiment: Experiment) -> tuple[AbstractEnv, Any]:
    """The environment and its params, with `env.params` overrides applied (in the
    type and dtype of the defaults)."""
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
        coerced = {
            k: _coerce(f"env.params.{k}", getattr(params, k), v)
            for k, v in overrides.items()
        }
        try:
            params = dataclasses.replace(params, **coerced)
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


def _strategy_kwargs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`[strategy.kwargs]` as constructor arguments (optax/evosax optimizer tables
    and fitness-shaping names are built as in presets)."""
    from .registry import PresetError, _build_value

    out = {}
    for name, value in raw.items():
        try:
            out[name] = _build_value(Path("strategy.kwargs"), name, value)
        except PresetError as err:
            message = str(err).split(": ", 1)[-1].replace("kwargs.", "strategy.kwargs.")
            raise ConfigError(message) from err
    return out


def make_strategy(experiment: Experiment, genome: Genome) -> Strategy:
    """The `Strategy`, its params normalised to evosax's own types.

    Every param (from evosax, the preset or `[strategy.params]`) ends up in the
    type and dtype of evosax's default, so a run built from its resolved
    config.toml compiles to the same program as the original.
    """
    spec = experiment.strategy
    try:
        strategy = Strategy(
            spec.name,
            genome,
            spec.population_size,
            maximize=True,
            init_scale=spec.init_scale,
            params=dict(spec.params) or None,
            **_strategy_kwargs(spec.kwargs),
        )
    except (ValueError, TypeError) as err:
        message = str(err)
        for field in ("params.", "population_size=", "init_scale"):
            message = message.replace(field, f"strategy.{field}", 1)
        raise ConfigError(f"strategy {spec.name!r}: {message}") from err
    with jax.numpy_dtype_promotion("standard"):  # evosax computes them loosely
        defaults = strategy.algorithm.default_params
    if dataclasses.is_dataclass(defaults) and not isinstance(defaults, type):
        normalised = {
            f.name: _coerce(
                f"strategy.params.{f.name}",
                getattr(defaults, f.name),
                getattr(strategy.params, f.name),
            )
            for f in dataclasses.fields(defaults)
        }
        params = strategy.params.replace(**normalised)
        strategy = eqx.tree_at(lambda s: s.params, strategy, params)
    return strategy


def resolve(
    experiment: Experiment, env: AbstractEnv, env_params: Any, strategy: Strategy
) -> Experiment:
    """The experiment with every value the classes filled in written out:
    `net.options` and `env.options` (plain scalar defaults of their
    constructors), `env.params` (every field) and `strategy.params` (every
    scalar field). Loading it and resolving again gives it back unchanged."""
    net_cls = _lookup("net", experiment.net.name, NETS)
    net_options = {**_scalar_defaults(net_cls), **experiment.net.options}
    env_options = {**_scalar_defaults(type(env)), **experiment.env.options}
    fields = {
        f.name: _plain(getattr(env_params, f.name))
        for f in dataclasses.fields(env_params)
    }
    env_values = {k: v for k, v in fields.items() if v is not None}
    strategy_params = {**_scalars(strategy.params), **experiment.strategy.params}
    return dataclasses.replace(
        experiment,
        env=dataclasses.replace(experiment.env, options=env_options, params=env_values),
        net=dataclasses.replace(experiment.net, options=net_options),
        strategy=dataclasses.replace(experiment.strategy, params=strategy_params),
    )


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
    resolved: Experiment
    """The experiment with every default written out (what config.toml holds)."""

    @property
    def num_seeds(self) -> int | None:
        seeds = self.experiment.run.num_seeds
        return None if seeds == 1 else seeds

    @property
    def batch_size(self) -> int | None:
        return self.experiment.run.batch_size or None

    @property
    def agent_steps_per_generation(self) -> int:
        run = self.experiment.run
        return self.strategy.population_size * run.lifetime * run.num_seeds

    def initial_state(self) -> StrategyState:
        """The state `evolve` starts from (batched over seeds with num_seeds)."""
        return initial_state(self.key, self.strategy, self.num_seeds)


def _seed_keys(seed: int) -> tuple[PRNGKey, PRNGKey]:
    """The genome's key and the key handed to `evolve`, from `run.seed`."""
    genome_key, evolve_key = jr.split(jr.key(seed))
    return genome_key, evolve_key


def build(experiment: Experiment) -> Built:
    """Build the environment, genome, strategy and fitness function.

    Raises:
        ConfigError: an unknown name, or options/params the classes reject.
    """
    genome_key, evolve_key = _seed_keys(experiment.run.seed)
    env, env_params = make_env(experiment)
    genome = make_genome(experiment, env, genome_key)
    strategy = make_strategy(experiment, genome)
    fitness = LifetimeFitness(
        env, env_params, experiment.run.lifetime, experiment.run.reset_on_done
    )
    resolved = resolve(experiment, env, env_params, strategy)
    return Built(
        experiment, env, env_params, genome, strategy, fitness, evolve_key, resolved
    )


# -- the catalogue for --help -----------------------------------------------------


def _signature_rows(cls: Any) -> list[str]:
    rows = []
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return rows
    for p in parameters:
        if p.name in _SIGNATURE_SKIP or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        annotation = (
            ""
            if p.annotation is inspect.Parameter.empty
            else inspect.formatannotation(p.annotation)
        )
        annotation = annotation.replace("collections.abc.", "").replace("typing.", "")
        if p.default is inspect.Parameter.empty:
            shown = "(required)"
        elif p.default is None:
            shown = "(unset)"
        else:
            try:
                shown = config_module._toml_value(p.default)
            except ConfigError:
                shown = "(Python only)"
        if shown == "(Python only)" and p.name == "optimizer":
            shown = '(default) or { optax = "adam", learning_rate = 0.01 }'
        elif shown == "(Python only)" and p.name == "fitness_shaping_fn":
            shown = '(default) or "centered_rank" | "weights" | "identity" | ...'
        for long, short in (
            ("optax._src.base.", "optax."),
            ("jax.jaxlib._jax.", ""),
            ("jaxlib._jax.", ""),
        ):
            annotation = annotation.replace(long, short)
        rows.append(f"{p.name}: {annotation} = {shown}" if annotation else p.name)
    return rows


def _params_rows(cls: Any) -> list[str]:
    """The fields of an evosax algorithm's Params dataclass, with their types."""
    module = importlib.import_module(cls.__module__)
    params_cls = getattr(module, "Params", None)
    if params_cls is None or not dataclasses.is_dataclass(params_cls):
        return []
    out = []
    for f in dataclasses.fields(params_cls):
        tp = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", f.type)
        tp = str(tp).replace("jax.Array", "Array").replace("jaxlib._Array", "Array")
        out.append(f"{f.name}: {tp}")
    return out


def catalogue() -> str:
    """Networks' and environments' options (with defaults as TOML literals) and
    every evosax algorithm's params with types: the second half of `eqxevo run
    --help`."""
    lines = ["Networks ([net] name = ...; [net.options]):"]
    for name, spec in NETS.items():
        lines.append(f"  {name}: " + ", ".join(_signature_rows(_import(spec, name))))
    lines.append("")
    lines.append("Environments ([env] name = ...; [env.options]; [env.params]):")
    for name, spec in ENVS.items():
        cls = _import(spec, name)
        lines.append(f"  {name}: options " + ", ".join(_signature_rows(cls)))
        try:
            params = cls().default_params()
            values = {
                f.name: _plain(getattr(params, f.name))
                for f in dataclasses.fields(params)
            }
            lines.append(
                "    params "
                + ", ".join(
                    f"{k} = {config_module._toml_value(v)}"
                    for k, v in values.items()
                    if v is not None
                )
            )
        except Exception:  # a catalogue line must never break --help
            pass
    lines.append("  gymnax:<id>: any gymnax environment (the rl extra)")
    lines.append("")
    lines.append(
        "Strategies ([strategy] name = ...; [strategy.params] fields by algorithm; "
        "[strategy.kwargs] constructor arguments; presets in `eqxevo strategies`):"
    )
    from .registry import evosax_algorithms

    for name, cls in evosax_algorithms().items():
        kwargs = [
            row
            for row in _signature_rows(cls)
            if not row.startswith(("population_size", "solution", "metrics_fn"))
        ]
        lines.append(f"  {name}: params " + (", ".join(_params_rows(cls)) or "-"))
        if kwargs:
            lines.append("    kwargs " + ", ".join(kwargs))
    return "\n".join(lines)


# -- memory -------------------------------------------------------------------------


class ResourceError(RuntimeError):
    """The run does not fit the device's memory (XLA's estimate, or its refusal)."""


def available_memory(mesh: Any = None) -> tuple[int | None, str]:
    """Bytes a run may use on its devices, and what they are (None if unknown).

    GPUs report their limit through `memory_stats()`; on a CPU the host's
    available memory (Linux `MemAvailable`) is shared by every CPU device.
    """
    devices = list(mesh.devices.flat) if mesh is not None else jax.devices()[:1]
    stats = devices[0].memory_stats() or {}
    if "bytes_limit" in stats:
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return free, f"each {devices[0].device_kind}"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this host"
    except OSError:
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages), "this host"
    except (ValueError, OSError, AttributeError):
        return None, "unknown"


def memory_estimate(compiled: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled program, in bytes per device:
    arguments, outputs, temporaries and the `total` live at once."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    out = {
        "arguments": int(stats.argument_size_in_bytes),
        "outputs": int(stats.output_size_in_bytes),
        "temporaries": int(stats.temp_size_in_bytes),
        "aliased": int(stats.alias_size_in_bytes),
    }
    out["total"] = (
        out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
    )
    return out


def _too_big(built: Built, needed: int, available: int, where: str) -> str:
    e = built.experiment
    p = e.strategy.population_size
    d = built.strategy.num_params
    population = (
        p * d * np.dtype(built.strategy.layout.dtype).itemsize * e.run.num_seeds
    )
    return (
        f"this run needs about {format_bytes(needed)} (XLA's memory analysis of one "
        f"chunk of generations) but {where} has {format_bytes(available)} "
        f"available. Lower strategy.population_size (now {p}; the population alone "
        f"is {format_bytes(population)}: {p} genomes x {d} parameters), set "
        f"run.batch_size to evaluate fewer genomes at a time (now "
        f"{e.run.batch_size or 'all'}), or split over more devices (--devices)"
    )


def _exhausted(err: BaseException) -> bool:
    return "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


# -- running ------------------------------------------------------------------------


class RunDirError(RuntimeError):
    """The run directory cannot be used (exists already, or holds no run)."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C/SIGTERM after saving what it had.

    Attributes:
        message: one line for the user (the checkpoint and how to resume).
        exit_code: 130 (Ctrl-C) or 143 (SIGTERM).
        generation: the generation of the newest checkpoint, or None.
    """

    def __init__(self, message: str, exit_code: int, generation: int | None):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.generation = generation


def _best_of_seeds(built: Built, state: StrategyState) -> tuple[Genome, float]:
    fitness = np.asarray(built.strategy.best_fitness(state))
    if fitness.ndim == 0:
        return built.strategy.best(state), float(fitness)
    seed = int(np.nanargmax(np.where(np.isfinite(fitness), fitness, -np.inf)))
    return built.strategy.best(jax.tree.map(lambda x: x[seed], state)), float(
        fitness[seed]
    )


def _best_seed(built: Built, state: StrategyState) -> int:
    """The seed whose best-so-far training fitness is highest (0 for one seed)."""
    fitness = np.asarray(built.strategy.best_fitness(state))
    if fitness.ndim == 0:
        return 0
    return int(np.nanargmax(np.where(np.isfinite(fitness), fitness, -np.inf)))


def has_mean(strategy: Strategy) -> bool:
    """Whether held-out evaluation covers the distribution mean: algorithms with
    one genome as their mean (not population-based ones, not Stein-variational
    ones, whose mean is one genome per sub-population)."""
    return strategy.has_mean and strategy.family != "stein"


def heldout_keys(built: Built, seed: int | None = None) -> list[PRNGKey]:
    """The held-out key of each seed of the run: `heldout_key` of the key seed k's
    keys are split from (`built.key`, or `split(built.key, K)[k]`), so no key
    `evolve` derives for the run is among its episodes'.

    Arguments:
        built: the run.
        seed: the keys a run with `run.seed = seed` (and otherwise this one's
            settings) would hold out; default the run's own `run.seed`.
    """
    root = built.key if seed is None else _seed_keys(seed)[1]
    if built.num_seeds is None:
        return [heldout_key(root)]
    return [heldout_key(k) for k in jr.split(root, built.num_seeds)]


def _seed_state(built: Built, state: StrategyState, seed: int) -> StrategyState:
    if built.num_seeds is None:
        return state
    return jax.tree.map(lambda x: x[seed], state)


def _heldout_mesh(mesh: Any, num_episodes: int) -> Any:
    """The run's mesh when the episodes split over it evenly, else one device."""
    if mesh is None or num_episodes % mesh.devices.size:
        return None
    return mesh


def evaluate_heldout(
    built: Built,
    state: StrategyState,
    *,
    num_episodes: int | None = None,
    mesh: Any = None,
) -> list[dict[str, HeldOut | None]]:
    """Held-out evaluation of every seed's distribution mean (None where the
    algorithm has none, `has_mean`) and best-so-far genome, on `num_episodes`
    (default `run.eval_episodes`) lifetimes from the seed's `heldout_keys`.

    Returns one `{"mean": HeldOut | None, "best": HeldOut}` per seed.
    """
    episodes = num_episodes or built.experiment.run.eval_episodes
    options = {
        "filter_spec": built.strategy.filter_spec,
        "mesh": _heldout_mesh(mesh, episodes),
        "batch_size": built.batch_size,
    }
    out: list[dict[str, HeldOut | None]] = []
    for seed, key in enumerate(heldout_keys(built)):
        one = _seed_state(built, state, seed)
        mean = None
        if has_mean(built.strategy):
            mean = heldout_evaluate(
                key, built.fitness, built.strategy.mean(one), episodes, **options
            )
        best = heldout_evaluate(
            key, built.fitness, built.strategy.best(one), episodes, **options
        )
        out.append({"mean": mean, "best": best})
    return out


def _finite(value: Any) -> Any:
    return value if isinstance(value, int) or np.isfinite(value) else None


def heldout_fields(result: dict[str, HeldOut | None]) -> dict[str, Any]:
    """One seed's held-out evaluation as metric fields: `heldout_mean_mean`,
    `heldout_mean_ci_low`, ..., `heldout_best_*` (non-finite values as None)."""
    fields: dict[str, Any] = {}
    for genome in ("mean", "best"):
        held = result[genome]
        if held is not None:
            record = held.as_record(f"heldout_{genome}")
            fields.update({k: _finite(v) for k, v in record.items()})
    return fields


def heldout_summary(
    results: list[dict[str, HeldOut | None]], generation: int
) -> dict[str, Any] | list[dict[str, Any]]:
    """`summary.json["heldout"]`: `{"mean": {...} | None, "best": {...},
    "generation": G}` with `{"mean", "ci_low", "ci_high", "std", "episodes"}`
    per genome (G: generations run when evaluated); a list of those, one per
    seed, for runs of several seeds."""
    entries = []
    for result in results:
        entry: dict[str, Any] = {}
        for genome in ("mean", "best"):
            held = result[genome]
            entry[genome] = (
                None
                if held is None
                else {
                    "mean": _finite(held.mean),
                    "ci_low": _finite(held.ci_low),
                    "ci_high": _finite(held.ci_high),
                    "std": _finite(held.std),
                    "episodes": held.num_episodes,
                }
            )
        entry["generation"] = generation
        entries.append(entry)
    return entries[0] if len(entries) == 1 else entries


def _evaluation_due(experiment: Experiment, generations: int) -> bool:
    """Whether the run evaluates held out after this many generations."""
    every = experiment.run.eval_every
    return generations == experiment.run.generations or bool(
        every and generations % every == 0
    )


def save_genome(path: str | Path, genome: Genome) -> None:
    """Write a genome's leaves with Equinox serialisation."""
    eqx.tree_serialise_leaves(path, genome)


def load_best_genome(run_dir: str | Path) -> tuple[Built, Genome]:
    """The run's experiment and its saved best genome (no code is executed)."""
    run_dir = Path(run_dir)
    built = build(config_module.load(run_dir / "config.toml"))
    return built, eqx.tree_deserialise_leaves(run_dir / "best_genome.eqx", built.genome)


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


def _load_genome(built: Built, path: Path) -> Genome:
    if not path.exists():
        raise RunDirError(
            f"{path.parent} holds no {path.name}: the run has not finished a segment"
        )
    try:
        return eqx.tree_deserialise_leaves(path, built.genome)
    except Exception as err:  # any damage: a short, wrong-sized or foreign file
        raise RunDirError(
            f"{path} is damaged ({type(err).__name__}: "
            f"{' '.join(str(err).split())[:120]})"
        ) from None


def eval_run(
    run_dir: str | Path,
    *,
    genome: str = "best",
    num_episodes: int | None = None,
    seed: int | None = None,
) -> tuple[Evaluation, Built, Genome, PRNGKey]:
    """Held-out evaluation of a run's saved genome (`eqxevo eval`).

    Arguments:
        run_dir: a run directory.
        genome: "best" (`best_genome.eqx`) or "mean" (`mean_genome.eqx`, the
            distribution mean of the seed the best genome comes from).
        num_episodes: lifetimes (default the run's `run.eval_episodes`).
        seed: None (default): the run's own held-out lifetimes, those its
            evaluations used (with several seeds, those of the best genome's
            seed), so the result equals the run's final held-out record. An
            int S: the lifetimes a run with `run.seed = S` holds out (S equal to
            the run's seed gives the default).

    Returns:
        `(evaluation, built, genome, key)`: the key is the held-out key used
        (episode e is `fold_in(key, e)`).

    Raises:
        RunDirError: no run there, a genome file missing or damaged, or
            `genome="mean"` for an algorithm without a mean.
        ConfigError: the run's config.toml is unreadable or invalid.
    """
    run_dir = Path(run_dir)
    if genome not in ("best", "mean"):
        raise ValueError(f"genome must be 'best' or 'mean'; got {genome!r}")
    if not (run_dir / "config.toml").exists():
        raise RunDirError(f"{run_dir} holds no run (no config.toml)")
    built = build(config_module.load(run_dir / "config.toml"))
    if genome == "mean" and not has_mean(built.strategy):
        raise RunDirError(
            f"strategy {built.experiment.strategy.name!r} ({built.strategy.family} "
            "family) has no distribution mean; evaluate the best genome (--genome "
            "best)"
        )
    loaded = _load_genome(built, run_dir / f"{genome}_genome.eqx")
    summary = _read_summary(run_dir)
    run_seed = 0
    if built.num_seeds is not None:
        if not isinstance(summary.get("best_seed"), int):
            raise RunDirError(
                f"{run_dir}/summary.json is missing or damaged: it does not say "
                "which seed the saved genome comes from (best_seed)"
            )
        run_seed = summary["best_seed"]
    key = heldout_keys(built, seed)[run_seed]
    result = heldout_evaluate(
        key,
        built.fitness,
        loaded,
        num_episodes or built.experiment.run.eval_episodes,
        filter_spec=built.strategy.filter_spec,
        batch_size=built.batch_size,
    )
    evaluation = Evaluation(
        result,
        genome,
        "run" if seed is None else f"seed {seed}",
        run_seed,
        summary.get("generations"),
    )
    return evaluation, built, loaded, key


def render_lifetime(
    built: Built, genome: Genome, key: PRNGKey, path: str | Path, title: str
) -> Path:
    """Draw `genome` living the lifetime of `key` (at most 5000 steps).

    Raises:
        NotImplementedError: the environment has no picture (not an arena).
    """
    from .envs.arena import AbstractArenaEnv
    from .plots import render_policy

    if not isinstance(built.env, AbstractArenaEnv):
        raise NotImplementedError(
            f"{type(built.env).__name__} has no trajectory picture (only arenas have)"
        )
    steps = min(built.experiment.run.lifetime, 5000)
    return render_policy(
        key, genome, built.env, built.env_params, steps, path, title=title
    )


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


_RUN_FILES = (
    "metrics.jsonl",
    "summary.json",
    "fitness.png",
    "trajectory.png",
    "best_genome.eqx",
    "mean_genome.eqx",
)
_RUN_DIRS = ("checkpoints", "damaged-checkpoints", "tensorboard", "wandb")


def _prepare_new(run_dir: Path) -> bool:
    """Make `run_dir` ready for a new run; True if an earlier attempt that saved no
    checkpoint was cleared away. A run with a checkpoint is never touched."""
    if not (run_dir / "config.toml").exists():
        run_dir.mkdir(parents=True, exist_ok=True)
        return False
    if any(p.name.isdigit() for p in (run_dir / "checkpoints").glob("*")):
        raise RunDirError(
            f"{run_dir} already holds a run; continue it with `eqxevo resume "
            f"{run_dir}` or choose another --out/--name"
        )
    for name in _RUN_FILES:
        (run_dir / name).unlink(missing_ok=True)
    for name in _RUN_DIRS:
        shutil.rmtree(run_dir / name, ignore_errors=True)
    return True


def _read_summary(run_dir: Path) -> dict[str, Any]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return summary if isinstance(summary, dict) else {}


def _totals(summary: dict[str, Any]) -> dict[str, Any]:
    segments = summary.get("segments", [])
    wall = sum(s.get("wall_time_s", 0.0) for s in segments)
    running = sum(s.get("run_time_s", 0.0) for s in segments)
    steps = sum(s.get("agent_steps", 0) for s in segments)
    summary["wall_time_s"] = round(wall, 3)
    summary["agent_steps"] = steps
    summary["agent_steps_per_s"] = steps / running if running > 0 else 0.0
    summary["num_segments"] = len(segments)
    return summary


def _write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(_totals(summary), indent=2) + "\n")
    tmp.replace(run_dir / "summary.json")


def _sinks(built: Built, run_dir: Path) -> list[Any]:
    settings = built.experiment.sinks
    sinks: list[Any] = []
    if settings.tensorboard:
        sinks.append(TensorBoardSink(run_dir / "tensorboard"))
    if settings.wandb:
        sinks.append(
            WandbSink(
                run_dir,
                project=settings.wandb_project,
                name=run_dir.name,
                config=config_module.to_dict(built.resolved),
                mode=settings.wandb_mode,
            )
        )
    return sinks


def run(
    experiment: Experiment,
    run_dir: str | Path,
    *,
    resume: bool = False,
    quiet: bool = False,
    stream: Any = None,
    mesh: Any = None,
    handle_signals: bool = False,
    stop: StopRequest | None = None,
) -> dict[str, Any]:
    """Run (or resume) an experiment in `run_dir`; returns the run summary.

    Arguments:
        experiment: the experiment (resolved before it is written).
        run_dir: the run directory. A new run may reuse a directory whose
            earlier run saved no checkpoint.
        resume: continue from the newest good checkpoint in `run_dir`.
        quiet: no progress output.
        stream: where progress goes (default stderr).
        mesh: `eqxevo.population_mesh()` splits each generation over devices;
            results do not depend on it.
        handle_signals: take over SIGINT/SIGTERM (`eqxevo.interrupts`): the
            first stops after the running chunk with a checkpoint (or at once
            when there is nothing to save), the second exits at once. Off, a
            KeyboardInterrupt still saves the last finished chunk.
        stop: a `StopRequest` the caller installed already (the CLI does, before
            it imports anything heavy); implies `handle_signals`.

    Raises:
        RunDirError: a new run in a folder that holds a run with checkpoints, or
            a resume of a folder without a run.
        CheckpointError: no checkpoint passes verification, or it was written by
            another experiment.
        ResourceError: the run does not fit the device's memory.
        RunInterrupted: after saving, when stopped by a signal.
    """
    run_dir = Path(run_dir)
    built = build(experiment)  # every config error before anything is written
    experiment = built.resolved
    progress_stream = stream
    notes: list[str] = []
    if resume:
        if not (run_dir / "config.toml").exists():
            raise RunDirError(f"{run_dir} holds no run (no config.toml)")
    elif _prepare_new(run_dir):
        notes.append(
            f"{run_dir} held a run that saved no checkpoint; starting afresh there"
        )
    (run_dir / "config.toml").write_text(config_module.dumps(experiment))
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    record = config_module.to_dict(experiment)
    checkpoints = Checkpointer(
        run_dir / "checkpoints", keep=experiment.run.keep_checkpoints
    )
    generation, state = 0, None
    if resume and checkpoints.latest() is not None:
        generation, state = checkpoints.restore(
            jax.eval_shape(built.initial_state), record, ignore=RESUMABLE_CHANGES
        )
        for bad in checkpoints.skipped:
            notes.append(
                f"checkpoint at generation {bad.generation} is damaged ({bad.reason}); "
                f"resuming from generation {generation} (the newest good one)"
            )
    metrics.truncate(generation)
    # An earlier segment's end-of-run evaluation is no evaluation point of this
    # run (extended with --set run.generations): the metrics then equal those of
    # a run planned this long from the start.
    metrics.drop_fields(
        "heldout_", lambda r: not _evaluation_due(experiment, r["generation"] + 1)
    )
    summary = _read_summary(run_dir) if resume else {}
    segments = summary.setdefault("segments", [])
    for segment in segments:
        if segment.get("status") == "running":
            segment["status"] = "killed"  # it never wrote its end

    total = experiment.run.generations
    saved = {"generation": generation if state is not None else None}

    def describe() -> str:
        if saved["generation"] is None:
            return "no checkpoint yet: nothing to resume"
        return (
            f"checkpoint at generation {saved['generation']} saved; "
            f"`eqxevo resume {run_dir}`"
        )

    owned = stop is None
    if stop is None:
        stop = StopRequest(describe, stream=stream)
    else:
        stop.describe = describe
        handle_signals = True
    if generation >= total:
        checkpoints.close()
        summary.setdefault("generations", generation)
        summary["complete"] = True
        notes.append(
            f"{run_dir} is complete at generation {generation} (run.generations = "
            f"{total}): nothing to run; extend it with --set run.generations=N"
        )
        _say(notes, stream)
        return _totals(summary)

    _say(notes, stream)
    started = time.perf_counter()
    segment: dict[str, Any] = {
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "from_generation": generation,
        "to_generation": generation,
        "status": "running",
        "platform": jax.default_backend(),
        "devices": [str(d) for d in (mesh.devices.flat if mesh else jax.devices()[:1])],
        "host": platform.node(),
    }
    segments.append(segment)
    every = experiment.run.checkpoint_every
    latest: dict[str, Any] = {"generation": generation, "state": state}
    interrupted: int | None = None
    sinks: list[Any] = []
    evolve_started: float | None = None
    evolve_at = time.perf_counter()
    with (
        stop if handle_signals and owned else _Null(),
        Progress(
            total,
            built.agent_steps_per_generation,
            start=generation,
            quiet=quiet,
            stream=progress_stream,
        ) as progress,
    ):
        sinks = _sinks(built, run_dir)

        def save(at: int, state: Any) -> None:
            checkpoints.save(at, state, record)
            saved["generation"] = at
            # The summary on disk counts this segment up to here, should the
            # process be killed before it ends.
            now = time.perf_counter()
            segment["to_generation"] = at
            segment["wall_time_s"] = round(now - started, 3)
            segment["run_time_s"] = round(now - (evolve_started or now), 3)
            segment["agent_steps"] = (
                at - segment["from_generation"]
            ) * built.agent_steps_per_generation
            _write_summary(run_dir, summary)

        def heldout(at: int, state: Any, records: list[dict[str, Any]]) -> None:
            """Evaluate held out after `at` generations; the fields join each
            seed's record of generation `at - 1`."""
            began = time.perf_counter()
            results = evaluate_heldout(built, state, mesh=mesh)
            segment["heldout_s"] = round(
                segment.get("heldout_s", 0.0) + time.perf_counter() - began, 3
            )
            for seed, result in enumerate(results):
                for r in records:
                    if r["generation"] == at - 1 and r.get("seed", 0) == seed:
                        r.update(heldout_fields(result))
            summary["heldout"] = heldout_summary(results, at)

        def on_chunk(chunk: Chunk) -> bool:
            with stop.lock:
                records = history_records(chunk.history)
                if _evaluation_due(experiment, chunk.generation):
                    heldout(chunk.generation, chunk.state, records)
                metrics.append(records)
                for sink in sinks:
                    sink.write(records)
                progress.update(records, at=evolve_at + chunk.seconds)
                latest["generation"], latest["state"] = chunk.generation, chunk.state
                if chunk.generation // every > (saved["generation"] or 0) // every:
                    save(chunk.generation, chunk.state)
                stop.work_done = True
            return stop.requested

        try:
            if state is None:
                # A population-based state holds P genomes: check it fits before
                # it is allocated.
                shapes = jax.eval_shape(built.initial_state)
                needed = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
                available, where = available_memory(mesh)
                if available is not None and needed > available:
                    raise ResourceError(_too_big(built, needed, available, where))
                state = built.initial_state()
            compile_started = time.perf_counter()
            compiled = compile_chunk(
                built.key,
                built.strategy,
                built.fitness,
                state=state,
                chunk_size=experiment.run.chunk_size,
                num_seeds=built.num_seeds,
                on_nonfinite=experiment.run.on_nonfinite,
                mesh=mesh,
                batch_size=built.batch_size,
                episodes=experiment.run.episodes,
            )
            segment["compile_s"] = round(time.perf_counter() - compile_started, 3)
            estimate = memory_estimate(compiled)
            available, where = available_memory(mesh)
            devices = 1 if mesh is None else mesh.devices.size
            if estimate:
                # CPU devices share the host's memory; GPUs have their own.
                needed = estimate["total"] * (
                    devices if jax.default_backend() == "cpu" else 1
                )
                segment["memory_estimate_bytes"] = needed
                progress.say(
                    f"compiled in {format_seconds(segment['compile_s'])}; XLA "
                    f"estimates {format_bytes(needed)} for a chunk"
                    + (
                        f" ({format_bytes(available)} available on {where})"
                        if available
                        else ""
                    )
                )
                if available is not None and needed > available:
                    raise ResourceError(_too_big(built, needed, available, where))
            progress.say(_heldout_note(built))
            evolve_started = time.perf_counter()
            evolve_at = evolve_started
            progress.start_running(evolve_started)
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
                batch_size=built.batch_size,
                episodes=experiment.run.episodes,
                chunk_seconds=experiment.run.chunk_seconds or None,
                align=experiment.run.eval_every or None,
            )
        except KeyboardInterrupt:
            interrupted = 2  # SIGINT: Python's own handler (handle_signals off)
        except jax.errors.JaxRuntimeError as err:
            if not _exhausted(err):
                raise
            raise ResourceError(
                "the device ran out of memory during the run ("
                + " ".join(str(err).split())[:200]
                + "). "
                + _too_big(
                    built,
                    segment.get("memory_estimate_bytes", 0),
                    available_memory(mesh)[0] or 0,
                    available_memory(mesh)[1],
                )
            ) from None
        finally:
            for sink in sinks:
                sink.close()
            if evolve_started is not None:
                segment["run_time_s"] = round(time.perf_counter() - evolve_started, 3)
        if stop.requested:
            interrupted = stop.signum
        generation, state = latest["generation"], latest["state"]
        ran = generation - segment["from_generation"]
        if ran > 0 and saved["generation"] != generation:
            save(generation, state)
        checkpoints.close()
        segment["to_generation"] = generation
        segment["wall_time_s"] = round(time.perf_counter() - started, 3)
        segment["agent_steps"] = ran * built.agent_steps_per_generation
        segment["agent_steps_per_s"] = progress.agent_steps_per_second
        segment["status"] = "stopped" if interrupted else "complete"

    if ran > 0:
        best, best_fitness = _best_of_seeds(built, state)
        save_genome(run_dir / "best_genome.eqx", best)
        seed = _best_seed(built, state)
        if has_mean(built.strategy):
            # the distribution mean of the seed the best genome comes from
            mean = built.strategy.mean(_seed_state(built, state, seed))
            save_genome(run_dir / "mean_genome.eqx", mean)
        if built.num_seeds is not None:
            summary["best_seed"] = seed
        plot_fitness(
            metrics.read(),
            run_dir / "fitness.png",
            title=run_title(built.experiment, run_dir),
        )
        summary["best_fitness"] = best_fitness
    summary["generations"] = generation
    summary["complete"] = generation >= total and not interrupted
    summary["interrupted"] = bool(interrupted)
    _write_summary(run_dir, summary)
    if interrupted:
        raise RunInterrupted(describe(), exit_code(interrupted), saved["generation"])
    return summary


def _heldout_note(built: Built) -> str:
    """What the held-out evaluations cost, in lifetimes and in generations."""
    run = built.experiment.run
    genomes = 2 if has_mean(built.strategy) else 1
    lifetimes = genomes * run.eval_episodes
    when = "at the end" + (
        f" and every {run.eval_every} generations" if run.eval_every else ""
    )
    return (
        f"held-out evaluation {when}: {genomes} genome(s) x {run.eval_episodes} "
        f"lifetimes per seed, as many lifetimes as "
        f"{lifetimes / built.strategy.population_size:.3g} generations"
    )


def _say(notes: list[str], stream: Any) -> None:
    """Print notes the user must see (even with quiet): fallbacks, reuse."""
    for note in notes:
        print(note, file=stream if stream is not None else sys.stderr, flush=True)


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def run_title(experiment: Experiment, run_dir: str | Path) -> str:
    """A figure title naming the run: directory, environment, network, strategy,
    P, T and seeds."""
    e = experiment
    seeds = f", {e.run.num_seeds} seeds" if e.run.num_seeds > 1 else ""
    return (
        f"{Path(run_dir).name}: {e.env.name}, {e.net.name}, {e.strategy.name} "
        f"(P={e.strategy.population_size}, T={e.run.lifetime}{seeds})"
    )


def resume(run_dir: str | Path, overrides: tuple[str, ...] = (), **kwargs: Any) -> Any:
    """Continue a run from its newest good checkpoint (see `run`)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.toml").exists():
        raise RunDirError(f"{run_dir} holds no run (no config.toml)")
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if not any(
            key == allowed or (allowed.endswith(".") and key.startswith(allowed))
            for allowed in RESUMABLE_CHANGES
        ):
            allowed = ", ".join(
                k + "*" if k.endswith(".") else k for k in RESUMABLE_CHANGES
            )
            raise ConfigError(
                f"--set {item!r}: a resumed run can only change {allowed}; others "
                "would change its trajectory"
            )
    experiment = config_module.load(run_dir / "config.toml", overrides)
    return run(experiment, run_dir, resume=True, **kwargs)
