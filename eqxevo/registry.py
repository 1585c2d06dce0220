"""Every name lookup: strategies (evosax name | class | instance | preset |
"module:Class"), environments, networks, and the catalogue `--help` prints.
"""

import dataclasses
import functools
import importlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._checks import did_you_mean
from .config import ConfigError, plain_value, toml_value
from .presets import (
    Preset,
    PresetError,
    kwarg_value,
    load_preset,
    preset_dir,
    preset_names,
)

if TYPE_CHECKING:
    from evosax.algorithms.base import EvolutionaryAlgorithm

Family = Literal["distribution", "population", "stein"]


# Importing evosax's algorithms starts JAX's backends (they build arrays at import
# time), after which the CPU device count and `jax.distributed` can no longer be
# set. So evosax is imported on first use, never when eqxevo is imported.
@functools.cache
def evosax_algorithms() -> dict[str, type["EvolutionaryAlgorithm"]]:
    """evosax's registry of algorithms by name (`evosax.algorithms.algorithms`)."""
    from evosax.algorithms import algorithms

    return dict(algorithms)


def _base_class() -> type["EvolutionaryAlgorithm"]:
    from evosax.algorithms.base import EvolutionaryAlgorithm

    return EvolutionaryAlgorithm


@dataclasses.dataclass(frozen=True)
class StrategySpec:
    """What `algorithm=` resolved to.

    Attributes:
        name: the name to show the user (evosax name, preset name or class name).
        cls: the evosax algorithm class.
        instance: a ready evosax instance when the user passed one, else None.
        kwargs: constructor keyword arguments from a preset (already built).
        raw_kwargs: the same as written in the preset (plain TOML values).
        params: `Params` field overrides from a preset.
        source: "evosax", "preset:<path>", "class", "instance" or "import:<spec>".
        paper: citation of the method, when known.
    """

    name: str
    cls: type["EvolutionaryAlgorithm"]
    instance: "EvolutionaryAlgorithm | None" = None
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    raw_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    source: str = "evosax"
    paper: str = ""
    description: str = ""


@dataclasses.dataclass(frozen=True)
class StrategyInfo:
    """One row of `eqxevo.strategies()`."""

    name: str
    kind: Literal["evosax", "preset"]
    algorithm: str
    family: Family
    description: str


def family_of(cls: type["EvolutionaryAlgorithm"]) -> Family:
    """The evosax family of `cls`: distribution, population or Stein-variational."""
    from evosax.algorithms.distribution_based.sv.base import SV_ES
    from evosax.algorithms.population_based.base import PopulationBasedAlgorithm

    if issubclass(cls, SV_ES):
        return "stein"
    if issubclass(cls, PopulationBasedAlgorithm):
        return "population"
    return "distribution"


# -- lookup -----------------------------------------------------------------------


def _import_class(spec: str) -> type["EvolutionaryAlgorithm"]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"algorithm={spec!r}: cannot import module {module_name!r} ({err})"
        ) from err
    obj = getattr(module, attr, None)
    if obj is None:
        raise ValueError(f"algorithm={spec!r}: module {module_name!r} has no {attr!r}")
    if not (inspect.isclass(obj) and issubclass(obj, _base_class())):
        raise ValueError(
            f"algorithm={spec!r} is {obj!r}, not a subclass of "
            "evosax.algorithms.base.EvolutionaryAlgorithm"
        )
    return obj


def _from_preset(preset: Preset) -> StrategySpec:
    return StrategySpec(
        name=preset.name,
        cls=preset.cls,
        kwargs=preset.kwargs,
        raw_kwargs=preset.raw_kwargs,
        params=preset.params,
        source=f"preset:{preset.path}",
        paper=preset.paper,
        description=preset.description,
    )


def lookup_strategy(algorithm: Any) -> StrategySpec:
    """Resolve `algorithm=` (see `Strategy`) to a `StrategySpec` record.

    Raises:
        ValueError: unknown name (with close matches), bad import spec, or a value
            of a kind that cannot name an algorithm.
        PresetError: a malformed preset file.
    """
    algorithms = evosax_algorithms()
    if isinstance(algorithm, _base_class()):
        cls = type(algorithm)
        return StrategySpec(cls.__name__, cls, instance=algorithm, source="instance")
    if inspect.isclass(algorithm):
        if not issubclass(algorithm, _base_class()):
            raise ValueError(
                f"algorithm={algorithm!r} is a class but not a subclass of "
                "evosax.algorithms.base.EvolutionaryAlgorithm"
            )
        return StrategySpec(algorithm.__name__, algorithm, source="class")
    if isinstance(algorithm, Path):
        return _from_preset(load_preset(algorithm))
    if not isinstance(algorithm, str):
        raise ValueError(
            f"algorithm={algorithm!r} ({type(algorithm).__name__}): expected an evosax "
            "name, an evosax class or instance, a preset name, a .toml path, or "
            "'package.module:Class'"
        )
    # Names in order of precedence: evosax's own ("CMA_ES"), then the shipped
    # presets ("cma_es"), then files and "module:Class" specs.
    if algorithm in algorithms:
        return StrategySpec(algorithm, algorithms[algorithm], source="evosax")
    if algorithm in preset_names():
        return _from_preset(load_preset(preset_dir() / f"{algorithm}.toml"))
    if algorithm.endswith(".toml") or Path(algorithm).is_file():
        if not Path(algorithm).is_file():
            raise ValueError(f"algorithm={algorithm!r}: no such preset file")
        return _from_preset(load_preset(algorithm))
    if ":" in algorithm:
        cls = _import_class(algorithm)
        return StrategySpec(cls.__name__, cls, source=f"import:{algorithm}")
    hint = did_you_mean(
        algorithm, [*algorithms, *preset_names()], n=4, quote=True, cutoff=0.5
    )
    raise ValueError(
        f"algorithm={algorithm!r} is not an evosax algorithm, a preset, a .toml file "
        f"or 'module:Class'{hint}; `eqxevo strategies` (eqxevo.strategies() in "
        "Python) lists them all."
    )


def strategies() -> list[StrategyInfo]:
    """Every algorithm and preset usable by name, evosax algorithms first."""
    rows = []
    algorithms = evosax_algorithms()
    for name, cls in algorithms.items():
        # the docstring's first paragraph: evosax wraps some summaries
        doc = " ".join((inspect.getdoc(cls) or name).split("\n\n")[0].split())
        rows.append(StrategyInfo(name, "evosax", name, family_of(cls), doc))
    registry_name = {cls: name for name, cls in algorithms.items()}
    for name in preset_names():
        preset = load_preset(preset_dir() / f"{name}.toml")
        rows.append(
            StrategyInfo(
                name,
                "preset",
                registry_name[preset.cls],
                family_of(preset.cls),
                preset.description or preset.paper,
            )
        )
    return rows


def strategy_help(name: str) -> str:
    """What `eqxevo strategies NAME` prints: the algorithm (or preset), its family,
    its `[strategy.params]` fields and its `[strategy.kwargs]` arguments."""
    spec = lookup_strategy(name)
    lines = [f"{spec.name}: {spec.cls.__name__} ({family_of(spec.cls)} family)"]
    summary = spec.description or (inspect.getdoc(spec.cls) or "").split("\n")[0]
    if summary:
        lines.append(f"  {summary}")
    if spec.paper:
        lines.append(f"  paper: {spec.paper}")
    if spec.raw_kwargs or spec.params:
        lines.append(f"  preset kwargs: {toml_value(spec.raw_kwargs)}")
        lines.append(f"  preset params: {toml_value(spec.params)}")
    lines.append("[strategy.params] (evosax Params fields):")
    lines.extend(f"  {row}" for row in _params_rows(spec.cls) or ["-"])
    lines.append("[strategy.kwargs] (constructor arguments):")
    kwargs = [
        row
        for row in signature_rows(spec.cls)
        if not row.startswith(("population_size", "solution", "metrics_fn"))
    ]
    lines.extend(f"  {row}" for row in kwargs or ["-"])
    return "\n".join(lines)


# -- environments and networks ------------------------------------------------------

ENVS: dict[str, str] = {
    "bandit": "eqxevo.envs.bandits:IndependentBandit",
    "chemotaxis": "eqxevo.envs.chemotaxis:Chemotaxis",
    "cue_reward": "eqxevo.envs.cue_reward:CueReward",
    "foraging": "eqxevo.envs.foraging:Foraging",
    "long_horizon": "eqxevo.envs.long_horizon:LongHorizon",
    "reversal_bandit": "eqxevo.envs.bandits:ReversalBandit",
}
"""Environments by name; `env.name` may also be "gymnax:<id>", "brax:<name>",
"playground:<name>" or "module:Class"."""

NETS: dict[str, str] = {
    "sparse_rate": "eqxevo.nets.factories:sparse_rate",
    "sparse_lif": "eqxevo.nets.factories:sparse_lif",
    "recurrent": "eqxevo.nets.recurrent:RecurrentPolicy",
    "gru": "eqxevo.nets.gru:GRUPolicy",
    "mlp": "eqxevo.nets.factories:mlp",
}
"""Networks by name; `net.name` may also be "module:Class"."""

_SIGNATURE_SKIP = {"self", "obs_size", "action_size", "key", "name"}
"""Constructor arguments that are not options (sizes, keys, the gymnax id)."""


def import_object(spec: str, key: str) -> Any:
    """The object `"package.module:attr"` names; a `ConfigError` naming the config
    `key` when it cannot be imported."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"{key} = {spec!r} cannot be imported: {err}") from err


def _lookup(kind: str, name: str, table: dict[str, str]) -> Any:
    if name in table:
        return import_object(table[name], f"{kind}.name")
    if ":" in name:
        return import_object(name, f"{kind}.name")
    raise ConfigError(
        f"{kind}.name = {name!r} is unknown"
        + did_you_mean(name, table, quote=True)
        + f"; built in: {', '.join(sorted(table))}, or 'package.module:Class'"
        + (
            ", 'gymnax:<environment id>', 'brax:<name>' or 'playground:<name>'"
            if kind == "env"
            else ""
        )
    )


_PHYSICS = {
    "brax:": ("eqxevo.envs.brax:BraxEnv", "eqxevo.envs.brax:check_brax_name"),
    "playground:": (
        "eqxevo.envs.playground:PlaygroundEnv",
        "eqxevo.envs.playground:check_playground_name",
    ),
}
"""Physics environments by prefix: their class and their name check (which
imports the library itself only when called)."""


def lookup_env(name: str) -> tuple[Any, dict[str, Any]]:
    """`(constructor, fixed_kwargs)` of environment `name` (`env.name`).

    Raises:
        ConfigError: unknown name (with a close match) or unimportable class.
    """
    if name.startswith("gymnax:"):
        constructor = import_object("eqxevo.envs.gymnax:GymnaxEnv", "env.name")
        return constructor, {"name": _gymnax_id(name)}
    for prefix, (spec, check) in _PHYSICS.items():
        if name.startswith(prefix):
            constructor = import_object(spec, "env.name")
            return constructor, {"name": _physics_name(name, check)}
    return _lookup("env", name, ENVS), {}


def _physics_name(name: str, check: str) -> str:
    """The name of `"brax:<name>"` or `"playground:<name>"`; a `ConfigError`
    with a close match if the library does not have it, or with the install
    command if the library is missing."""
    try:
        return import_object(check, "env.name")(name.split(":", 1)[1])
    except (ImportError, ValueError) as err:
        raise ConfigError(f"env.name = {name!r}: {err}") from None


def _gymnax_id(name: str) -> str:
    """The id of `"gymnax:<id>"`; a `ConfigError` with a close match if gymnax
    does not register it (found here, before anything is built)."""
    import gymnax  # importable: eqxevo.envs.gymnax, just imported, needs it

    env_id = name.split(":", 1)[1]
    known = sorted(gymnax.registered_envs)
    if env_id in known:
        return env_id
    raise ConfigError(
        f"env.name = {name!r} is unknown"
        + did_you_mean(env_id, known, prefix="gymnax:", quote=True)
        + f"; gymnax registers: {', '.join(known)}"
    )


def lookup_net(name: str) -> Any:
    """The constructor of network `name` (`net.name`): a class or factory called
    as `constructor(obs_size, action_size, **options, key=key)`.

    Raises:
        ConfigError: unknown name (with a close match) or unimportable class.
    """
    return _lookup("net", name, NETS)


def scalar_defaults(constructor: Any) -> dict[str, Any]:
    """Constructor options with a plain scalar default (what TOML can hold)."""
    try:
        parameters = inspect.signature(constructor).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {
        p.name: p.default
        for p in parameters
        if p.name not in _SIGNATURE_SKIP
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        and isinstance(p.default, bool | int | float | str)
    }


def effective_options(constructor: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Every option of a network or environment constructor with the value it
    takes given `options`: the user's values, else the constructor's defaults (a
    factory that derives some, such as the sparse networks' `fan_in`, says so
    itself)."""
    from .nets import factories

    if isinstance(constructor, factories.SparseNet) or constructor is factories.mlp:
        return factories.effective_options(constructor, options)
    return {**scalar_defaults(constructor), **options}


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


def lookup(experiment: Any) -> Parts:
    """Every name an experiment config uses, looked up: its environment, network
    and strategy constructor arguments (the algorithm itself is looked up by
    `eqxevo.Strategy`, through `lookup_strategy`).

    Raises:
        ConfigError: an unknown name (with a close match), an unimportable class
            or a malformed `[strategy.kwargs]` table.
    """
    env, fixed = lookup_env(experiment.env.name)
    net = lookup_net(experiment.net.name)
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


# -- the catalogue for --help -------------------------------------------------------


def signature_rows(constructor: Any) -> list[str]:
    """`name: type = default` for each option of a constructor (TOML literals)."""
    try:
        parameters = inspect.signature(constructor).parameters.values()
    except (TypeError, ValueError):
        return []
    rows = []
    for p in parameters:
        if p.name in _SIGNATURE_SKIP or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        annotation = (
            ""
            if p.annotation is inspect.Parameter.empty
            else inspect.formatannotation(p.annotation)
        )
        for long, short in (
            ("collections.abc.", ""),
            ("typing.", ""),
            ("optax._src.base.", "optax."),
            ("jax.jaxlib._jax.", ""),
            ("jaxlib._jax.", ""),
        ):
            annotation = annotation.replace(long, short)
        rows.append(
            f"{p.name}: {annotation} = {_shown_default(p)}" if annotation else p.name
        )
    return rows


def _shown_default(p: inspect.Parameter) -> str:
    if p.default is inspect.Parameter.empty:
        return "(required)"
    if p.default is None:
        return "(unset)"
    try:
        return toml_value(p.default)
    except ConfigError:
        pass
    if p.name == "optimizer":
        return '(default) or { optax = "adam", learning_rate = 0.01 }'
    if p.name == "fitness_shaping_fn":
        return '(default) or "centered_rank" | "weights" | "identity" | ...'
    return "(Python only)"


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


def _env_params_row(cls: Any) -> str | None:
    # Built from a default instance: a class that needs arguments has no row.
    try:
        params = cls().default_params()
    except Exception:  # a catalogue line must never break --help
        return None
    values = {
        f.name: plain_value(getattr(params, f.name)) for f in dataclasses.fields(params)
    }
    return "    params " + ", ".join(
        f"{k} = {toml_value(v)}" for k, v in values.items() if v is not None
    )


def catalogue() -> str:
    """The networks' and environments' options (defaults as TOML literals): the
    second half of `eqxevo run --help`. Algorithms: `eqxevo strategies NAME`."""
    lines = ["Networks ([net] name = ...; [net.options]):"]
    for name in NETS:
        lines.append(f"  {name}: " + ", ".join(signature_rows(lookup_net(name))))
    lines.append("")
    lines.append("Environments ([env] name = ...; [env.options]; [env.params]):")
    for name in ENVS:
        cls, _ = lookup_env(name)
        lines.append(f"  {name}: options " + ", ".join(signature_rows(cls)))
        row = _env_params_row(cls)
        if row:
            lines.append(row)
    lines.append("  gymnax:<id>: any gymnax environment (the rl extra)")
    lines.append("  brax:<name>: any Brax environment (the brax extra)")
    lines.append(
        "  playground:<name>: MuJoCo Playground's DM Control suite (the "
        "playground extra)"
    )
    lines.append("")
    lines.append(
        "Strategies ([strategy] name = ...): `eqxevo strategies` lists every "
        "algorithm and preset; `eqxevo strategies NAME` its [strategy.params] and "
        "[strategy.kwargs]."
    )
    return "\n".join(lines)
