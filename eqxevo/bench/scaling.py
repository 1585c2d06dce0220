"""Scaling curves on the L0 workload: against P, T, E (fan-in) and N.

Every point is the L0 experiment with one size changed, timed through `evolve`
(`milestones.time_evolve`): agent-steps/s, compile time, and XLA's planned
memory for one generation's evaluation (arguments + temporaries; flat in T when
no per-step output is stacked). The persistent compilation cache is measured in
child processes (a cold start, then a warm one on the same cache directory).
"""

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from ..config import from_dict
from ..experiment import build
from .milestones import MILESTONES, evaluation_bytes, time_evolve

FULL_GRID: dict[str, tuple[int, ...]] = {
    "population_size": (64, 128, 256, 512, 1024),
    "lifetime": (1000, 5000, 20000),
    "fan_in": (4, 8, 16, 32),
    "num_neurons": (32, 64, 256, 1024),
}
QUICK_GRID: dict[str, tuple[int, ...]] = {"lifetime": (50, 400)}
# the other sizes while one varies
FULL_BASE = {"population_size": 256, "lifetime": 1000, "fan_in": 8, "num_neurons": 64}
QUICK_BASE = {"population_size": 16, "lifetime": 50, "fan_in": 4, "num_neurons": 32}
# long lifetimes are timed on a smaller population (compile time and memory per
# genome are what the T curve is for)
FULL_T_POPULATION = 64


def l0_table(
    population_size: int, lifetime: int, fan_in: int, num_neurons: int
) -> dict[str, Any]:
    """The L0 experiment table with these sizes."""
    table = {k: dict(v) for k, v in MILESTONES["L0"].items()}
    table["strategy"]["population_size"] = population_size
    table["run"]["lifetime"] = lifetime
    table["net"]["options"] = {"num_neurons": num_neurons, "fan_in": fan_in}
    return table


def scaling_point(sizes: dict[str, int], *, repeats: int) -> dict[str, Any]:
    # every point compiles from scratch (an earlier point may share its program)
    jax.clear_caches()
    built = build(from_dict(l0_table(**sizes)))
    timing = time_evolve(built, num_generations=2, repeats=repeats)
    memory = evaluation_bytes(built) or {}
    p, t = sizes["population_size"], sizes["lifetime"]
    return {
        **sizes,
        "num_edges": sizes["num_neurons"] * sizes["fan_in"],
        "layout": getattr(built.genome.layout, "name", None),
        **timing,
        "agent_steps_per_s": p * t / timing["generation_s"],
        **memory,
    }


def scaling_sweep(
    *,
    quick: bool = False,
    repeats: int = 2,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """One record per (varied size, value)."""
    grid, base = (QUICK_GRID, QUICK_BASE) if quick else (FULL_GRID, FULL_BASE)
    records = []
    for varied, values in grid.items():
        for value in values:
            sizes = {**base, varied: value}
            if varied == "lifetime" and not quick:
                sizes["population_size"] = FULL_T_POPULATION
            record = {"varied": varied, **scaling_point(sizes, repeats=repeats)}
            records.append(record)
            if log is not None:
                log(record)
    return records


def plot_scaling(records: list[dict[str, Any]], path: Path) -> Path:
    """A 2 x 4 grid: agent-steps/s (top) and planned memory (bottom) per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    varied_names = list(dict.fromkeys(r["varied"] for r in records))
    fig, axes = plt.subplots(
        2, len(varied_names), figsize=(4 * len(varied_names), 6), squeeze=False
    )
    for j, varied in enumerate(varied_names):
        rows = [r for r in records if r["varied"] == varied]
        xs = [r[varied] for r in rows]
        axes[0, j].plot(xs, [r["agent_steps_per_s"] for r in rows], "o-")
        axes[0, j].set_title(f"against {varied}")
        axes[0, j].set_ylabel("agent-steps/s")
        memory = [
            (r.get("argument_bytes", 0) + r.get("temp_bytes", 0)) / 2**20 for r in rows
        ]
        axes[1, j].plot(xs, memory, "s-", color="tab:red")
        axes[1, j].set_ylabel("planned memory (MiB)")
        axes[1, j].set_xlabel(varied)
        if varied == "lifetime":
            ax = axes[1, j].twinx()
            ax.plot(xs, [r["compile_s"] for r in rows], "^--", color="tab:green")
            ax.set_ylabel("compile s", color="tab:green")
        for ax in axes[:, j]:
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
    fig.suptitle("L0 scaling (one device)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- persistent compilation cache: cold vs warm start, in child processes ----------


_CACHE_WORKER = """
import json, sys, time
start = time.perf_counter()
import jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
from eqxevo.config import from_dict
from eqxevo.evolve import evolve
from eqxevo.experiment import build
from eqxevo.bench.scaling import l0_table
built = build(from_dict(l0_table(**json.loads(sys.argv[2]))))
imported = time.perf_counter() - start
t0 = time.perf_counter()
r = evolve(built.key, built.strategy, built.fitness, num_generations=1, chunk_size=1)
jax.block_until_ready(r.best_fitness)
first = time.perf_counter() - t0
t0 = time.perf_counter()
r = evolve(built.key, built.strategy, built.fitness, num_generations=1, chunk_size=1)
jax.block_until_ready(r.best_fitness)
steady = time.perf_counter() - t0
print(json.dumps({"import_s": imported, "first_generation_s": first,
                  "steady_generation_s": steady}))
"""


def compilation_cache(*, quick: bool = False) -> dict[str, Any]:
    """A cold start and a warm start (same cache directory) of one L0 generation.

    `compile_s` = first generation - steady generation, in each child process.
    """
    sizes = QUICK_BASE if quick else FULL_BASE
    runs = {}
    with tempfile.TemporaryDirectory(prefix="eqxevo-cache-") as cache:
        for name in ("cold", "warm"):
            start = time.perf_counter()
            out = subprocess.run(
                [sys.executable, "-c", _CACHE_WORKER, cache, json.dumps(sizes)],
                capture_output=True,
                text=True,
                check=True,
            )
            record = json.loads(out.stdout.strip().splitlines()[-1])
            record["process_s"] = time.perf_counter() - start
            record["compile_s"] = max(
                record["first_generation_s"] - record["steady_generation_s"], 0.0
            )
            runs[name] = record
    return {
        **sizes,
        "cold": runs["cold"],
        "warm": runs["warm"],
        "warm_over_cold_compile": runs["warm"]["compile_s"]
        / max(runs["cold"]["compile_s"], 1e-9),
        "warm_over_cold_start": (
            runs["warm"]["import_s"] + runs["warm"]["first_generation_s"]
        )
        / (runs["cold"]["import_s"] + runs["cold"]["first_generation_s"]),
    }


__all__ = [
    "compilation_cache",
    "l0_table",
    "plot_scaling",
    "scaling_point",
    "scaling_sweep",
]
