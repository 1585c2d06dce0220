"""The study file: an experiment plus a `[study]` table, expanded into cells (axis
values x arms) and runs (a cell with one seed). Reference: docs/studies.md.
"""

import copy
import dataclasses
import itertools
import json
import re
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import config as config_module
from .._checks import optional_positive_int
from ..config import ConfigError, Experiment


class StudyError(ConfigError):
    """A study file is malformed, or one of its cells is not a valid experiment."""


SECTIONS = tuple(f.name for f in dataclasses.fields(Experiment))
"""Top-level experiment tables: env, net, strategy, run."""

FORBIDDEN = {
    "run.seed": "a study's seeds come from study.seeds",
    "run.num_seeds": "every run of a study is one seed; give study.seeds instead",
}

STUDY_KEYS = ("name", "seeds", "base_arm", "max_runs_per_program", "axes", "arms")
SLURM_KEYS = {
    "partition": "slurm_partition",
    "time_min": "timeout_min",
    "gpus_per_node": "gpus_per_node",
    "cpus_per_task": "cpus_per_task",
    "mem_gb": "mem_gb",
    "nodes": "nodes",
    "array_parallelism": "slurm_array_parallelism",
    "setup": "slurm_setup",
    "additional": "slurm_additional_parameters",
}
"""`[study.slurm]` keys and the submitit parameters they become."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One combination of axis values in one arm.

    Attributes:
        name: readable and unique, e.g. `"plastic,env.params.sensor_noise=0.05"`.
        slug: `name` made safe for a folder name.
        arm: the arm's name.
        values: the axis values, `{dotted key: value}`, in axis order.
        experiment: the cell's validated experiment (`run.seed` = 0).
    """

    name: str
    slug: str
    arm: str
    values: dict[str, Any]
    experiment: Experiment


@dataclasses.dataclass(frozen=True)
class Run:
    """A cell with one seed; `experiment.run.seed` is the seed."""

    cell: Cell
    seed: int
    experiment: Experiment

    @property
    def id(self) -> str:
        """`"<cell slug>/seed-<seed>"`, also the run directory under `runs/`."""
        return f"{self.cell.slug}/seed-{self.seed}"


@dataclasses.dataclass(frozen=True)
class Study:
    """A loaded, validated study (see the module docstring).

    Attributes:
        name: `study.name`.
        seeds: the seeds every cell runs.
        axes: `{dotted key: values}` in file order.
        arms: `{arm name: {dotted key: value}}`, the base arm first (empty).
        cells: every cell (arms outer, axes in file order inner).
        max_runs_per_program: groups larger than this are split (None: no limit).
        slurm: submitit parameters from `[study.slurm]`.
        data: the study as plain data, base merged in (`from_dict(data)` gives
            the same study; a study's output folder keeps it as study.json).
    """

    name: str
    seeds: tuple[int, ...]
    axes: dict[str, list[Any]]
    arms: dict[str, dict[str, Any]]
    cells: tuple[Cell, ...]
    max_runs_per_program: int | None
    slurm: dict[str, Any]
    data: dict[str, Any]

    @property
    def runs(self) -> tuple[Run, ...]:
        """Every run: cells in order, seeds inner."""
        return tuple(
            Run(cell, seed, _with_seed(cell.experiment, seed))
            for cell in self.cells
            for seed in self.seeds
        )

    def cell(self, name: str) -> Cell:
        for cell in self.cells:
            if name in (cell.name, cell.slug):
                return cell
        raise KeyError(name)


def _with_seed(experiment: Experiment, seed: int) -> Experiment:
    return dataclasses.replace(
        experiment, run=dataclasses.replace(experiment.run, seed=seed)
    )


# -- keys and values ----------------------------------------------------------------


def require(module: str, purpose: str) -> Any:
    """Import an optional dependency of `eqxevo study`, or say how to install it.

    Raises:
        StudyError: the module is not installed.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise StudyError(
            f"{purpose} needs {module}, which is not installed: "
            "pip install 'eqxevo[study]'"
        ) from err


def _field_type(section: str, name: str) -> Any:
    section_type = typing.get_type_hints(Experiment)[section]
    hints = typing.get_type_hints(section_type)
    return hints.get(name)


def check_key(key: str, where: str) -> None:
    """Raise `StudyError` unless `key` names a config key a study may set.

    `section.field` for a plain field; `section.field.sub...` below a table
    field (`env.params`, `net.options`, `strategy.params`).
    """
    parts = key.split(".")
    if len(parts) < 2 or not all(parts):
        raise StudyError(
            f"{where}: {key!r} is not a dotted config key such as "
            '"env.params.sensor_noise" or "strategy.name"'
        )
    section, name = parts[0], parts[1]
    if section not in SECTIONS:
        raise StudyError(
            f"{where}: {key!r} starts with {section!r}; allowed: {', '.join(SECTIONS)}"
        )
    tp = _field_type(section, name)
    if tp is None:
        fields = [f.name for f in dataclasses.fields(getattr(Experiment(), section))]
        raise StudyError(
            f"{where}: unknown key {key!r}; [{section}] has: {', '.join(fields)}"
        )
    if key in FORBIDDEN:
        raise StudyError(f"{where}: {key!r} cannot be set in a study: {FORBIDDEN[key]}")
    is_table = typing.get_origin(tp) in (Mapping, dict)
    if len(parts) > 2 and not is_table:
        raise StudyError(
            f"{where}: {key!r}: {section}.{name} is a value, not a table; "
            f"set {section}.{name} itself"
        )


def _flatten(table: Mapping[str, Any], where: str, prefix: str = "") -> dict[str, Any]:
    """`{"net": {"options": {"x": 1}}, "a.b": 2}` -> `{"net.options.x": 1, "a.b": 2}`.

    Quoted dotted keys keep their value whole; nested tables are walked.
    """
    out: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{prefix}{key}"
        if "." not in key and isinstance(value, Mapping):
            out.update(_flatten(value, where, f"{full}."))
        else:
            out[full] = value
    return out


def _set(data: dict[str, Any], key: str, value: Any, where: str) -> None:
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise StudyError(
                f"{where}: cannot set {key!r}: {'.'.join(parts[: i + 1])} is "
                f"{child!r}, not a table"
            )
        node = child
    node[parts[-1]] = value


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def format_value(value: Any) -> str:
    """A value as a cell name shows it (TOML-like: true, 0.05, snes, {a=1})."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


def _slug(name: str) -> str:
    # A folder name from a cell name: what a path cannot hold becomes "_".
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


def _promote(values: list[Any]) -> list[Any]:
    """Ints among floats become floats (one dtype per axis, so one program)."""
    numbers = [
        v for v in values if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    if any(isinstance(v, float) for v in numbers):
        return [
            float(v) if isinstance(v, int) and not isinstance(v, bool) else v
            for v in values
        ]
    return values


# -- parsing ------------------------------------------------------------------------


def _seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise StudyError(f"study.seeds = {value!r}; it must be >= 1 (or a list)")
        return tuple(range(value))
    if isinstance(value, list) and value:
        ok = all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value
        )
        if ok and len(set(value)) == len(value):
            return tuple(value)
    raise StudyError(
        f"study.seeds = {value!r}; allowed: a count >= 1 (seeds 0..n-1) or a "
        "non-empty list of distinct non-negative ints"
    )


def _axes(table: Any) -> dict[str, list[Any]]:
    if not isinstance(table, Mapping):
        raise StudyError(f"[study.axes] must be a table; got {table!r}")
    axes: dict[str, list[Any]] = {}
    for key, values in _flatten(table, "study.axes").items():
        where = f"study.axes.{json.dumps(key)}"
        check_key(key, where)
        if not isinstance(values, list) or not values:
            raise StudyError(
                f"{where} = {values!r}; an axis must be a non-empty list of values"
            )
        shown = [format_value(v) for v in values]
        if len(set(shown)) != len(shown):
            raise StudyError(f"{where} = {values!r} repeats a value")
        axes[key] = _promote(values)
    return axes


def _arms(value: Any, base_arm: str, axes: Mapping[str, Any]) -> dict[str, dict]:
    arms: dict[str, dict[str, Any]] = {base_arm: {}}
    if value is None:
        return arms
    if not isinstance(value, list) or not all(isinstance(a, Mapping) for a in value):
        raise StudyError(
            f"study.arms must be an array of tables ([[study.arms]]); got {value!r}"
        )
    for i, arm in enumerate(value):
        name = arm.get("name")
        if not isinstance(name, str) or not name:
            raise StudyError(f"study.arms[{i}] needs a name (a non-empty string)")
        if name in arms:
            raise StudyError(
                f"study.arms[{i}]: the name {name!r} is already used"
                + (" by the base arm (study.base_arm)" if name == base_arm else "")
            )
        changes = _flatten({k: v for k, v in arm.items() if k != "name"}, name)
        if not changes:
            raise StudyError(f"study.arms[{i}] ({name!r}) changes no key")
        for key in changes:
            where = f"study.arms[{i}] ({name!r})"
            check_key(key, where)
            if key in axes:
                raise StudyError(
                    f"{where} sets {key!r}, which is also an axis; remove one of them"
                )
        arms[name] = changes
    return arms


def from_dict(data: Mapping[str, Any], root: Path | None = None) -> Study:
    """Build a `Study` from TOML data (`root`: the folder `base` is relative to).

    Raises:
        StudyError: a malformed `[study]` table, an unknown or forbidden key, an
            empty axis, or a cell whose experiment fails validation (the message
            names the key and the cell).
    """
    data = dict(data)
    unknown = sorted(set(data) - {"base", "study", *SECTIONS})
    if unknown:
        raise StudyError(
            f"unknown top-level key {unknown[0]!r} in the study file; allowed: base, "
            f"[study], {', '.join(f'[{s}]' for s in SECTIONS)}"
        )
    experiment: dict[str, Any] = {}
    if "base" in data:
        base = data.pop("base")
        if not isinstance(base, str):
            raise StudyError(f"base = {base!r}; it must be a path (a string)")
        path = (root or Path.cwd()) / base
        try:
            experiment = tomllib.loads(path.read_text())
        except OSError as err:
            raise StudyError(f"base = {base!r}: cannot read {path}: {err}") from err
        except tomllib.TOMLDecodeError as err:
            raise StudyError(
                f"base = {base!r}: {path} is not valid TOML: {err}"
            ) from err
        if "study" in experiment or "base" in experiment:
            raise StudyError(f"base = {base!r} must be an experiment, not a study")
    study = data.pop("study", None)
    if not isinstance(study, Mapping):
        raise StudyError("the study file needs a [study] table (name, seeds, axes)")
    experiment = _merge(experiment, data)
    unknown = sorted(set(study) - set(STUDY_KEYS) - {"slurm"})
    if unknown:
        raise StudyError(
            f"unknown key study.{unknown[0]}; allowed: "
            f"{', '.join(f'study.{k}' for k in (*STUDY_KEYS, 'slurm'))}"
        )
    name = study.get("name")
    if not isinstance(name, str) or not name or _slug(name) != name:
        raise StudyError(
            f"study.name = {name!r}; it must be a non-empty name of letters, digits "
            "and . _ = , + -"
        )
    seeds = _seeds(study.get("seeds", 1))
    base_arm = study.get("base_arm", "base")
    if not isinstance(base_arm, str) or not base_arm:
        raise StudyError(f"study.base_arm = {base_arm!r}; it must be a non-empty name")
    limit = study.get("max_runs_per_program")
    try:
        optional_positive_int("study.max_runs_per_program", limit, "no limit")
    except ValueError as err:
        raise StudyError(str(err)) from None
    axes = _axes(study.get("axes", {}))
    arms = _arms(study.get("arms"), base_arm, axes)
    slurm = _slurm(study.get("slurm", {}))

    cells = []
    slugs: dict[str, str] = {}
    for arm, changes in arms.items():
        for combo in itertools.product(*axes.values()):
            values = dict(zip(axes, combo, strict=True))
            # The arm names the cell only when there is more than one to tell apart.
            parts = [arm] if len(arms) > 1 or not values else []
            parts += [f"{k}={format_value(v)}" for k, v in values.items()]
            cell_name = ",".join(parts)
            # Arm changes first, axis values over them (an axis may vary a key an
            # arm sets).
            cell_data = copy.deepcopy(experiment)
            for key, value in {**changes, **values}.items():
                _set(cell_data, key, value, f"cell {cell_name!r}")
            try:
                cell_experiment = config_module.from_dict(cell_data)
            except ConfigError as err:
                raise StudyError(f"cell {cell_name!r}: {err}") from err
            # Two names can map to one folder name (characters a path cannot hold are
            # replaced): refused, so no two cells ever write one run directory.
            slug = _slug(cell_name)
            if slug in slugs:
                raise StudyError(
                    f"cells {slugs[slug]!r} and {cell_name!r} get the same folder "
                    f"name {slug!r}; give the values distinct names"
                )
            slugs[slug] = cell_name
            cells.append(Cell(cell_name, slug, arm, values, cell_experiment))
    resolved = {"study": dict(study), **experiment}
    return Study(
        name=name,
        seeds=seeds,
        axes=axes,
        arms=arms,
        cells=tuple(cells),
        max_runs_per_program=limit,
        slurm=slurm,
        data=resolved,
    )


def _slurm(table: Any) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        raise StudyError(f"[study.slurm] must be a table; got {table!r}")
    unknown = sorted(set(table) - set(SLURM_KEYS))
    if unknown:
        raise StudyError(
            f"unknown key study.slurm.{unknown[0]}; allowed: "
            f"{', '.join(f'study.slurm.{k}' for k in SLURM_KEYS)}"
        )
    return {SLURM_KEYS[k]: v for k, v in table.items()}


def load(path: str | Path) -> Study:
    """Read and validate a study file (see the module docstring).

    Raises:
        StudyError: unreadable TOML, or any error `from_dict` raises.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except OSError as err:
        raise StudyError(f"cannot read study file {path}: {err}") from err
    except tomllib.TOMLDecodeError as err:
        raise StudyError(f"study file {path} is not valid TOML: {err}") from err
    return from_dict(data, path.parent)


__all__ = [
    "Cell",
    "Run",
    "Study",
    "StudyError",
    "check_key",
    "format_value",
    "from_dict",
    "load",
    "require",
]
