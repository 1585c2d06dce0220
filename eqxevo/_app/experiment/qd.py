"""A config's `[qd]` table built into `MapElites`: the archive, the emitters and
the population split among them (docs/qd.md, "Runs from a config")."""

import dataclasses
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax.random as jr

from eqxevo._src._types import Genome
from eqxevo._src.presets import PresetError, kwarg_value
from eqxevo._src.qd.archive import Archive
from eqxevo._src.qd.emitters import AbstractEmitter, ESEmitter, IsoLineEmitter
from eqxevo._src.qd.map_elites import MapElites

from ..config import ConfigError, Experiment, qd_run

KINDS = {"iso_line": IsoLineEmitter, "es": ESEmitter}
"""`[qd.emitters.NAME]`'s `kind`: the emitter class it builds."""

OWN_OPTIONS = frozenset(inspect.signature(ESEmitter).parameters) - {"kwargs"}
"""`ESEmitter`'s own arguments; its other keys are the strategy's constructor
arguments, read as `[strategy.kwargs]` are (optimizer tables, ...)."""


def make_archive(experiment: Experiment) -> Archive:
    """The `[qd]` archive: a grid of `cells`, or a CVT of `cells[0]` centroids from
    the key of `cvt_seed`."""
    qd = experiment.qd
    if len(qd.lower) != len(qd.upper) or len(qd.lower) != len(qd.descriptor):
        raise ConfigError(
            f"qd.lower, qd.upper and qd.descriptor need one entry per descriptor "
            f"dimension; they have {len(qd.lower)}, {len(qd.upper)} and "
            f"{len(qd.descriptor)}"
        )
    common = {"out_of_bounds": qd.out_of_bounds, "qd_offset": qd.qd_offset}
    try:
        if qd.archive == "grid":
            if len(qd.cells) != len(qd.descriptor):
                raise ConfigError(
                    f"qd.cells = {list(qd.cells)}: a grid needs one count per "
                    f"descriptor dimension ({len(qd.descriptor)})"
                )
            return Archive.grid(qd.cells, qd.lower, qd.upper, **common)
        if len(qd.cells) != 1:
            raise ConfigError(
                f"qd.cells = {list(qd.cells)}: a cvt archive takes one number, its "
                "cells"
            )
        key = jr.key(qd.cvt_seed)
        return Archive.cvt(qd.cells[0], qd.lower, qd.upper, key=key, **common)
    except ValueError as err:
        raise ConfigError(f"qd: {err}") from err


def batch_sizes(experiment: Experiment) -> dict[str, int]:
    """Each emitter's batch: its `batch_size`, or an equal share of what the others
    leave of `strategy.population_size`. Raises `ConfigError` when they do not
    add up to it."""
    size = experiment.strategy.population_size
    tables = emitter_tables(experiment)
    given = {n: t["batch_size"] for n, t in tables.items() if "batch_size" in t}
    for name, value in given.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(
                f"qd.emitters.{name}.batch_size must be an int >= 1; got {value!r}"
            )
    rest = [n for n in tables if n not in given]
    left = size - sum(given.values())
    if (rest and (left < len(rest) or left % len(rest))) or (not rest and left):
        raise ConfigError(
            f"the emitters' batches must add up to strategy.population_size "
            f"({size}); batch_size gives {sum(given.values())}"
            + (
                f" and {len(rest)} emitter(s) without one cannot share the {left} "
                "left equally"
                if rest
                else ""
            )
        )
    return {n: given.get(n, left // len(rest) if rest else 0) for n in tables}


def emitter_tables(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """`[qd.emitters]` as tables, or one iso_line emitter when there are none."""
    tables = dict(experiment.qd.emitters) or {"iso_line": {"kind": "iso_line"}}
    for name, table in tables.items():
        if not isinstance(table, Mapping):
            raise ConfigError(f"qd.emitters.{name} must be a table; got {table!r}")
        kind = table.get("kind")
        if kind not in KINDS:
            raise ConfigError(
                f"qd.emitters.{name}.kind = {kind!r}; allowed: "
                + ", ".join(f'"{k}"' for k in KINDS)
            )
    return {n: dict(t) for n, t in tables.items()}


def _emitter(
    experiment: Experiment, name: str, table: dict[str, Any], batch: int
) -> AbstractEmitter:
    kind = table.pop("kind")
    table.pop("batch_size", None)
    key = f"qd.emitters.{name}"
    if kind == "es":
        table.setdefault("algorithm", experiment.strategy.name)
        for option, value in list(table.items()):
            if option not in OWN_OPTIONS:  # the strategy's constructor's
                try:
                    table[option] = kwarg_value(Path(key), option, value)
                except PresetError as err:
                    raise ConfigError(str(err).split(": ", 1)[-1]) from err
    try:
        return KINDS[kind](batch_size=batch, **table)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{key}: {err}") from err


def make_map_elites(experiment: Experiment, genome: Genome) -> MapElites:
    """`MapElites` over `genome`: the `[qd]` archive and emitters, the first
    generation `strategy.init_scale` around the genome.

    Raises:
        ConfigError: `[strategy]` options that belong to an emitter, or `[qd]`
            values the archive or emitters reject; the message names the key.
    """
    spec = experiment.strategy
    for option in ("params", "kwargs", "leaf_scales"):
        if getattr(spec, option):
            raise ConfigError(
                f"strategy.{option} does not apply to a MAP-Elites run (qd.archive = "
                f'"{experiment.qd.archive}"): give an ES emitter its own, in '
                "[qd.emitters.NAME]"
            )
    archive = make_archive(experiment)
    sizes = batch_sizes(experiment)
    emitters = [
        _emitter(experiment, name, table, sizes[name])
        for name, table in emitter_tables(experiment).items()
    ]
    try:
        return MapElites(
            genome,
            archive,
            emitters,
            init_scale=spec.init_scale,
            descriptor=experiment.qd.descriptor,
        )
    except ValueError as err:
        raise ConfigError(f"qd: {err}") from err


def effective_qd(experiment: Experiment) -> Experiment:
    """`[qd]` with every emitter's kind and batch written out (what config.toml
    holds); an ES emitter's algorithm too."""
    if not qd_run(experiment):
        return experiment
    sizes = batch_sizes(experiment)
    emitters = {}
    for name, table in emitter_tables(experiment).items():
        table["batch_size"] = sizes[name]
        if table["kind"] == "es":
            table.setdefault("algorithm", experiment.strategy.name)
        emitters[name] = table
    qd = dataclasses.replace(experiment.qd, emitters=emitters)
    return dataclasses.replace(experiment, qd=qd)


__all__ = [
    "KINDS",
    "OWN_OPTIONS",
    "batch_sizes",
    "effective_qd",
    "emitter_tables",
    "make_archive",
    "make_map_elites",
]
