"""A study's `[study.tune]` table: the tuning seeds, the trial budget per arm and
each arm's search space, checked before anything runs (docs/studies.md,
"Tuning"). `eqxevo._app.study.tune` runs it.

    [study.tune]
    seeds = [1000, 1001, 1002, 1003]  # disjoint from study.seeds
    trials = 24                       # per arm: every arm gets the same budget
    batch = 8                         # trials asked at once, run as one program
    sampler = "tpe"                   # or "random"
    seed = 0                          # the sampler's seed

    [study.tune.space]                # every arm's space
    "strategy.std_init" = { low = 0.05, high = 2.0, log = true }
    "strategy.population_size" = { choices = [128, 256] }

    [study.tune.arms.gru]             # one arm's keys, added to (or replacing)
    "strategy.params.lrate_init" = { low = 0.01, high = 0.5, log = true }
"""

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from eqxevo._src._checks import did_you_mean

from .checks import StudyError, check_key, flatten_keys, format_value, parse_seeds

TUNE_KEYS = ("seeds", "trials", "batch", "sampler", "seed", "space", "arms")
SAMPLERS = ("tpe", "random")
RANGE_KEYS = ("low", "high", "log", "step")


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One searched key: a range (`low`..`high`, ints when both are ints, `log`
    scale, a `step`) or a list of `choices`."""

    key: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Any, ...] | None = None

    def distribution(self) -> Any:
        """The Optuna distribution of this key."""
        import optuna.distributions as od

        if self.choices is not None:
            return od.CategoricalDistribution(self.choices)
        if isinstance(self.low, int) and isinstance(self.high, int):
            return od.IntDistribution(
                self.low, self.high, log=self.log, step=int(self.step or 1)
            )
        assert self.low is not None and self.high is not None  # checked in parse
        return od.FloatDistribution(
            float(self.low),
            float(self.high),
            log=self.log,
            step=None if self.step is None else float(self.step),
        )

    def extremes(self) -> tuple[Any, ...]:
        """Values the parse checks the experiment with: the ends or every choice."""
        return self.choices if self.choices is not None else (self.low, self.high)


@dataclasses.dataclass(frozen=True)
class Tune:
    """A parsed `[study.tune]` (see the module docstring).

    Attributes:
        seeds: the tuning seeds, disjoint from the study's.
        trials: trials per arm.
        batch: trials asked at a time and run together.
        sampler: "tpe" or "random".
        seed: the sampler's seed.
        spaces: `{arm: (Dimension, ...)}`, every arm of the study.
    """

    seeds: tuple[int, ...]
    trials: int
    batch: int
    sampler: str
    seed: int
    spaces: dict[str, tuple[Dimension, ...]]


def _int(where: str, value: Any, low: int, errors: list[str]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= low:
        return value
    errors.append(f"{where} = {value!r}; it must be an int >= {low}")
    return low


def _number(value: Any) -> TypeGuard[int | float]:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _dimension(key: str, value: Any, where: str) -> Dimension:
    """One `"key" = { low, high, log, step }` or `{ choices = [...] }` entry."""
    check_key(key, where)
    where = f"{where}.{json.dumps(key)}"
    if not isinstance(value, Mapping):
        raise StudyError(
            f"{where} = {value!r}; give {{ low = a, high = b }} (log = true, "
            "step = s optional) or { choices = [...] }"
        )
    if "choices" in value:
        choices = value["choices"]
        extra = sorted(set(value) - {"choices"})
        if extra:
            raise StudyError(f"{where}: choices go alone; remove {', '.join(extra)}")
        if not isinstance(choices, list) or not choices:
            raise StudyError(f"{where}.choices = {choices!r}; give a non-empty list")
        if not all(
            c is None or isinstance(c, bool | int | float | str) for c in choices
        ):
            raise StudyError(
                f"{where}.choices = {choices!r}; choices are numbers, strings or "
                "booleans"
            )
        shown = [format_value(c) for c in choices]
        if len(set(shown)) != len(shown):
            raise StudyError(f"{where}.choices = {choices!r} repeats a value")
        return Dimension(key, choices=tuple(choices))
    unknown = sorted(set(value) - set(RANGE_KEYS))
    if unknown:
        raise StudyError(
            f"{where}: unknown key {unknown[0]!r}"
            f"{did_you_mean(unknown[0], [*RANGE_KEYS, 'choices'])}; allowed: "
            "low, high, log, step, or choices"
        )
    low, high = value.get("low"), value.get("high")
    log, step = value.get("log", False), value.get("step")
    if not (_number(low) and _number(high) and low < high):
        raise StudyError(
            f"{where}: low = {low!r}, high = {high!r}; give two numbers, low < high"
        )
    if not isinstance(log, bool):
        raise StudyError(f"{where}.log = {log!r}; true or false")
    if log and low <= 0:
        raise StudyError(f"{where}: log = true needs low > 0 (low = {low!r})")
    if step is not None and not (_number(step) and step > 0):
        raise StudyError(f"{where}.step = {step!r}; a positive number")
    if step is not None and log:
        raise StudyError(f"{where}: step and log = true cannot go together")
    return Dimension(key, low, high, log, step)


def _space(table: Any, where: str, errors: list[str]) -> dict[str, Dimension]:
    if not isinstance(table, Mapping):
        errors.append(f"[{where}] must be a table of searched keys; got {table!r}")
        return {}
    # A range is a table: only the tables above it are flattened.
    flat = flatten_keys(_wrap(table), where, errors)
    out: dict[str, Dimension] = {}
    for key, value in flat.items():
        raw = value.value if isinstance(value, _Leaf) else value
        try:
            out[key] = _dimension(key, raw, where)
        except StudyError as err:
            errors.append(str(err))
    return out


@dataclasses.dataclass(frozen=True)
class _Leaf:
    value: Any


def _is_range(value: Any) -> bool:
    return isinstance(value, Mapping) and (
        "choices" in value or "low" in value or "high" in value
    )


def _wrap(node: Mapping[str, Any]) -> dict[str, Any]:
    """Every range in `node` held whole (`flatten_keys` walks plain tables)."""
    return {
        k: _Leaf(v) if _is_range(v) else _wrap(v) if isinstance(v, Mapping) else v
        for k, v in node.items()
    }


def parse_tune(
    value: Any,
    study_seeds: tuple[int, ...],
    arms: Mapping[str, Mapping[str, Any]],
    axes: Mapping[str, Any],
    errors: list[str],
) -> Tune | None:
    """The valid `[study.tune]` (None when absent or faulty; faults go to
    `errors`, one line each)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.append(f"[study.tune] must be a table; got {value!r}")
        return None
    before = len(errors)
    for key in sorted(set(value) - set(TUNE_KEYS)):
        errors.append(
            f"unknown key study.tune.{key}"
            f"{did_you_mean(key, list(TUNE_KEYS), prefix='study.tune.')}; allowed: "
            + ", ".join(f"study.tune.{k}" for k in TUNE_KEYS)
        )
    seeds: tuple[int, ...] = ()
    if "seeds" not in value:
        errors.append(
            "study.tune.seeds is missing: give the tuning seeds, disjoint from "
            "study.seeds (e.g. seeds = [1000, 1001, 1002])"
        )
    else:
        try:
            seeds = parse_seeds(value["seeds"])
        except StudyError as err:
            errors.append(str(err).replace("study.seeds", "study.tune.seeds", 1))
    shared = sorted(set(seeds) & set(study_seeds))
    if shared:
        errors.append(
            f"study.tune.seeds and study.seeds share seed"
            f"{'s' * (len(shared) > 1)} {', '.join(map(str, shared[:8]))}"
            f"{' ...' * (len(shared) > 8)}; tuning seeds must be disjoint from the "
            "evaluation seeds"
        )
    if "trials" not in value:
        errors.append("study.tune.trials is missing: the trial budget of every arm")
    trials = _int("study.tune.trials", value.get("trials", 1), 1, errors)
    batch = _int("study.tune.batch", value.get("batch", 8), 1, errors)
    seed = _int("study.tune.seed", value.get("seed", 0), 0, errors)
    sampler = value.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        errors.append(
            f"study.tune.sampler = {sampler!r}; one of {', '.join(map(repr, SAMPLERS))}"
        )
    common = _space(value.get("space", {}), "study.tune.space", errors)
    own = value.get("arms", {})
    if not isinstance(own, Mapping):
        errors.append(f"[study.tune.arms] must be a table of arms; got {own!r}")
        own = {}
    spaces: dict[str, tuple[Dimension, ...]] = {}
    for arm in own:
        if arm not in arms:
            errors.append(
                f"study.tune.arms.{arm} is not an arm{did_you_mean(arm, list(arms))}"
                f"; the arms: {', '.join(map(repr, arms))}"
            )
    given = bool(value.get("space")) or bool(own)
    for arm, changes in arms.items():
        space = {**common, **_space(own.get(arm, {}), f"study.tune.arms.{arm}", errors)}
        if not space and (not given or len(errors) == before):
            errors.append(
                f"[study.tune] gives arm {arm!r} no search space: add keys to "
                f"[study.tune.space] (every arm) or [study.tune.arms.{arm}]"
            )
        for key in space:
            if key in axes:
                errors.append(
                    f"study.tune searches {key!r}, which is also an axis; remove one"
                )
            elif key in changes:
                errors.append(
                    f"arm {arm!r} sets {key!r}, which study.tune searches; remove "
                    f"it from the arm, or give the arm its own space in "
                    f"[study.tune.arms.{arm}]"
                )
        spaces[arm] = tuple(space.values())
    if len(errors) > before:
        return None
    return Tune(seeds, trials, batch, str(sampler), seed, spaces)


def parse_tuned(
    value: Any, tune: Tune | None, arms: Mapping[str, Any], errors: list[str]
) -> dict[str, dict[str, Any]]:
    """`study.tuned`, the settings `eqxevo study tune` chose, `{arm: {key:
    value}}` (written by `study run` from OUT/tune/chosen.json)."""
    if value is None:
        return {}
    if tune is None:
        errors.append("study.tuned is set but the study has no [study.tune]")
        return {}
    if not isinstance(value, Mapping) or set(value) != set(arms):
        errors.append(
            f"study.tuned must give every arm's settings ({', '.join(arms)}); "
            f"got {value!r}"
        )
        return {}
    out = {}
    for arm, settings in value.items():
        keys = [d.key for d in tune.spaces[arm]]
        if not isinstance(settings, Mapping) or sorted(settings) != sorted(keys):
            errors.append(
                f"study.tuned.{arm} = {settings!r}; it must set exactly "
                f"{', '.join(keys)}"
            )
            continue
        out[arm] = dict(settings)
    return out


__all__ = ["SAMPLERS", "TUNE_KEYS", "Dimension", "Tune", "parse_tune", "parse_tuned"]
