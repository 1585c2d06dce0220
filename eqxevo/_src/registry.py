"""Every name lookup: strategies (evosax name | class | instance | preset |
"module:Class"), environments and networks (`names`' tables), and the effective
options of a constructor. Errors are `ValueError`s; the config layer words them
as its own (`experiment.build.lookup`), the help lives in `catalogue`.
"""

import dataclasses
import functools
import importlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ._checks import did_you_mean, known_name
from .names import ENV_PREFIXES, ENVS, NETS
from .presets import Preset, load_preset, preset_dir, preset_names

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


# -- environments and networks ------------------------------------------------------

SIGNATURE_SKIP = {"self", "obs_size", "action_size", "key", "name"}
"""Constructor arguments that are not options (sizes, keys, the gymnax id)."""


def import_object(spec: str, key: str) -> Any:
    """The object `"package.module:attr"` names; a `ValueError` naming the config
    `key` when it cannot be imported."""
    module_name, _, attr = spec.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"{key} = {spec!r} cannot be imported: {err}") from err


def _lookup(kind: str, name: str, table: dict[str, str]) -> Any:
    if name in table:
        return import_object(table[name], f"{kind}.name")
    if ":" in name:
        return import_object(name, f"{kind}.name")
    others = [*ENV_PREFIXES] if kind == "env" else []
    raise ValueError(
        f"{kind}.name = {name!r} is unknown"
        + did_you_mean(name, table, quote=True)
        + f"; built in: {', '.join(sorted(table))}, or "
        + ", ".join(repr(o) for o in [*others, "package.module:Class"])
    )


_PHYSICS = {
    "brax:": ("eqxevo._src.envs.brax:BraxEnv", "eqxevo._src.envs.brax:check_brax_name"),
    "playground:": (
        "eqxevo._src.envs.playground:PlaygroundEnv",
        "eqxevo._src.envs.playground:check_playground_name",
    ),
}
"""Physics environments by prefix: their class and their name check (which
imports the library itself only when called)."""


def lookup_env(name: str) -> tuple[Any, dict[str, Any]]:
    """`(constructor, fixed_kwargs)` of environment `name` (`env.name`).

    Raises:
        ValueError: unknown name (with a close match) or unimportable class.
    """
    if name.startswith("gymnax:"):
        constructor = import_object("eqxevo._src.envs.gymnax:GymnaxEnv", "env.name")
        return constructor, {"name": _gymnax_id(name)}
    for prefix, (spec, check) in _PHYSICS.items():
        if name.startswith(prefix):
            constructor = import_object(spec, "env.name")
            return constructor, {"name": _physics_name(name, check)}
    return _lookup("env", name, ENVS), {}


def _physics_name(name: str, check: str) -> str:
    """The name of `"brax:<name>"` or `"playground:<name>"`; a `ValueError`
    with a close match if the library does not have it, or with the install
    command if the library is missing."""
    try:
        return import_object(check, "env.name")(name.split(":", 1)[1])
    except (ImportError, ValueError) as err:
        raise ValueError(f"env.name = {name!r}: {err}") from None


def _gymnax_id(name: str) -> str:
    """The id of `"gymnax:<id>"`; a `ValueError` with a close match if gymnax
    does not register it (found here, before anything is built)."""
    import gymnax  # importable: eqxevo._src.envs.gymnax, just imported, needs it

    return known_name(
        name.split(":", 1)[1],
        sorted(gymnax.registered_envs),
        f"env.name = {name!r} is unknown",
        prefix="gymnax:",
        listed="gymnax registers",
    )


def lookup_net(name: str) -> Any:
    """The constructor of network `name` (`net.name`): a class or factory called
    as `constructor(obs_size, action_size, **options, key=key)`.

    Raises:
        ValueError: unknown name (with a close match) or unimportable class.
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
        if p.name not in SIGNATURE_SKIP
        and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        and isinstance(p.default, bool | int | float | str)
    }


def effective_options(constructor: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Every option of a network or environment constructor with the value it
    takes given `options`: the user's values, else the constructor's defaults (a
    factory that derives some, such as the sparse networks' `fan_in`, says so
    itself through an `effective_options(options)` method: the hook a network
    or environment with derived options provides)."""
    hook = getattr(constructor, "effective_options", None)
    if hook is not None:
        effective: dict[str, Any] = dict(hook(options))
        return effective
    return {**scalar_defaults(constructor), **options}
