"""Unrolled threefry (`eqxevo.fast_cpu_prng`) against JAX's default CPU lowering,
each side in its own child process."""

from typing import Any

from eqxevo._src.bits import fast_cpu_prng

from ..config import from_dict, to_dict
from ..experiment.build import build
from . import spawn
from .milestones import milestone_experiment, time_evolve

# the columns of the threefry table (`eqxevo bench --only threefry`, report.md)
THREEFRY_COLUMNS = [
    "milestone",
    "lowering",
    "population_size",
    "lifetime",
    "compile_s",
    "agent_steps_per_s",
    "speedup",
    "compile_ratio",
    "same_bits",
]


def threefry_side(
    name: str,
    unrolled: bool,
    *,
    quick: bool = False,
    population_size: int | None = None,
    lifetime: int | None = None,
    num_generations: int = 2,
    repeats: int = 3,
) -> dict[str, Any]:
    """One side of the comparison, run in a child process: time `evolve` on
    milestone `name` (at `population_size`/`lifetime` if given), the unrolled
    lowering registered first if `unrolled`."""
    if unrolled and not fast_cpu_prng():
        raise RuntimeError("fast_cpu_prng() could not register its lowering")

    table = to_dict(milestone_experiment(name, quick=quick))
    if population_size is not None:
        table["strategy"]["population_size"] = population_size
    if lifetime is not None:
        table["run"]["lifetime"] = lifetime
    built = build(from_dict(table))
    timing = time_evolve(
        built, num_generations=num_generations, repeats=repeats, best_bits=True
    )
    p = built.strategy.population_size
    t = built.experiment.run.lifetime
    return {
        "milestone": name,
        "lowering": "unrolled" if unrolled else "default (rolled loop)",
        "population_size": p,
        "lifetime": t,
        "compile_s": timing["compile_s"],
        "generation_s": timing["generation_s"],
        "agent_steps_per_s": p * t / timing["generation_s"],
        "best_fitness_hex": timing["best_fitness_hex"],
    }


def threefry_lowering(
    name: str,
    *,
    quick: bool = False,
    population_size: int | None = None,
    lifetime: int | None = None,
    repeats: int = 3,
) -> list[dict[str, Any]]:
    """Both sides of milestone `name`, each in a child; the unrolled row carries
    `speedup` (its agent-steps/s over the default's), `compile_ratio` and
    `same_bits` (the two runs' best fitness equal bit for bit)."""
    rows = [
        spawn.call(
            "eqxevo._app.bench.prng:threefry_side",
            {
                "name": name,
                "unrolled": unrolled,
                "quick": quick,
                "population_size": population_size,
                "lifetime": lifetime,
                "repeats": repeats,
            },
        ).result
        for unrolled in (False, True)
    ]
    default, unrolled = rows
    unrolled["speedup"] = unrolled["agent_steps_per_s"] / default["agent_steps_per_s"]
    unrolled["compile_ratio"] = unrolled["compile_s"] / max(default["compile_s"], 1e-9)
    unrolled["same_bits"] = unrolled["best_fitness_hex"] == default["best_fitness_hex"]
    return rows


__all__ = ["THREEFRY_COLUMNS", "threefry_lowering", "threefry_side"]
