"""An experiment config built into objects: environment, genome, strategy and
fitness, and the config with the effective value of every option written out.
"""

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from eqxevo._src._types import Genome, PRNGKey
from eqxevo._src.envs.base import AbstractEnv
from eqxevo._src.evaluate import initial_carry
from eqxevo._src.keys import seed_keys
from eqxevo._src.obs_norm import normalized
from eqxevo._src.options import EvolveOptions
from eqxevo._src.presets import PresetError, kwarg_value
from eqxevo._src.qd.map_elites import AnyStrategy
from eqxevo._src.registry import effective_options, lookup_env, lookup_net
from eqxevo._src.rollout import LifetimeFitness
from eqxevo._src.runs import initial_state
from eqxevo._src.strategy.base import StrategyState
from eqxevo._src.strategy.strategy import Strategy

from ..config import ConfigError, Experiment, plain_value, qd_run
from .qd import effective_qd, make_map_elites


@dataclasses.dataclass(frozen=True)
class Parts:
    """What an experiment's names stand for (see `lookup`).

    Attributes:
        env: the environment's constructor; `env_kwargs` its arguments.
        env_options: every environment option with the value it takes.
        net: the network's constructor (`net(obs_size, action_size, **options,
            key=key)`); `net_options` every option with the value it takes.
        strategy_kwargs: `[strategy.kwargs]` as constructor arguments (optax or
            evosax optimizers and fitness-shaping functions built).
    """

    env: Any
    env_kwargs: dict[str, Any]
    env_options: dict[str, Any]
    net: Any
    net_options: dict[str, Any]
    strategy_kwargs: dict[str, Any]


def _strategy_kwargs(raw: Any) -> dict[str, Any]:
    out = {}
    for name, value in raw.items():
        try:
            out[name] = kwarg_value(Path("strategy.kwargs"), name, value)
        except PresetError as err:
            message = str(err).split(": ", 1)[-1].replace("kwargs.", "strategy.kwargs.")
            raise ConfigError(message) from err
    return out


def lookup(experiment: Experiment) -> Parts:
    """Every name an experiment config uses, looked up: its environment, network
    and strategy constructor arguments (the algorithm itself is looked up by
    `eqxevo.Strategy`, through `lookup_strategy`).

    Raises:
        ConfigError: an unknown name (with a close match), an unimportable class
            or a malformed `[strategy.kwargs]` table.
    """
    try:
        env, fixed = lookup_env(experiment.env.name)
        net = lookup_net(experiment.net.name)
    except ValueError as err:  # the core's lookups, in the config's words
        raise ConfigError(str(err)) from err
    env_options, net_options = (
        dict(experiment.env.options),
        dict(experiment.net.options),
    )
    return Parts(
        env=env,
        env_kwargs={**fixed, **env_options},
        env_options=effective_options(env, env_options),
        net=net,
        net_options=effective_options(net, net_options),
        strategy_kwargs=_strategy_kwargs(experiment.strategy.kwargs),
    )


def _construct(constructor: Any, key: str, kwargs: Mapping[str, Any]) -> Any:
    try:
        return constructor(**kwargs)
    except (TypeError, ValueError) as err:
        name = getattr(constructor, "__name__", type(constructor).__name__)
        raise ConfigError(f"{key}: cannot build {name}: {err}") from err


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
    # TOML writes 1.0 as 1: an int where the default is a float is the float.
    if isinstance(default, bool) or not isinstance(value, int | float):
        return value
    if isinstance(default, float):
        return float(value)
    return value


def _as_array(key: str, default: Any, value: Any) -> Any:
    """A strategy param as a traced array: numbers become float32/int32 arrays of
    the default's dtype (booleans and tables stay as they are), so runs that
    differ in a param share one program and a run's bits do not depend on
    whether a value came from evosax, a preset, the config or a study axis."""
    value = _coerce(key, default, value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    return jnp.asarray(value, jnp.int32 if isinstance(value, int) else jnp.float32)


def make_env(experiment: Experiment, parts: Parts) -> tuple[AbstractEnv, Any]:
    """The environment and its params, with `env.params` overrides applied (in the
    type and dtype of the defaults)."""
    env = _construct(parts.env, "env.options", parts.env_kwargs)
    params = env.default_params()
    overrides = dict(experiment.env.params)
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


def normalizes_obs(experiment: Experiment, env: AbstractEnv) -> bool:
    """`run.normalize_obs`, with "auto" the environment's `normalizes_obs`."""
    setting = experiment.run.normalize_obs
    return env.normalizes_obs if setting == "auto" else setting == "on"


def make_genome(
    experiment: Experiment, parts: Parts, env: AbstractEnv, key: PRNGKey
) -> Genome:
    """The initial genome: the configured network sized for the environment."""
    kwargs = {
        "obs_size": env.obs_size,
        "action_size": env.action_size,
        **experiment.net.options,
        "key": key,
    }
    return _construct(parts.net, "net.options", kwargs)


def make_strategy(experiment: Experiment, parts: Parts, genome: Genome) -> Strategy:
    """The `Strategy`, every scalar param (from evosax, the preset or
    `[strategy.params]`) a traced array of evosax's default dtype."""
    spec = experiment.strategy
    try:
        strategy = Strategy(
            spec.name,
            genome,
            spec.population_size,
            maximize=True,
            init_scale=spec.init_scale,
            leaf_scales=dict(spec.leaf_scales) or None,
            params=dict(spec.params) or None,
            **parts.strategy_kwargs,
        )
    except (ValueError, TypeError) as err:
        message = str(err)
        for field in ("params.", "population_size=", "init_scale", "leaf_scales"):
            message = message.replace(field, f"strategy.{field}", 1)
        raise ConfigError(f"strategy {spec.name!r}: {message}") from err
    # Every field, not only the overridden ones: a run then compiles the same
    # program whether a value came from evosax, a preset or the config.
    with jax.numpy_dtype_promotion("standard"):  # evosax computes them loosely
        defaults = strategy.algorithm.default_params
    if dataclasses.is_dataclass(defaults) and not isinstance(defaults, type):
        normalised = {
            f.name: _as_array(
                f"strategy.params.{f.name}",
                getattr(defaults, f.name),
                getattr(strategy.params, f.name),
            )
            for f in dataclasses.fields(defaults)
        }
        params = strategy.params.replace(**normalised)
        strategy = eqx.tree_at(lambda s: s.params, strategy, params)
    return strategy


def _scalar_fields(params: Any) -> dict[str, Any]:
    """The scalar fields of a params dataclass as plain values."""
    out = {}
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if isinstance(value, bool | int | float) or np.ndim(value) == 0:
            plain = plain_value(value)
            if plain is not None:
                out[f.name] = plain
    return out


def effective_config(
    experiment: Experiment, parts: Parts, env_params: Any, strategy: AnyStrategy
) -> Experiment:
    """The experiment with the effective value of every option written out:
    `net.options` and `env.options` (what the constructors take), `env.params`
    (every field), `strategy.params` (every scalar field) and, for a MAP-Elites
    run, every emitter's kind and batch. Building it gives the same objects; its
    effective config is itself."""
    fields = {
        f.name: plain_value(getattr(env_params, f.name))
        for f in dataclasses.fields(env_params)
    }
    env_values = {k: v for k, v in fields.items() if v is not None}
    # The values the strategy holds (float32, shortest decimal), not the written
    # ones: they read back to the same bits. Tables (optimizer settings) as written.
    held = _scalar_fields(strategy.params) if isinstance(strategy, Strategy) else {}
    strategy_params = {
        **held,
        **{
            k: v
            for k, v in experiment.strategy.params.items()
            if not isinstance(v, int | float)  # tables and lists as written
        },
    }
    return effective_qd(
        dataclasses.replace(
            experiment,
            env=dataclasses.replace(
                experiment.env, options=parts.env_options, params=env_values
            ),
            net=dataclasses.replace(experiment.net, options=parts.net_options),
            strategy=dataclasses.replace(experiment.strategy, params=strategy_params),
        )
    )


@dataclasses.dataclass(frozen=True)
class Built:
    """An experiment's objects (see `build`)."""

    experiment: Experiment
    """The effective experiment (what config.toml holds)."""
    env: AbstractEnv
    env_params: Any
    genome: Genome
    strategy: AnyStrategy
    """A `Strategy`, or `MapElites` for a `[qd]` run."""
    fitness: Callable[..., Any]
    key: PRNGKey
    """The key handed to `evolve` (`keys.seed_keys(run.seed)`)."""

    @property
    def num_seeds(self) -> int | None:
        """`evolve`'s `num_seeds` (None for one seed)."""
        seeds = self.experiment.run.num_seeds
        return None if seeds == 1 else seeds

    @property
    def agent_steps_per_generation(self) -> int:
        """P x T x E x seeds: the environment steps one generation takes."""
        run = self.experiment.run
        lifetimes = run.lifetimes_per_fitness
        return self.strategy.population_size * run.lifetime * lifetimes * run.num_seeds

    @property
    def heldout_fitness(self) -> Callable[..., Any]:
        """The fitness of one held-out episode: `fitness` living one lifetime
        (`run.lifetimes_per_fitness` averages training lifetimes only; held-out
        evaluation averages `run.eval_episodes` lifetimes of its own)."""
        # The fitness's own hook (`LifetimeFitness.heldout_fitness`,
        # `AbstractPopulationFitness.heldout_fitness`); a plain function is its
        # own held-out fitness.
        hook = getattr(self.fitness, "heldout_fitness", None)
        return self.fitness if hook is None else hook()

    @property
    def agent(self) -> Genome:
        """The structure of a saved agent: the genome, wrapped with its frozen
        observation moments where observations are normalised."""
        carry = initial_carry(self.fitness)
        return normalized(self.genome, None if carry is None else carry.best)

    def options(self, mesh: Mesh | None = None) -> EvolveOptions:
        """How `evolve` runs this experiment's generations on `mesh` (the one
        place the config's run options become `evolve`'s)."""
        run = self.experiment.run
        return EvolveOptions(
            chunk_size=run.chunk_size,
            on_nonfinite=run.on_nonfinite,
            mesh=mesh,
            batch_size=run.batch_size or None,
            episodes=run.episodes,
            chunk_seconds=run.chunk_seconds or None,
            align=run.eval_every or None,
        )

    def initial_state(self) -> StrategyState:
        """The state `evolve` starts from (batched over seeds with num_seeds)."""
        return initial_state(
            self.key, self.strategy, self.num_seeds, None, self.fitness
        )


def build(experiment: Experiment) -> Built:
    """Build the environment, genome, strategy and fitness function.

    Raises:
        ConfigError: an unknown name, or options/params the classes reject.
    """
    # Every name first: an unknown one fails before anything is constructed.
    parts = lookup(experiment)
    genome_key, run_key = seed_keys(experiment.run.seed)
    env, env_params = make_env(experiment, parts)
    genome = make_genome(experiment, parts, env, genome_key)
    if qd_run(experiment):
        strategy: AnyStrategy = make_map_elites(experiment, genome)
    else:
        strategy = make_strategy(experiment, parts, genome)
    fitness = LifetimeFitness(
        env,
        env_params,
        experiment.run.lifetime,
        experiment.run.reset_on_done,
        lifetimes=experiment.run.lifetimes_per_fitness,
        normalize_obs=normalizes_obs(experiment, env),
    )
    effective = effective_config(experiment, parts, env_params, strategy)
    return Built(effective, env, env_params, genome, strategy, fitness, run_key)


__all__ = [
    "Built",
    "Parts",
    "build",
    "effective_config",
    "lookup",
    "make_env",
    "make_genome",
    "make_strategy",
    "normalizes_obs",
]
