"""Strategy lookup: evosax name | class | instance | preset | "module:Class".

`resolve(algorithm)` turns whatever the user passed as `algorithm` into a
`Resolved` record: the evosax class (or a ready instance), the constructor keyword
arguments and the `Params` overrides a preset carries, and where it came from.
Presets are TOML files, one per strategy, shipped in the wheel (`strategies/` in the
repository). `strategies()` lists everything usable by name.
"""

import dataclasses
import difflib
import functools
import importlib
import inspect
import tomllib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optax

if TYPE_CHECKING:
    from evosax.algorithms.base import EvolutionaryAlgorithm

Family = Literal["distribution", "population", "stein"]

SHAPING_NAMES = ("identity", "centered_rank", "weights", "standardize", "normalize")
"""Fitness-shaping functions a preset may name (evosax.core.fitness_shaping)."""


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


def fitness_shaping_fn(name: str) -> Any:
    """The evosax fitness-shaping function called `name` (see `SHAPING_NAMES`)."""
    from evosax.core import fitness_shaping

    return getattr(fitness_shaping, f"{name}_fitness_shaping_fn")


_PRESET_KEYS = {"algorithm", "description", "paper", "kwargs", "params"}


class PresetError(ValueError):
    """A preset TOML file is malformed; the message names the file and the key."""


@dataclasses.dataclass(frozen=True)
class Resolved:
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


# -- presets ----------------------------------------------------------------------


def preset_dir() -> Path:
    """Folder holding the shipped presets (inside the wheel, or the source tree)."""
    shipped = Path(str(resources.files("eqxevo"))) / "_presets"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent / "strategies"


def preset_names() -> list[str]:
    """Names of the shipped presets (file stems, lower case)."""
    folder = preset_dir()
    return sorted(p.stem for p in folder.glob("*.toml")) if folder.is_dir() else []


def _fail(path: Path, msg: str) -> PresetError:
    return PresetError(f"preset {path}: {msg}")


def _build_value(path: Path, key: str, value: Any) -> Any:
    """Turn a TOML value into a constructor argument (optax objects, shaping fns)."""
    if key == "fitness_shaping_fn":
        spec = {"name": value} if isinstance(value, str) else value
        if not isinstance(spec, dict) or set(spec) - {"name", "weight_decay"}:
            raise _fail(
                path,
                f"kwargs.fitness_shaping_fn must be a name or "
                f"{{name = ..., weight_decay = ...}}; got {value!r}",
            )
        name = spec.get("name")
        if name not in SHAPING_NAMES:
            raise _fail(
                path,
                f"kwargs.fitness_shaping_fn name {name!r} is not one of "
                f"{sorted(SHAPING_NAMES)}",
            )
        fn = fitness_shaping_fn(name)
        if "weight_decay" in spec:
            from evosax.core import fitness_shaping

            fn = fitness_shaping.add_weight_decay(fn, float(spec["weight_decay"]))
        return fn
    from evosax.core import optimizer as evosax_optimizer

    for namespace, module in (("optax", optax), ("evosax", evosax_optimizer)):
        if isinstance(value, dict) and namespace in value:
            args = {k: v for k, v in value.items() if k != namespace}
            name = value[namespace]
            factory = getattr(module, name, None) if isinstance(name, str) else None
            if factory is None or not callable(factory) or name.startswith("_"):
                raise _fail(
                    path,
                    f"kwargs.{key}: {module.__name__} has no public function {name!r}",
                )
            try:
                return factory(**args)
            except TypeError as err:
                raise _fail(
                    path, f"kwargs.{key}: {namespace}.{name}(**{args}) failed: {err}"
                ) from err
    if isinstance(value, dict):
        raise _fail(
            path,
            f"kwargs.{key}: a table must name an optax or evosax optimizer factory, "
            f"e.g. {{optax = 'adam', learning_rate = 0.01}} or "
            f"{{evosax = 'clipup', learning_rate = 0.15, max_velocity = 0.3}}; "
            f"got {value!r}",
        )
    return value


def load_preset(path: str | Path) -> Resolved:
    """Read and validate one preset TOML file.

    Raises:
        PresetError: the file is not valid TOML, names an unknown algorithm or key,
            or gives a value of the wrong kind; the message names the file and key.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise _fail(path, f"cannot be read as TOML: {err}") from err
    unknown = set(data) - _PRESET_KEYS
    if unknown:
        raise _fail(
            path, f"unknown keys {sorted(unknown)}; allowed {sorted(_PRESET_KEYS)}"
        )
    name = data.get("algorithm")
    algorithms = evosax_algorithms()
    if not isinstance(name, str) or name not in algorithms:
        close = difflib.get_close_matches(str(name), list(algorithms), n=3)
        raise _fail(
            path,
            f"algorithm = {name!r} is not an evosax algorithm"
            + (f" (did you mean {', '.join(close)}?)" if close else ""),
        )
    cls = algorithms[name]
    for table in ("kwargs", "params"):
        if not isinstance(data.get(table, {}), dict):
            raise _fail(path, f"[{table}] must be a table")
    raw_kwargs = data.get("kwargs", {})
    accepted = set(inspect.signature(cls.__init__).parameters) - {
        "self",
        "population_size",
        "solution",
    }
    bad = set(raw_kwargs) - accepted
    if bad:
        raise _fail(
            path,
            f"[kwargs] {sorted(bad)} are not arguments of {name}; it accepts "
            f"{sorted(accepted)}",
        )
    kwargs = {k: _build_value(path, k, v) for k, v in raw_kwargs.items()}
    params = dict(data.get("params", {}))
    for key, value in params.items():
        if not isinstance(value, int | float | bool):
            raise _fail(path, f"params.{key} must be a number; got {value!r}")
    return Resolved(
        name=path.stem,
        cls=cls,
        kwargs=kwargs,
        raw_kwargs=dict(raw_kwargs),
        params=params,
        source=f"preset:{path}",
        paper=str(data.get("paper", "")),
        description=str(data.get("description", "")),
    )


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


def resolve(algorithm: Any) -> Resolved:
    """Resolve `algorithm=` (see `Strategy`) to a `Resolved` record.

    Raises:
        ValueError: unknown name (with close matches), bad import spec, or a value
            of a kind that cannot name an algorithm.
        PresetError: a malformed preset file.
    """
    algorithms = evosax_algorithms()
    if isinstance(algorithm, _base_class()):
        cls = type(algorithm)
        return Resolved(cls.__name__, cls, instance=algorithm, source="instance")
    if inspect.isclass(algorithm):
        if not issubclass(algorithm, _base_class()):
            raise ValueError(
                f"algorithm={algorithm!r} is a class but not a subclass of "
                "evosax.algorithms.base.EvolutionaryAlgorithm"
            )
        return Resolved(algorithm.__name__, algorithm, source="class")
    if isinstance(algorithm, Path):
        return load_preset(algorithm)
    if not isinstance(algorithm, str):
        raise ValueError(
            f"algorithm={algorithm!r} ({type(algorithm).__name__}): expected an evosax "
            "name, an evosax class or instance, a preset name, a .toml path, or "
            "'package.module:Class'"
        )
    if algorithm in algorithms:
        return Resolved(algorithm, algorithms[algorithm], source="evosax")
    if algorithm in preset_names():
        return load_preset(preset_dir() / f"{algorithm}.toml")
    if algorithm.endswith(".toml") or Path(algorithm).is_file():
        if not Path(algorithm).is_file():
            raise ValueError(f"algorithm={algorithm!r}: no such preset file")
        return load_preset(algorithm)
    if ":" in algorithm:
        cls = _import_class(algorithm)
        return Resolved(cls.__name__, cls, source=f"import:{algorithm}")
    known = [*algorithms, *preset_names()]
    close = difflib.get_close_matches(algorithm, known, n=4, cutoff=0.5)
    close += [k for k in known if k.lower() == algorithm.lower() and k not in close]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"algorithm={algorithm!r} is not an evosax algorithm, a preset, a .toml file "
        f"or 'module:Class'.{hint} See eqxevo.strategies() for the full list."
    )


def strategies() -> list[StrategyInfo]:
    """Every algorithm and preset usable by name, evosax algorithms first."""
    rows = []
    algorithms = evosax_algorithms()
    for name, cls in algorithms.items():
        doc = (inspect.getdoc(cls) or name).splitlines()[0]
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
