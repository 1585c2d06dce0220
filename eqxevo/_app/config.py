"""Experiment configs: frozen dataclasses <-> TOML, validated; `--set` overrides.

Tables, keys and the `--set` syntax: `eqxevo run --help` and docs/operations.md.
"""

import dataclasses
import math
import tomllib
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from eqxevo._src._checks import did_you_mean, dotted_keys
from eqxevo._src.names import choices
from eqxevo._src.tomlfile import ConfigError, read_toml

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
alter its trajectory (held-out evaluations are outside it; a changed
`run.eval_episodes` makes later evaluations use that many lifetimes)."""


def resumable(key: str) -> bool:
    """Whether a resumed run may change the dotted config key `key`."""
    return any(
        key == allowed or (allowed.endswith(".") and key.startswith(allowed))
        for allowed in RESUMABLE_CHANGES
    )


def check_resumable(overrides: Iterable[str]) -> None:
    """Raise `ConfigError` for a `--set KEY=VALUE` a resumed run may not take."""
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if not resumable(key):
            allowed = ", ".join(
                k + "*" if k.endswith(".") else k for k in RESUMABLE_CHANGES
            )
            raise ConfigError(
                f"--set {item!r}: a resumed run can only change {allowed}; others "
                "would change its trajectory"
            )


def differences(a: "Experiment", b: "Experiment") -> list[str]:
    """The dotted keys whose values differ between two experiments, sorted."""
    flat_a, flat_b = dotted_keys(to_dict(a)), dotted_keys(to_dict(b))
    return sorted(
        k for k in set(flat_a) | set(flat_b) if flat_a.get(k) != flat_b.get(k)
    )


def _spec(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    min: int | float | None = None,
    above: int | float | None = None,
    factory: Any = dataclasses.MISSING,
) -> Any:
    """A config field: `min` is an inclusive bound, `above` an exclusive one."""
    metadata = {"help": help, "min": min, "above": above}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Which environment, its parameters (variants) and constructor options."""

    name: str = _spec(
        "chemotaxis",
        help=choices("env"),
    )
    params: Mapping[str, Any] = _spec(
        factory=dict, help="overrides of the environment's default params"
    )
    options: Mapping[str, Any] = _spec(
        factory=dict, help="constructor arguments of the environment"
    )


@dataclasses.dataclass(frozen=True)
class NetConfig:
    """Which network (the genome) and its constructor options."""

    name: str = _spec(
        "sparse_rate",
        help=choices("net"),
    )
    options: Mapping[str, Any] = _spec(
        factory=dict, help="constructor arguments of the network"
    )


@dataclasses.dataclass(frozen=True)
class StrategyConfig:
    """The evolution strategy and its population."""

    name: str = _spec("snes", help="evosax name, preset name or preset .toml path")
    population_size: int = _spec(
        256, min=1, help="genomes per generation (P; the algorithm may need more)"
    )
    init_scale: float = _spec(
        0.1, above=0.0, help="spread of population-based algorithms' first population"
    )
    leaf_scales: Mapping[str, Any] = _spec(
        factory=dict,
        help='per-leaf search scales: { "rule.learning_rate" = 0.01 } searches that '
        "leaf (or every leaf under a prefix) in units of 0.01, so its step is "
        "std_init x 0.01; keys are leaf paths (an unknown one lists them)",
    )
    params: Mapping[str, Any] = _spec(
        factory=dict,
        help="evosax Params overrides (std_init = 0.05, ...); the run's config.toml "
        "records every scalar one as resolved",
    )
    kwargs: Mapping[str, Any] = _spec(
        factory=dict,
        help="evosax constructor arguments: num_populations = 4 (Stein-variational), "
        'optimizer = { optax = "adam", learning_rate = 0.01 }, '
        'fitness_shaping_fn = "centered_rank", ...',
    )


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How long, how many seeds, how often to checkpoint."""

    generations: int = _spec(200, min=1, help="generations to run")
    lifetime: int = _spec(1000, min=1, help="environment steps per lifetime (T)")
    lifetimes_per_fitness: int = _spec(
        1,
        min=1,
        help="lifetimes each genome lives per generation (E); its fitness is their "
        "mean, lifetime j on key split(key, E)[j] (with shared episodes, the same E "
        "for every genome); held-out evaluation stays one lifetime per episode",
    )
    reset_on_done: bool = _spec(
        True,
        help="start a new episode when one ends (false: one episode per lifetime, "
        "the rest frozen)",
    )
    normalize_obs: Literal["auto", "on", "off"] = _spec(
        "auto",
        help="observation normalisation by the population's running mean and "
        "variance, frozen into the saved agent (auto: on for environments that "
        "ask for it, Brax's)",
    )
    seed: int = _spec(0, min=0, help="root seed of the run")
    num_seeds: int = _spec(1, min=1, help="independent runs in one program")
    chunk_size: int = _spec(10, min=1, help="generations per compiled chunk")
    checkpoint_every: int = _spec(50, min=1, help="generations between checkpoints")
    keep_checkpoints: int = _spec(3, min=1, help="checkpoints kept on disk")
    on_nonfinite: Literal["rank_worst", "raise"] = _spec(
        "rank_worst", help="what NaN/inf fitness does"
    )
    episodes: Literal["shared", "per_genome"] = _spec(
        "shared",
        help="shared: every genome of a generation lives the same lifetimes "
        "(common random numbers); per_genome: each its own (mirrored pairs share)",
    )
    batch_size: int = _spec(
        0,
        min=0,
        help="genomes evaluated at a time per device, to bound memory (0: all)",
    )
    chunk_seconds: float = _spec(
        5.0,
        min=0.0,
        help="aim for compiled chunks of about this many seconds (at most "
        "chunk_size generations; progress and Ctrl-C act between chunks; 0: always "
        "chunk_size); results do not depend on it",
    )
    eval_every: int = _spec(
        0,
        min=0,
        help="held-out evaluation every this many generations as well as at the "
        "end (0: only at the end); each costs 2 x eval_episodes extra lifetimes "
        "(the mean and the best-so-far genome)",
    )
    eval_episodes: int = _spec(
        32,
        min=1,
        help="held-out lifetimes per evaluated genome, from a key stream selection "
        "never uses (the same lifetimes at every evaluation of a run)",
    )


@dataclasses.dataclass(frozen=True)
class QDConfig:
    """Quality-diversity (docs/qd.md): a MAP-Elites run over a behaviour
    descriptor, its population `strategy.population_size` split among emitters."""

    archive: Literal["off", "grid", "cvt"] = _spec(
        "off",
        help="off: an evolution-strategy run; grid or cvt: a MAP-Elites run that "
        "keeps the best genome of every cell of the descriptor box",
    )
    cells: tuple[int, ...] = _spec(
        (32, 32),
        min=1,
        help="grid: cells along each descriptor dimension; cvt: [number of cells]",
    )
    lower: tuple[float, ...] = _spec(
        (-1.0, -1.0), help="the descriptor box's lower corner, one number a dimension"
    )
    upper: tuple[float, ...] = _spec(
        (1.0, 1.0), help="the descriptor box's upper corner, one number a dimension"
    )
    descriptor: tuple[str, ...] = _spec(
        ("mean_x", "mean_y"),
        help="the lifetime's summary entries that are the descriptor, one a "
        "dimension (mean_NAME: the environment's info entry NAME averaged over the "
        "lifetime; an unknown one lists them)",
    )
    out_of_bounds: Literal["clip", "refuse"] = _spec(
        "clip", help="a descriptor outside the box: clipped onto it, or refused"
    )
    qd_offset: float = _spec(
        0.0, help="added to every elite's fitness in qd_score (minus a lower bound)"
    )
    cvt_seed: int = _spec(
        0, min=0, help="cvt: the key of the centroids' k-means (not the run's seed)"
    )
    emitters: Mapping[str, Any] = _spec(
        factory=dict,
        help='NAME = { kind = "iso_line", iso_sigma = 0.01, line_sigma = 0.1 } or '
        '{ kind = "es", algorithm = "CMA_ES", ranking = "improvement", restart = '
        '"no_improvement", ... }, each with an optional batch_size (those without '
        "share the rest of strategy.population_size equally); none: one iso_line "
        "emitter",
    )


@dataclasses.dataclass(frozen=True)
class SinksConfig:
    """Where metrics go besides metrics.jsonl (the `sinks` extra)."""

    tensorboard: bool = _spec(
        False, help="write TensorBoard event files to RUN_DIR/tensorboard"
    )
    wandb: bool = _spec(False, help="log to Weights & Biases (RUN_DIR/wandb)")
    wandb_project: str = _spec("eqxevo", help="Weights & Biases project")
    wandb_mode: Literal["offline", "online"] = _spec(
        "offline",
        help="offline: write RUN_DIR/wandb only (no network; `wandb sync` later)",
    )


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A whole experiment; `eqxevo run` with no config uses the defaults."""

    env: EnvConfig = _spec(factory=EnvConfig, help="environment")
    net: NetConfig = _spec(factory=NetConfig, help="network")
    strategy: StrategyConfig = _spec(factory=StrategyConfig, help="strategy")
    run: RunConfig = _spec(factory=RunConfig, help="run length and bookkeeping")
    qd: QDConfig = _spec(factory=QDConfig, help="quality-diversity")
    sinks: SinksConfig = _spec(factory=SinksConfig, help="metric sinks")


def qd_run(experiment: Experiment) -> bool:
    """Whether `experiment` is a MAP-Elites run (`qd.archive` is not "off")."""
    return experiment.qd.archive != "off"


def method_name(experiment: Experiment) -> str:
    """What searches, for run names and titles: "map-elites" for a `[qd]` run,
    else the strategy's name (a preset file's stem)."""
    return "map-elites" if qd_run(experiment) else Path(experiment.strategy.name).stem


# -- validation ---------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is Literal:
        return " | ".join(toml_value(a) for a in typing.get_args(tp))
    if tp is bool:
        return "bool (true or false)"
    if dataclasses.is_dataclass(tp):
        return "a table"
    if typing.get_origin(tp) in (Mapping, dict):
        return "a table"
    if typing.get_origin(tp) is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    return getattr(tp, "__name__", str(tp))


def _check_value(key: str, tp: Any, value: Any, metadata: Mapping[str, Any]) -> Any:
    origin = typing.get_origin(tp)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            shown = toml_value(value) if _is_toml(value) else repr(value)
            raise ConfigError(
                f"{key} = {shown}; allowed: {', '.join(map(toml_value, allowed))}"
            )
        return value
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{key} must be a table; got {value!r}")
        return dict(value)
    if origin is tuple:
        if not isinstance(value, list | tuple) or not value:
            raise ConfigError(
                f"{key} must be {_type_name(tp)}, not empty; got {value!r}"
            )
        item = typing.get_args(tp)[0]
        return tuple(
            _check_value(f"{key}[{i}]", item, v, metadata) for i, v in enumerate(value)
        )
    minimum, above = metadata.get("min"), metadata.get("above")
    if tp is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
        if ok and not math.isfinite(value):
            raise ConfigError(
                f"{key} = {toml_value(value)} is out of range; it must be "
                f"{_range(minimum, above) or 'a finite number'}"
            )
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is str:
        ok = isinstance(value, str)
    elif tp is bool:
        ok = isinstance(value, bool)
    else:  # pragma: no cover - every field type is listed above
        raise TypeError(f"unsupported config type {tp!r}")
    if not ok:
        shown = toml_value(value) if _is_toml(value) else repr(value)
        raise ConfigError(
            f"{key} must be {_type_name(tp)}; got {shown}"
            + (" (TOML booleans are lower case)" if value in ("True", "False") else "")
        )
    if (minimum is not None and value < minimum) or (
        above is not None and value <= above
    ):
        raise ConfigError(
            f"{key} = {toml_value(value)} is out of range; it must be "
            f"{_range(minimum, above)}"
        )
    return value


def _range(minimum: int | float | None, above: int | float | None) -> str:
    """The allowed range in words ("" when unbounded)."""
    if above is not None:
        return f"> {above:g}" + (" and finite" if isinstance(above, float) else "")
    if minimum is not None:
        return f">= {minimum:g}"
    return ""


def _is_toml(value: Any) -> bool:
    try:
        toml_value(value)
    except ConfigError:
        return False
    return True


def _from_mapping(cls: Any, data: Mapping[str, Any], prefix: str) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in fields]
    if unknown:
        key = unknown[0]
        hint = did_you_mean(key, fields, prefix=prefix)
        raise ConfigError(
            f"unknown key {prefix}{key}{hint}; allowed in "
            f"[{prefix.rstrip('.') or 'top level'}]: {', '.join(fields)}"
        )
    values = {}
    for name, value in data.items():
        tp = hints[name]
        key = f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, Mapping):
                raise ConfigError(f"[{key}] must be a table; got {value!r}")
            values[name] = _from_mapping(tp, value, f"{key}.")
        else:
            values[name] = _check_value(key, tp, value, fields[name].metadata)
    return cls(**values)


def from_dict(data: Mapping[str, Any]) -> Experiment:
    """Build a validated `Experiment` from nested mappings (missing keys default)."""
    return _from_mapping(Experiment, data, "")


def to_dict(experiment: Experiment) -> dict[str, Any]:
    """Nested plain dicts of every value (defaults included; lists as lists, as
    TOML and JSON read them back)."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return list(value) if isinstance(value, tuple) else value

    return plain(dataclasses.asdict(experiment))


def _parse_value(raw: str) -> Any:
    # A TOML literal, or the text itself: `--set strategy.name=snes` needs no quotes.
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw  # a bare word such as chemotaxis


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Apply `key=value` overrides (dotted keys) to nested dicts, in place."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"--set {item!r}: expected key=value, e.g. run.generations=50"
            )
        key, raw = item.split("=", 1)
        parts = key.strip().split(".")
        if not all(parts):
            raise ConfigError(f"--set {item!r}: empty part in key {key!r}")
        node = data
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {part!r} is not a table")
            node = child
        node[parts[-1]] = _parse_value(raw.strip())
    return data


def load(path: str | Path | None = None, overrides: Iterable[str] = ()) -> Experiment:
    """Read a TOML experiment (or the defaults when `path` is None), apply overrides.

    Raises:
        ConfigError: unreadable TOML, unknown key, wrong type, out-of-range value;
            the message names the key.
    """
    data = read_toml(path, "config") if path is not None else {}
    return from_dict(apply_overrides(data, overrides))


# -- writing ------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    # Inline tables: `--set` and config.toml then use one syntax for tables.
    if isinstance(value, Mapping):
        items = ", ".join(f"{_toml_key(k)} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise ConfigError(f"cannot write {value!r} ({type(value).__name__}) to TOML")


def plain_value(value: Any) -> Any:
    """A TOML-writable form of `value`: numbers, strings, small 0-d/1-d arrays as
    numbers or lists (float32 as the shortest decimal that reads back exactly),
    or None when TOML cannot hold it."""
    if isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "dtype") and hasattr(value, "shape"):  # NumPy or JAX
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.ndim > 1 or array.size > 64:
            return None
        if array.dtype == np.float32:
            values = [float(str(np.float32(x))) for x in array.ravel()]
            return values[0] if array.ndim == 0 else values
        return array.item() if array.ndim == 0 else array.tolist()
    return None


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else toml_value(key)


def _toml_table(data: Mapping[str, Any], name: str, lines: list[str]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in data.items() if isinstance(v, Mapping)}
    if name:
        lines.append(f"\n[{name}]")
    lines.extend(f"{_toml_key(k)} = {toml_value(v)}" for k, v in scalars.items())
    for k, v in tables.items():
        _toml_table(v, f"{name}.{k}" if name else k, lines)


def dumps(experiment: Experiment) -> str:
    """The experiment as TOML text (every value, defaults included)."""
    lines: list[str] = [
        "# eqxevo experiment (resolved: every value, defaults included)"
    ]
    _toml_table(to_dict(experiment), "", lines)
    return "\n".join(lines).strip() + "\n"


def describe() -> str:
    """Every config key with its default (a TOML literal), type, range and meaning,
    for `--help` texts."""
    rows = []
    default = Experiment()
    hints = {
        section.name: typing.get_type_hints(section.type)
        for section in dataclasses.fields(Experiment)
    }
    for section in dataclasses.fields(Experiment):
        for f in dataclasses.fields(getattr(default, section.name)):
            value = getattr(getattr(default, section.name), f.name)
            tp = hints[section.name][f.name]
            kind = _type_name(tp)
            bound = _range(f.metadata.get("min"), f.metadata.get("above"))
            kind = f"{kind} {bound}" if bound else kind
            rows.append(
                f"  {section.name}.{f.name} = {toml_value(value)}"
                f"  # {kind}; {f.metadata['help']}"
            )
    return "\n".join(rows)
