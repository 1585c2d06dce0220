"""`eqxevo bench --only determinism`: the same key twice, per network layout.

On a GPU the segment layout's scatter-add runs on XLA:GPU's atomics, and the
same key gave other bits on an NVIDIA H100, which is why `layout="auto"` picks
dense or gather there (docs/reproducibility.md). For each milestone and layout
this evaluates the population `CALLS` times with one key (identical?), once in
two blocks (`batch_size=P/2`, identical to the whole?), and times the steady
calls, so a machine's layouts are compared on bits and speed in one table.
"""

import time
from typing import Any

import jax
import jax.random as jr
import numpy as np

from eqxevo._src.evaluate import evaluate

from ..config import from_dict, to_dict
from ..experiment.build import build
from .milestones import MILESTONES, milestone_experiment, sample_population

LAYOUTS: tuple[str, ...] = ("segment", "gather", "dense")
"""The XLA layouts compared (the Pallas kernel has its own part)."""

CALLS = 4
"""Evaluations with one key per point; the first compiles and is not timed."""

DETERMINISM_COLUMNS = [
    "milestone",
    "layout",
    "auto",
    "population_size",
    "lifetime",
    "same_key_identical",
    "two_blocks_identical",
    "agent_steps_per_s",
    "device",
]
"""The columns of the determinism table (`layout_determinism`'s records)."""


def _built(name: str, layout: str, quick: bool) -> Any:
    """Milestone `name` built with `layout` (`"auto"`: this machine's pick)."""
    table = to_dict(milestone_experiment(name, quick=quick))
    table["net"].setdefault("options", {})["layout"] = layout
    return build(from_dict(table))


def _point(name: str, layout: str, auto: str, built: Any) -> dict[str, Any]:
    population = sample_population(built)
    size = built.strategy.population_size
    lifetime = built.experiment.run.lifetime

    def run(**kwargs: Any) -> np.ndarray:
        out = evaluate(jr.key(2), built.fitness, population, **kwargs)
        return np.asarray(jax.block_until_ready(out[0]))

    outs, seconds = [], []
    for _ in range(CALLS):
        start = time.perf_counter()
        outs.append(run())
        seconds.append(time.perf_counter() - start)
    halves = run(batch_size=max(1, size // 2))
    return {
        "milestone": name,
        "layout": layout,
        "auto": auto == layout,
        "population_size": size,
        "lifetime": lifetime,
        # bit for bit, NaNs equal
        "same_key_identical": all(
            np.array_equal(outs[0], o, equal_nan=True) for o in outs[1:]
        ),
        "two_blocks_identical": bool(np.array_equal(outs[0], halves, equal_nan=True)),
        "agent_steps_per_s": size * lifetime / min(seconds[1:]),
        "device": jax.devices()[0].device_kind,
    }


def layout_determinism(
    *,
    quick: bool = False,
    milestones: tuple[str, ...] = tuple(MILESTONES),
    layouts: tuple[str, ...] = LAYOUTS,
) -> list[dict[str, Any]]:
    """One record per milestone and layout (columns: `DETERMINISM_COLUMNS`)."""
    records = []
    for name in milestones:
        # built once with "auto": its layout's point reuses it
        picked = _built(name, "auto", quick)
        auto = picked.genome.layout.name
        for layout in layouts:
            built = picked if layout == auto else _built(name, layout, quick)
            records.append(_point(name, layout, auto, built))
    return records


__all__ = ["DETERMINISM_COLUMNS", "LAYOUTS", "layout_determinism"]
