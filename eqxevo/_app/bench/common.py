"""What every benchmark shares: where it ran, how it is timed, how it is written."""

import csv
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax


def machine_info() -> dict[str, Any]:
    """Where a measurement ran: platform, devices, CPU count, versions, load."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
    return {
        "backend": jax.default_backend(),
        "device": str(jax.devices()[0]),
        "device_kind": jax.devices()[0].device_kind,
        "num_devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "load_average": [round(x, 2) for x in load],
    }


def time_call(fn: Callable[[], Any], repeats: int) -> tuple[float, float, float]:
    """Run `fn` once to compile, then `repeats` times.

    Returns:
        `(compile_s, median_wall_s, median_cpu_s)`. `compile_s` is the first
        call's wall time (compilation plus one run). CPU time is this process's
        (all its threads); on a shared machine it is steadier than wall time.
    """
    start = time.perf_counter()
    # JAX dispatches asynchronously: a call is timed until its outputs exist
    jax.block_until_ready(fn())
    compile_s = time.perf_counter() - start
    walls, cpus = [], []
    for _ in range(repeats):
        wall0, cpu0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn())
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return compile_s, statistics.median(walls), statistics.median(cpus)


def evosax_loop(
    strategy: Any, problem: Any, key: Any, solution: Any
) -> Callable[[int], Any]:
    """`generations(count)`: `count` generations of an evosax strategy on an
    evosax problem (jitted ask and tell, the problem's own `eval`), as evosax's
    examples run them; each call carries on from the last."""
    params = strategy.default_params
    state = strategy.init(key, solution, params)
    problem_state = problem.init(key)
    ask, tell = jax.jit(strategy.ask), jax.jit(strategy.tell)

    def generations(count: int) -> Any:
        nonlocal state, problem_state
        k = key
        for _ in range(count):
            k, ask_key, eval_key, tell_key = jax.random.split(k, 4)
            population, state = ask(ask_key, state, params)
            fitness, problem_state, _ = problem.eval(
                eval_key, population, problem_state
            )
            state, _ = tell(tell_key, population, -fitness, state, params)
        return state

    return generations


SIDE_COLUMNS = [
    "population_size",
    "lifetime",
    "agent_steps_per_s",
    "compile_s",
    "eqxevo_over_side",
    "skipped",
]
"""The columns every comparison of sides (`compare_sides`) shares, after the ones
naming its case."""


def compare_sides(
    sides: Sequence[tuple[str, Callable[[], dict[str, Any]]]],
) -> list[dict[str, Any]]:
    """Each side's record; a side that cannot be imported or fails is a record
    with `skipped` saying why, and the others still run."""
    rows: list[dict[str, Any]] = []
    for side, measure in sides:
        try:
            row = measure()
        except ImportError as err:
            row = {"side": side, "skipped": f"cannot import: {err}"}
        except Exception as err:  # report it, time the others
            row = {"side": side, "skipped": f"failed: {type(err).__name__}: {err}"}
        rows.append(row)
    return rows


def steady_times(
    calls: dict[str, Callable[[int], Any]], num_generations: int, repeats: int
) -> dict[str, dict[str, float]]:
    """Steady per-generation time of each of `calls` (`call(n)` runs n
    generations), timed in alternation so that a shared machine's load falls
    on all of them alike.

    Each call runs once at `num_generations` and once at twice that to
    compile; then `repeats` rounds time every call at both lengths in turn. A
    generation's time is the difference of the two lengths' medians over
    `num_generations`, so a call's fixed cost (`call_overhead_s`) is apart.

    Returns:
        Per name: `compile_s`, `generation_s`, `generation_cpu_s` (this
        process's CPU time, all threads) and `call_overhead_s`.
    """
    lengths = (num_generations, 2 * num_generations)
    first = {}
    for name, call in calls.items():
        for n in lengths:
            start = time.perf_counter()
            jax.block_until_ready(call(n))
            first[name, n] = time.perf_counter() - start
    walls: dict[Any, list[float]] = {k: [] for k in first}
    cpus: dict[Any, list[float]] = {k: [] for k in first}
    for _ in range(repeats):
        for name, call in calls.items():
            for n in lengths:
                wall0, cpu0 = time.perf_counter(), time.process_time()
                jax.block_until_ready(call(n))
                walls[name, n].append(time.perf_counter() - wall0)
                cpus[name, n].append(time.process_time() - cpu0)
    out = {}
    for name in calls:
        one, two = (statistics.median(walls[name, n]) for n in lengths)
        cpu_one, cpu_two = (statistics.median(cpus[name, n]) for n in lengths)
        # on a busy machine the difference can come out at or below 0: then
        # the longer call's share
        generation = (two - one) / num_generations
        if generation <= 0:
            generation = two / lengths[1]
        generation_cpu = (cpu_two - cpu_one) / num_generations
        if generation_cpu <= 0:
            generation_cpu = cpu_two / lengths[1]
        out[name] = {
            # on a busy machine a steady call can outlast the first one
            "compile_s": max(first[name, num_generations] - one, 0.0),
            "generation_s": generation,
            "generation_cpu_s": generation_cpu,
            "call_overhead_s": max(one - num_generations * generation, 0.0),
        }
    return out


def peak_memory() -> dict[str, Any]:
    """Peak memory so far: the device's allocator peak where it reports one
    (GPU/TPU), else this process's peak resident set size (CPU)."""
    stats = jax.devices()[0].memory_stats() or {}
    if "peak_bytes_in_use" in stats:
        return {"peak_bytes": int(stats["peak_bytes_in_use"]), "memory": "device"}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return {"peak_bytes": int(rss * scale), "memory": "process peak RSS"}


def program_bytes(fn: Callable[..., Any], *args: Any) -> dict[str, int] | None:
    """Memory XLA plans for `jax.jit(fn)(*args)`: arguments, outputs, temporaries.

    Independent of what ran before in the process, so it shows how memory grows
    with P, T or E. None where the backend gives no analysis.
    """
    try:
        analysis = jax.jit(fn).lower(*args).compile().memory_analysis()
    except Exception:  # a backend without the analysis raises rather than says so
        return None
    if analysis is None:
        return None
    return {
        "argument_bytes": int(analysis.argument_size_in_bytes),
        "output_bytes": int(analysis.output_size_in_bytes),
        "temp_bytes": int(analysis.temp_size_in_bytes),
    }


def add_record(
    records: list[dict[str, Any]],
    record: dict[str, Any],
    log: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Append `record` to `records` and hand it to `log` (if any) as it is made."""
    records.append(record)
    if log is not None:
        log(record)


def fmt(value: Any) -> str:
    """A table cell: 3 significant digits for floats, empty for None."""
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table of `rows` (missing cells empty)."""
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
        for i, c in enumerate(columns)
    ]

    def line(values: Sequence[str]) -> str:
        padded = (v.rjust(w) for v, w in zip(values, widths, strict=True))
        return "| " + " | ".join(padded) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(columns), sep, *(line(row) for row in cells)])


def write_records(
    out: Path, name: str, meta: dict[str, Any], rows: Sequence[dict[str, Any]]
) -> None:
    """`out/name.json` (machine info + records) and `out/name.csv`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(
        json.dumps({"machine": meta, "records": list(rows)}, indent=1, default=str)
    )
    # records may differ (a skipped point has no timings): the CSV's columns are
    # the union of their keys, in the order first seen
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with (out / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        # a list or dict goes into one cell, as JSON
        writer.writerows(
            {
                k: json.dumps(v) if isinstance(v, list | dict) else v
                for k, v in r.items()
            }
            for r in rows
        )


__all__ = [
    "SIDE_COLUMNS",
    "add_record",
    "compare_sides",
    "evosax_loop",
    "fmt",
    "machine_info",
    "peak_memory",
    "program_bytes",
    "steady_times",
    "table",
    "time_call",
    "write_records",
]
