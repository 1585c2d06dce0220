"""How cost grows: curves against P, T, fan-in, N, device count and block size."""

import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo._src._types import PRNGKey
from eqxevo._src.evaluate import evaluate
from eqxevo._src.strategy.strategy import Strategy

from ..config import from_dict
from ..experiment.build import build
from . import spawn
from .common import add_record, program_bytes, time_call
from .milestones import MILESTONES, evaluation_bytes, time_evolve

Log = Callable[[dict[str, Any]], None] | None

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

DEVICE_COLUMNS = ["devices", "agent_steps_per_s", "speedup"]
"""The columns of the devices table (`device_scaling`'s `median_by_devices`)."""

BATCHING_COLUMNS = ["batch_size", "temp_bytes", "argument_bytes", "wall_s"]
"""The columns of the micro-batching table (`batch_memory`'s records)."""


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
    *, quick: bool = False, repeats: int = 2, log: Log = None
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
            add_record(records, record, log)
    return records


def plot_scaling(records: list[dict[str, Any]], path: Path) -> Path:
    """A 2 x k grid: agent-steps/s (top) and planned memory (bottom) per size.

    Drawn on matplotlib's Agg canvas: no pyplot, no change of backend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    varied_names = list(dict.fromkeys(r["varied"] for r in records))
    fig = Figure(figsize=(4 * len(varied_names), 6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, len(varied_names), squeeze=False)
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
            # the T curve is for compile time too (it must not grow with T)
            ax = axes[1, j].twinx()
            ax.plot(xs, [r["compile_s"] for r in rows], "^--", color="tab:green")
            ax.set_ylabel("compile s", color="tab:green")
        for ax in axes[:, j]:
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
    fig.suptitle("L0 scaling (one device)")
    fig.savefig(path, dpi=110)
    return path


# -- devices ---------------------------------------------------------------------------


def device_scaling(
    *,
    quick: bool = False,
    devices: Sequence[int] | None = None,
    rounds: int = 1,
    repeats: int = 3,
    log: Log = None,
) -> dict[str, Any]:
    """L0 agent-steps/s on each device count (default 1 and one per core).

    Returns `runs` (one record per round and count, from its child process) and
    `median_by_devices` with each count's median rate and its speed-up over 1.
    """
    counts = list(devices) if devices else sorted({1, os.cpu_count() or 1})
    runs = []
    for round_ in range(rounds):
        for n in counts:
            child = spawn.call(
                "eqxevo._app.bench.milestones:time_milestone",
                {
                    "name": "L0",
                    "quick": quick,
                    "num_generations": 2 if quick else 5,
                    "repeats": repeats,
                    "sharded": n > 1,
                },
                num_devices=n,
            )
            record = {"round": round_, "devices": n, **child.result}
            add_record(runs, record, log)
    rates = {
        n: [r["agent_steps_per_s"] for r in runs if r["devices"] == n] for n in counts
    }
    median = {n: statistics.median(v) for n, v in rates.items()}
    base = median.get(1)
    summary = [
        {
            "devices": n,
            "agent_steps_per_s": rate,
            "speedup": rate / base if base else None,
        }
        for n, rate in median.items()
    ]
    return {"runs": runs, "median_by_devices": summary}


# -- micro-batching --------------------------------------------------------------------


class TracedGenome(eqx.Module):
    """A rate network whose lifetime carries a dense N x N trace (memory workload)."""

    w: jax.Array
    w_in: jax.Array

    def __init__(self, num_neurons: int, *, key: PRNGKey):
        w_key, in_key = jr.split(key)
        self.w = jr.normal(w_key, (num_neurons, num_neurons)) / num_neurons
        self.w_in = jr.normal(in_key, (num_neurons, 2))


def traced_lifetime(genome: TracedGenome, key: PRNGKey, num_steps: int = 20) -> Any:
    """A short lifetime whose state is an eligibility trace of N x N floats."""
    n = genome.w.shape[0]

    def step(carry: Any, t: jax.Array) -> tuple[Any, None]:
        h, trace = carry
        obs = jr.normal(jr.fold_in(key, t), (2,))
        h = jnp.tanh((genome.w + 0.01 * trace) @ h + genome.w_in @ obs)
        return (h, 0.9 * trace + jnp.outer(h, h)), None

    start = (jnp.ones(n) / n, jnp.zeros((n, n)))
    (h, trace), _ = jax.lax.scan(step, start, jnp.arange(num_steps))
    return jnp.sum(h) + 1e-3 * jnp.sum(trace)


def batch_memory(
    *,
    quick: bool = False,
    batch_sizes: Sequence[int | None] = (None, 128, 64, 16),
    repeats: int = 3,
    log: Log = None,
) -> list[dict[str, Any]]:
    """Planned memory and time of one population's evaluation per `batch_size`.

    Batch sizes are multiples of `bits.BLOCK_ALIGN` (16): smaller ones are
    rounded up to it, and would measure the same program.
    """
    population_size, neurons = (64, 16) if quick else (256, 64)
    genome = TracedGenome(neurons, key=jr.key(0))
    strategy = Strategy("snes", genome, population_size)
    population, _ = strategy.ask(jr.key(1), strategy.init(jr.key(0)))
    records = []
    for batch_size in batch_sizes:
        if batch_size is not None and batch_size >= population_size:
            continue

        def run(pop: Any, key: PRNGKey, batch_size: int | None = batch_size) -> Any:
            return evaluate(key, traced_lifetime, pop, batch_size=batch_size)[0]

        compiled = jax.jit(run)
        _, wall, _ = time_call(
            lambda compiled=compiled: compiled(population, jr.key(2)), repeats
        )
        record = {
            "population_size": population_size,
            "num_neurons": neurons,
            "trace_bytes_per_genome": neurons * neurons * 4,
            "batch_size": batch_size,
            **(program_bytes(run, population, jr.key(2)) or {}),
            "wall_s": wall,
        }
        add_record(records, record, log)
    return records


__all__ = [
    "BATCHING_COLUMNS",
    "DEVICE_COLUMNS",
    "TracedGenome",
    "batch_memory",
    "device_scaling",
    "l0_table",
    "plot_scaling",
    "scaling_point",
    "scaling_sweep",
    "traced_lifetime",
]
