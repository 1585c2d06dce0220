"""The study file: an experiment plus a `[study]` table, expanded into cells (axis
values x arms) and runs (a cell with one seed). Reference: docs/studies.md.
"""

import copy
import dataclasses
import importlib
import itertools
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eqxevo._src._checks import did_you_mean, optional_positive_int
from eqxevo._src.registry import lookup_env, lookup_net

from .. import config as config_module
from ..config import ConfigError, Experiment
from .checks import (
    SECTIONS,
    STUDY_KEYS,
    Comparison,
    StudyError as StudyError,
    archive_faults,
    check_key as check_key,
    check_name,
    forbidden,
    format_value as format_value,
    parse_arms,
    parse_axes,
    parse_compare,
    parse_seeds,
    parse_slurm,
    raise_all,
    size_fault,
)
from .tuning import Tune, parse_tune, parse_tuned


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
class Trial:
    """A cell with one seed (`experiment.run.seed`): one trial of the study, run
    in its own run directory (`eqxevo.experiment.Run`)."""

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
        compare: the pre-registered comparisons (`[[study.compare]]`).
        slurm: submitit parameters from `[study.slurm]`.
        tune: the tuning table (`[study.tune]`; `eqxevo._app.study.tuning`).
        tuned: `{arm: {key: value}}`, the settings `eqxevo study tune` chose,
            set over each arm's changes (`study.tuned`; {} before tuning).
        data: the study as plain data, base merged in (`from_dict(data)` gives
            the same study; a study's output folder keeps it as study.json).
    """

    name: str
    seeds: tuple[int, ...]
    axes: dict[str, list[Any]]
    arms: dict[str, dict[str, Any]]
    cells: tuple[Cell, ...]
    max_runs_per_program: int | None
    compare: tuple[Comparison, ...]
    slurm: dict[str, Any]
    data: dict[str, Any]
    tune: Tune | None = None
    tuned: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def runs(self) -> tuple[Trial, ...]:
        """Every run: cells in order, seeds inner."""
        return tuple(
            Trial(cell, seed, with_seed(cell.experiment, seed))
            for cell in self.cells
            for seed in self.seeds
        )

    @property
    def experiment_data(self) -> dict[str, Any]:
        """The experiment tables every cell starts from (`data` less `study`)."""
        return {k: v for k, v in self.data.items() if k != "study"}

    def cell(self, name: str) -> Cell:
        for cell in self.cells:
            if name in (cell.name, cell.slug):
                return cell
        raise KeyError(name)


def with_seed(experiment: Experiment, seed: int) -> Experiment:
    return dataclasses.replace(
        experiment, run=dataclasses.replace(experiment.run, seed=seed)
    )


# -- keys and values ----------------------------------------------------------------


def require(module: str, purpose: str) -> Any:
    """Import an optional dependency of `eqxevo study`, or say how to install it.

    Raises:
        StudyError: the module is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise StudyError(
            f"{purpose} needs {module}, which is not installed: "
            "pip install 'eqxevo[study]'"
        ) from err


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    node = data
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise StudyError(
                f"cannot set {key!r}: {'.'.join(parts[: i + 1])} is "
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


def _slug(name: str) -> str:
    # A folder name from a cell name: what a path cannot hold becomes "_".
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", name)


# -- parsing ------------------------------------------------------------------------


def _read_base(base: Any, root: Path | None) -> dict[str, Any]:
    if not isinstance(base, str):
        raise StudyError(f"base = {base!r}; it must be a path (a string)")
    try:
        experiment = config_module.read_toml((root or Path.cwd()) / base, "experiment")
    except ConfigError as err:
        raise StudyError(f"base = {base!r}: {err}") from None
    if "study" in experiment or "base" in experiment:
        raise StudyError(f"base = {base!r} must be an experiment, not a study")
    return experiment


def from_dict(data: Mapping[str, Any], root: Path | None = None) -> Study:
    """Build a `Study` from TOML data (`root`: the folder `base` is relative to).

    Every independent fault is found before any cell is built, and all are
    raised together, one line each.

    Raises:
        StudyError: a malformed `[study]` table, an unknown or forbidden key, an
            empty axis, a name unsafe as a folder name, more than `MAX_RUNS`
            runs, or a cell whose experiment fails validation (the message
            names the key and the cell).
    """
    data = dict(data)
    errors: list[str] = []
    allowed = ["base", "study", *SECTIONS]
    for key in sorted(set(data) - set(allowed)):
        errors.append(
            f"unknown top-level key {key!r} in the study file"
            f"{did_you_mean(key, allowed)}; "
            f"allowed: base, [study], {', '.join(f'[{s}]' for s in SECTIONS)}"
        )
    experiment: dict[str, Any] = {}
    if "base" in data:
        base = data.pop("base")
        try:
            experiment = _read_base(base, root)
        except StudyError as err:
            errors.append(str(err))
        errors += forbidden(experiment, f"base {base!r}")
    errors += forbidden(data, "the study file")
    study = data.pop("study", None)
    if not isinstance(study, Mapping):
        errors.append("the study file needs a [study] table (name, seeds, axes)")
        raise_all(errors)  # raises: errors holds this one at least
    experiment = _merge(experiment, {k: v for k, v in data.items() if k in SECTIONS})
    known = [*STUDY_KEYS, "slurm"]
    for key in sorted(set(study) - set(known)):
        errors.append(
            f"unknown key study.{key}{did_you_mean(key, known, prefix='study.')}; "
            "allowed: "
            f"{', '.join(f'study.{k}' for k in known)}"
        )
    name = study.get("name")
    base_arm = study.get("base_arm", "base")
    limit = study.get("max_runs_per_program")
    seeds: tuple[int, ...] = ()
    try:
        seeds = parse_seeds(study.get("seeds", 1))
    except StudyError as err:
        errors.append(str(err))
    for check in (
        lambda: check_name("study.name", name),
        lambda: check_name("study.base_arm", base_arm),
        lambda: optional_positive_int("study.max_runs_per_program", limit, "no limit"),
    ):
        try:
            check()
        except ValueError as err:  # StudyError is one
            errors.append(str(err))
    axes = parse_axes(study.get("axes", {}), errors)
    arms = parse_arms(study.get("arms"), base_arm, axes, errors)
    compare = parse_compare(study.get("compare"), arms, errors)
    slurm = parse_slurm(study.get("slurm", {}), errors)
    tune = parse_tune(study.get("tune"), seeds, arms, axes, errors)
    tuned = parse_tuned(study.get("tuned"), tune, arms, errors)
    if seeds and (fault := size_fault(seeds, axes, arms)):
        errors.append(fault)
    raise_all(errors)

    changed = {arm: {**changes, **tuned.get(arm, {})} for arm, changes in arms.items()}
    cells = _cells(experiment, axes, changed, errors)
    raise_all(errors)
    raise_all(archive_faults(compare, {c.arm: c.experiment for c in cells}))
    return Study(
        name=str(name),  # checked above
        seeds=seeds,
        axes=axes,
        arms=arms,
        cells=tuple(cells),
        max_runs_per_program=limit,
        compare=compare,
        slurm=slurm,
        data={"study": dict(study), **experiment},
        tune=tune,
        tuned=tuned,
    )


def variant_cells(
    study: Study, arm: str, changes: Mapping[str, Any], label: str
) -> list[Cell]:
    """The cells of `arm` with `changes` set over its own (a tuning trial's
    settings), named `label` and the axis values; in axis order.

    Raises:
        StudyError: a cell's experiment fails validation.
    """
    errors: list[str] = []
    arms = {label: {**study.arms[arm], **changes}}
    cells = _cells(study.experiment_data, study.axes, arms, errors, name_arm=True)
    raise_all(errors)
    return [dataclasses.replace(c, arm=arm) for c in cells]


def _cells(
    experiment: Mapping[str, Any],
    axes: Mapping[str, list[Any]],
    arms: Mapping[str, Mapping[str, Any]],
    errors: list[str],
    *,
    name_arm: bool = False,
) -> list[Cell]:
    """Every cell, validated; faults go to `errors` (one line per distinct fault).
    `name_arm`: the arm names each cell even when it is the only one."""
    cells = []
    slugs: dict[str, str] = {}
    faults: dict[str, list[str]] = {}  # message -> the cells with it
    for arm, changes in arms.items():
        for combo in itertools.product(*axes.values()):
            values = dict(zip(axes, combo, strict=True))
            # The arm names the cell only when there is more than one to tell apart.
            parts = [arm] if len(arms) > 1 or not values or name_arm else []
            parts += [f"{k}={format_value(v)}" for k, v in values.items()]
            cell_name = ",".join(parts)
            # Arm changes first, axis values over them (an axis may vary a key an
            # arm sets).
            cell_data = copy.deepcopy(dict(experiment))
            try:
                for key, value in {**changes, **values}.items():
                    _set(cell_data, key, value)
                cell_experiment = config_module.from_dict(cell_data)
            except ConfigError as err:  # StudyError is one
                faults.setdefault(str(err), []).append(cell_name)
                continue
            # Two names can map to one folder name (characters a path cannot hold are
            # replaced): refused, so no two cells ever write one run directory.
            slug = _slug(cell_name)
            if slug in slugs:
                errors.append(
                    f"cells {slugs[slug]!r} and {cell_name!r} get the same folder "
                    f"name {slug!r}; give the values distinct names"
                )
            elif len(slug.encode()) > 255:
                errors.append(
                    f"cell {cell_name!r}: its folder name is {len(slug.encode())} "
                    "bytes, over the 255 a file system allows; use shorter values"
                )
            slugs[slug] = cell_name
            cells.append(Cell(cell_name, slug, arm, values, cell_experiment))
    total = len(arms) * math.prod(len(v) for v in axes.values())
    for message, names in faults.items():
        if len(names) == 1:
            errors.append(f"cell {names[0]!r}: {message}")
        else:
            which = "every cell" if len(names) == total else f"{len(names)} cells"
            errors.append(f"{which} ({names[0]!r}, ...): {message}")
    errors += _names(cells)
    return cells


def _names(cells: list[Cell]) -> list[str]:
    """Unknown environment or network names (a gymnax id too), each once; found
    here so that `study run` refuses them before it writes anything."""
    errors = []
    for names, lookup in (
        ({c.experiment.env.name for c in cells}, lookup_env),
        ({c.experiment.net.name for c in cells}, lookup_net),
    ):
        for name in sorted(names):
            try:
                lookup(name)
            except ValueError as err:
                errors.append(str(err))
    return errors


def load(path: str | Path) -> Study:
    """Read and validate a study file (see the module docstring).

    Raises:
        StudyError: unreadable TOML, or any error `from_dict` raises.
    """
    path = Path(path)
    try:
        data = config_module.read_toml(path, "study file")
    except ConfigError as err:
        raise StudyError(str(err)) from None
    return from_dict(data, path.parent)


__all__ = [
    "Cell",
    "Study",
    "StudyError",
    "Trial",
    "check_key",
    "format_value",
    "from_dict",
    "load",
    "require",
    "variant_cells",
    "with_seed",
]
