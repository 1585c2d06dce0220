"""What a study file's `[study]` table may say (keys, names, seeds, axes, arms,
size), checked with every fault collected, one line each, before a cell is built.
"""

import dataclasses
import json
import math
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal

from eqxevo._src._checks import did_you_mean, dotted_keys

from ..config import ConfigError, Experiment


class StudyError(ConfigError):
    """A study file is malformed, or one of its cells is not a valid experiment."""


SECTIONS = tuple(f.name for f in dataclasses.fields(Experiment))
"""Top-level experiment tables: env, net, strategy, run."""

FORBIDDEN = {
    "run.seed": "a study's seeds come from study.seeds",
    "run.num_seeds": "every run of a study is one seed; give study.seeds instead",
}

MAX_RUNS = 100_000
"""The most runs (cells x seeds) a study may hold; checked before any cell is built."""

_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""A name that becomes a folder name (study, arms): no separator, no `..`."""

STUDY_KEYS = (
    "name",
    "seeds",
    "base_arm",
    "max_runs_per_program",
    "axes",
    "arms",
    "compare",
    "tune",
    "tuned",
)
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


def format_value(value: Any) -> str:
    """A value as a cell name shows it (TOML-like: true, 0.05, snes, {a=1})."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}={format_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    return str(value)


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
            f"{where}: {key!r} starts with {section!r}; allowed: "
            f"{', '.join(SECTIONS)}{did_you_mean(section, list(SECTIONS))}"
        )
    tp = _field_type(section, name)
    if tp is None:
        fields = [f.name for f in dataclasses.fields(getattr(Experiment(), section))]
        raise StudyError(
            f"{where}: unknown key {key!r}"
            f"{did_you_mean(name, fields, prefix=f'{section}.')}; "
            f"[{section}] has: {', '.join(fields)}"
        )
    if key in FORBIDDEN:
        raise StudyError(f"{where}: {key!r} cannot be set in a study: {FORBIDDEN[key]}")
    is_table = typing.get_origin(tp) in (Mapping, dict)
    if len(parts) > 2 and not is_table:
        raise StudyError(
            f"{where}: {key!r}: {section}.{name} is a value, not a table; "
            f"set {section}.{name} itself"
        )


def flatten_keys(
    table: Mapping[str, Any], where: str, errors: list[str]
) -> dict[str, Any]:
    """`{"net": {"options": {"x": 1}}, "a.b": 2}` -> `{"net.options.x": 1, "a.b": 2}`.

    Quoted dotted keys keep their value whole; nested tables are walked. One key
    written twice (`"a.b" = 1` and `[a] b = 2`) is an error, not a merge.
    """
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}

    def walk(node: Mapping[str, Any], prefix: str, path: str) -> None:
        for key, value in node.items():
            full = f"{prefix}{key}"
            shown = path + (json.dumps(key) if "." in key else key)
            if "." not in key and isinstance(value, Mapping):
                walk(value, f"{full}.", f"{shown}.")
            elif full in out:
                errors.append(
                    f"{where}: {full!r} is written twice, as {spelled[full]} and as "
                    f"{shown} (a quoted dotted key and nested tables name one key); "
                    "keep one"
                )
            else:
                out[full], spelled[full] = value, shown

    walk(table, "", "")
    return out


def parse_seeds(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise StudyError(f"study.seeds = {value!r}; it must be >= 1 (or a list)")
        if value > MAX_RUNS:
            # Refused before range(value) is built: a typo must not exhaust memory.
            raise StudyError(
                f"study.seeds = {value:,} is over the limit of {MAX_RUNS:,} runs "
                "per study"
            )
        return tuple(range(value))
    if isinstance(value, list) and value:
        ok = all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value
        )
        if ok and len(set(value)) == len(value):
            return tuple(value)
    raise StudyError(
        f"study.seeds = {value!r}; allowed: a count from 1 to {MAX_RUNS:,} (seeds "
        "0..n-1) or a non-empty list of distinct non-negative ints"
    )


def check_name(key: str, value: Any) -> str:
    """`value` if it is a name safe as one folder name, else a `StudyError`."""
    if isinstance(value, str) and _NAME.fullmatch(value) and value.strip("."):
        return value
    raise StudyError(
        f"{key} = {value!r}; a name becomes a folder name: use letters, digits, "
        "'-', '_' and '.' (not dots only)"
    )


def parse_axes(table: Any, errors: list[str]) -> dict[str, list[Any]]:
    """The valid axes; every fault of the others is added to `errors`."""
    if not isinstance(table, Mapping):
        errors.append(f"[study.axes] must be a table; got {table!r}")
        return {}
    axes: dict[str, list[Any]] = {}
    for key, values in flatten_keys(table, "study.axes", errors).items():
        where = f"study.axes.{json.dumps(key)}"
        try:
            check_key(key, where)
        except StudyError as err:
            errors.append(str(err))
            continue
        if not isinstance(values, list) or not values:
            errors.append(
                f"{where} = {values!r}; an axis must be a non-empty list of values"
            )
            continue
        shown = [format_value(v) for v in values]
        if len(set(shown)) != len(shown):
            errors.append(f"{where} = {values!r} repeats a value")
            continue
        axes[key] = _promote(values)
    return axes


def _arm(
    i: int, arm: Mapping[str, Any], taken: Mapping[str, Any], axes: Mapping[str, Any]
) -> tuple[str, dict[str, Any], list[str]]:
    """One `[[study.arms]]` entry: its name, its changes and its faults."""
    errors: list[str] = []
    name = arm.get("name")
    if not isinstance(name, str) or not name:
        return "", {}, [f"study.arms[{i}] needs a name (a non-empty string)"]
    where = f"study.arms[{i}] ({name!r})"
    try:
        check_name(f"study.arms[{i}].name", name)
    except StudyError as err:
        errors.append(str(err))
    if name in taken:
        errors.append(
            f"study.arms[{i}]: the name {name!r} is already used" + taken[name]
        )
    changes = flatten_keys({k: v for k, v in arm.items() if k != "name"}, where, errors)
    if not changes:
        errors.append(f"study.arms[{i}] ({name!r}) changes no key")
    for key in changes:
        try:
            check_key(key, where)
        except StudyError as err:
            errors.append(str(err))
        if key in axes:
            errors.append(
                f"{where} sets {key!r}, which is also an axis; remove one of them"
            )
    return name, changes, errors


def parse_arms(
    value: Any, base_arm: str, axes: Mapping[str, Any], errors: list[str]
) -> dict[str, dict]:
    """The valid arms, the base arm first; the others' faults go to `errors`."""
    arms: dict[str, dict[str, Any]] = {base_arm: {}}
    if value is None:
        return arms
    if not isinstance(value, list) or not all(isinstance(a, Mapping) for a in value):
        errors.append(
            f"study.arms must be an array of tables ([[study.arms]]); got {value!r}"
        )
        return arms
    taken = {base_arm: " by the base arm (study.base_arm)"}
    for i, arm in enumerate(value):
        name, changes, faults = _arm(i, arm, taken, axes)
        errors += faults
        taken.setdefault(name, "")
        if not faults:
            arms[name] = changes
    return arms


def forbidden(experiment: Mapping[str, Any], source: str) -> list[str]:
    """`[run] seed` and the like in the experiment tables: refused as in an arm."""
    flat = dotted_keys({k: v for k, v in experiment.items() if k in SECTIONS})
    return [
        f"[{key.split('.')[0]}] in {source}: {key!r} cannot be set in a study: "
        f"{FORBIDDEN[key]}"
        for key in FORBIDDEN
        if key in flat
    ]


def size_fault(seeds: tuple[int, ...], axes: Mapping[str, list], arms: Mapping) -> str:
    """'' if the study is within `MAX_RUNS`, else the fault (counted, not built)."""
    runs = len(arms) * math.prod(len(v) for v in axes.values()) * len(seeds)
    if runs <= MAX_RUNS:
        return ""
    factors = [
        f"{len(arms)} arm{'s' * (len(arms) != 1)}",
        *(f"{len(v)} {k}" for k, v in axes.items()),
    ]
    return (
        f"the study has {runs:,} runs ({' x '.join(factors)} x {len(seeds):,} "
        f"seeds), over the limit of {MAX_RUNS:,} runs per study; use fewer arms, "
        "axis values or seeds"
    )


def raise_all(errors: list[str]) -> None:
    """One `StudyError` for every fault found, one line each."""
    if len(errors) == 1:
        raise StudyError(errors[0])
    if errors:
        raise StudyError(
            f"{len(errors)} errors in the study file:\n"
            + "\n".join(f"  {e}" for e in errors)
        )


Alternative = Literal["greater", "less", "two-sided", "equivalent"]
ALTERNATIVES: tuple[Alternative, ...] = ("greater", "less", "two-sided", "equivalent")
Test = Literal["welch", "mwu", "bootstrap"]
TESTS: tuple[Test, ...] = ("welch", "mwu", "bootstrap")
COMPARE_KEYS = ("a", "b", "test", "alternative", "margin", "effect", "metric")

COMPARE_METRICS = ("heldout_mean", "qd_score", "coverage")
"""What a declared comparison compares: each run's held-out final fitness, or a
MAP-Elites run's final QD score or coverage."""


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A comparison of two arms and its one test, declared before the study runs
    (`[[study.compare]]`; run by `eqxevo._app.study.stats.preregistered_tests`):

        [[study.compare]]
        a = "plastic-ff"
        b = "ff"
        test = "welch"            # or "mwu" (Mann-Whitney U), "bootstrap"
        alternative = "greater"   # A > B (the default); "less", "two-sided",
                                  # or "equivalent" (TOST within +-margin)
        margin = 2.0              # only with alternative = "equivalent"
        effect = 3.0              # the smallest difference worth finding, for
                                  # `eqxevo study plan --power` (not with a margin)
        metric = "heldout_mean"   # or, for MAP-Elites runs, "qd_score", "coverage"

    With axes, the two arms are compared at every combination of axis values.
    """

    a: str
    b: str
    test: Test
    alternative: Alternative = "greater"
    margin: float | None = None
    effect: float | None = None
    metric: str = "heldout_mean"


def _positive(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and 0 < value < math.inf
    )


def _compare_faults(where: str, entry: Mapping[str, Any], arms: Any) -> list[str]:
    """What is wrong with one `[[study.compare]]` entry, one line each."""
    faults = [
        f"unknown key {where}.{key}; allowed: {', '.join(COMPARE_KEYS)}"
        for key in sorted(set(entry) - set(COMPARE_KEYS))
    ]
    for side in ("a", "b"):
        name = entry.get(side)
        if name not in arms:
            faults.append(
                f"{where}.{side} = {name!r} is not an arm"
                + (
                    did_you_mean(name, arms, quote=True)
                    if isinstance(name, str)
                    else ""
                )
                + f"; the arms: {', '.join(map(repr, arms))}"
            )
    if not faults and entry["a"] == entry["b"]:
        faults.append(f"{where} compares arm {entry['a']!r} with itself")
    test = entry.get("test")
    if test is None:
        faults.append(
            f"{where}.test is missing: declare the comparison's one test, "
            + " | ".join(map(repr, TESTS))
        )
    elif test not in TESTS:
        faults.append(
            f"{where}.test = {test!r}; it must be one of " + ", ".join(map(repr, TESTS))
        )
    alternative = entry.get("alternative", "greater")
    if alternative not in ALTERNATIVES:
        faults.append(
            f"{where}.alternative = {alternative!r}; it must be one of "
            + ", ".join(map(repr, ALTERNATIVES))
        )
    margin = entry.get("margin")
    if alternative == "equivalent" and margin is None:
        faults.append(
            f'{where}: alternative = "equivalent" needs a margin (margin = m: '
            "A and B equivalent when |mean A - mean B| < m)"
        )
    if margin is not None and alternative != "equivalent":
        faults.append(
            f"{where}.margin is for an equivalence test (TOST): set alternative = "
            '"equivalent", or drop the margin'
        )
    if margin is not None and not _positive(margin):
        faults.append(f"{where}.margin = {margin!r}; it must be a positive number")
    effect = entry.get("effect")
    if effect is not None and not _positive(effect):
        faults.append(f"{where}.effect = {effect!r}; it must be a positive number")
    metric = entry.get("metric", "heldout_mean")
    if metric not in COMPARE_METRICS:
        faults.append(
            f"{where}.metric = {metric!r}; it must be one of "
            + ", ".join(map(repr, COMPARE_METRICS))
        )
    elif effect is not None and metric != "heldout_mean":
        faults.append(
            f"{where}.effect: power is planned from tuning's held-out fitness; "
            f"drop the effect of a comparison on {metric}"
        )
    if effect is not None and alternative == "equivalent":
        faults.append(
            f"{where}.effect: an equivalence test's effect is its margin; drop "
            "the effect"
        )
    return faults


def archive_faults(
    compare: tuple[Comparison, ...], arms: Mapping[str, Any]
) -> list[str]:
    """Comparisons of an archive figure (`qd_score`, `coverage`) naming an arm
    whose runs keep no archive, one line each; `arms` maps each arm to one of its
    experiments."""
    return [
        f"study.compare[{i}].metric = {c.metric!r}: arm {side!r} runs no MAP-Elites "
        '(its [qd] archive is "off"); compare its held-out fitness (metric = '
        '"heldout_mean") or give it an archive'
        for i, c in enumerate(compare)
        if c.metric != "heldout_mean"
        for side in (c.a, c.b)
        if arms[side].qd.archive == "off"
    ]


def parse_compare(
    value: Any, arms: Mapping[str, Any], errors: list[str]
) -> tuple[Comparison, ...]:
    """The valid `[[study.compare]]` entries; their faults go to `errors`."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(c, Mapping) for c in value):
        errors.append(
            "study.compare must be an array of tables ([[study.compare]] with a, b, "
            f"test and alternative); got {value!r}"
        )
        return ()
    out = []
    for i, entry in enumerate(value):
        faults = _compare_faults(f"study.compare[{i}]", entry, arms)
        errors += faults
        if not faults:
            margin, effect = entry.get("margin"), entry.get("effect")
            out.append(
                Comparison(
                    entry["a"],
                    entry["b"],
                    entry["test"],
                    entry.get("alternative", "greater"),
                    None if margin is None else float(margin),
                    None if effect is None else float(effect),
                    entry.get("metric", "heldout_mean"),
                )
            )
    return tuple(out)


def parse_slurm(table: Any, errors: list[str]) -> dict[str, Any]:
    if not isinstance(table, Mapping):
        errors.append(f"[study.slurm] must be a table; got {table!r}")
        return {}
    known = list(SLURM_KEYS)
    for key in sorted(set(table) - set(known)):
        errors.append(
            f"unknown key study.slurm.{key}"
            f"{did_you_mean(key, known, prefix='study.slurm.')}; "
            f"allowed: {', '.join(f'study.slurm.{k}' for k in known)}"
        )
    return {SLURM_KEYS[k]: v for k, v in table.items() if k in SLURM_KEYS}


__all__ = [
    "ALTERNATIVES",
    "COMPARE_KEYS",
    "COMPARE_METRICS",
    "FORBIDDEN",
    "MAX_RUNS",
    "SECTIONS",
    "SLURM_KEYS",
    "STUDY_KEYS",
    "TESTS",
    "Alternative",
    "Comparison",
    "StudyError",
    "Test",
    "check_key",
    "check_name",
    "flatten_keys",
    "forbidden",
    "format_value",
    "parse_arms",
    "parse_axes",
    "parse_compare",
    "parse_seeds",
    "parse_slurm",
    "raise_all",
    "size_fault",
]
