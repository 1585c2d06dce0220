"""The parts of `eqxevo bench`: each measures, writes its files and prints its table.

See docs/performance.md, "How the harness measures".
"""

import dataclasses
import functools
import json
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eqxevo._src._checks import one_of

PARTS: dict[str, str] = {
    "milestones": "L0, L2, L4 through evolve, against hand-written baselines",
    "breakdown": "where an L0 lifetime step's time goes",
    "kernels": "kernels per lifetime step, read from the optimised HLO",
    "threefry": "L0 with eqxevo.fast_cpu_prng() against JAX's default lowering",
    "memory": "L4 planned bytes per genome, per trace dtype",
    "cartpole": "CartPole: eqxevo vs evosax's GymnaxProblem vs EvoJAX",
    "scaling": "L0 against P, T, fan-in and N (scaling.png)",
    "cache": "the persistent compilation cache, cold start vs warm",
    "devices": "L0 on 1 device vs one per core, in rounds",
    "fidelity": "multi-fidelity vs full evaluation (long)",
    "batching": "micro-batching: planned memory per block size",
    "layouts": "network layout sweep (long)",
    "traces": "16-bit eligibility-trace drift against float32",
    "pallas": "fused Pallas kernel vs XLA layouts (needs a GPU)",
    "bits": "same bits across batch sizes and device counts",
    "determinism": "the same key twice and two blocks, per layout, with its speed",
    "gymnax": "4 gymnax tasks vs evosax, held-out return (1-2 h)",
    "brax": "Brax Ant: eqxevo vs evosax's BraxProblem, and vs a raw Brax loop",
    "qd": "planar arm: MAP-Elites and CMA-ME vs QDax",
}
"""Every part, in the order a run takes them, with its line of `--help`."""

# "pallas" costs nothing without a GPU (one "not measured" row per point)
DEFAULT_PARTS = [
    "milestones",
    "breakdown",
    "kernels",
    "threefry",
    "memory",
    "cartpole",
    "scaling",
    "cache",
    "pallas",
]
"""What runs without `--only`."""

QUICK_PARTS = [*DEFAULT_PARTS, "traces", "bits", "determinism", "gymnax", "qd"]
"""What runs with `--quick` and without `--only` (the CI smoke run)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What `eqxevo bench`'s options tell every part.

    Attributes:
        out: the output folder.
        milestone: `"L0"`, `"L2"`, `"L4"` or `"all"` (milestones and kernels).
        quick: CI sizes.
        repeats: timed repeats per figure.
        devices: CPU devices of the child processes that measure sharded figures.
        trace: where to write a `jax.profiler` trace of the first milestone.
    """

    out: Path
    milestone: str = "all"
    quick: bool = False
    repeats: int = 3
    devices: int = 1
    trace: Path | None = None


say = functools.partial(print, flush=True)
"""`print`, flushed: progress shows while a long part runs."""


def _save(
    options: Options,
    meta: dict[str, Any],
    name: str,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str] | None = None,
) -> Any:
    """Write `rows` to `out/name.json` and `.csv`; print them under `columns`."""
    from .common import table, write_records

    write_records(options.out, name, meta, rows)
    if columns is not None:
        say(table(rows, columns))
    return rows


def run_parts(
    options: Options, parts: Sequence[str], meta: dict[str, Any]
) -> dict[str, Any]:
    """Run `parts` (in `PARTS` order); their results by name, plus `failed`.

    A part that raises is reported (traceback on stderr) and listed under
    `failed`; the other parts still run.
    """
    results: dict[str, Any] = {}
    for part in PARTS:
        if part not in parts:
            continue
        try:
            results[part] = run_part(part, options, meta)
        except Exception:  # keep the other parts' figures
            traceback.print_exc()
            results.setdefault("failed", []).append(part)
    return results


def run_part(name: str, options: Options, meta: dict[str, Any]) -> Any:
    """Run part `name`: measure, write its files to `options.out`, print its table.

    Returns what the report reads (records, or a dict of them).
    """
    return _RUNNERS[one_of("part", name, tuple(PARTS))](options, meta)


def _milestones(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .milestones import MILESTONES, run_milestone

    names = list(MILESTONES) if options.milestone == "all" else [options.milestone]
    if options.quick and options.milestone == "all":
        names = ["L0", "L4"]  # L2 costs what L0 does; L4 adds plasticity
    records = []
    for name in names:
        say(f"milestone {name}...")
        record = run_milestone(
            name,
            quick=options.quick,
            repeats=options.repeats,
            sharded_devices=options.devices,
        )
        records.append(record)
        sharded = record.get("sharded", {}).get("agent_steps_per_s")
        say(
            f"  {name}: P={record['population_size']} T={record['lifetime']} "
            f"compile {record['compile_s']:.1f}s  "
            f"generation {record['generation_s']:.3g}s  "
            f"{record['agent_steps_per_s']:.3g} agent-steps/s (1 device)"
            + (f", {sharded:.3g} sharded" if sharded else "")
        )
        for b in record.get("baselines", []):
            say(
                f"    vs {b['baseline']:17s} {b['agent_steps_per_s']:10.3g} "
                f"agent-steps/s -> evolve is {b['evolve_over_baseline']:.3g}x"
                + (
                    f" ({b['evolve_over_baseline_cpu']:.3g}x in CPU time)"
                    if "evolve_over_baseline_cpu" in b
                    else ""
                )
            )
    if options.trace is not None and records:
        _profile(options, names[0])
    _save(options, meta, "milestones", records)
    ratios = [
        {"milestone": r["milestone"], **b}
        for r in records
        for b in r.get("baselines", [])
    ]
    if ratios:
        columns = [
            "milestone",
            "baseline",
            "agent_steps_per_s",
            "evolve_over_baseline",
            "evolve_over_baseline_cpu",
        ]
        _save(options, meta, "ratios", ratios, columns)
    return records


def _profile(options: Options, name: str) -> None:
    """A `jax.profiler` trace of two generations of milestone `name`."""
    import jax

    from eqxevo._src.evolve import evolve

    from ..experiment.build import build
    from .milestones import milestone_experiment

    built = build(milestone_experiment(name, quick=options.quick))

    def call() -> Any:
        return evolve(
            built.key, built.strategy, built.fitness, num_generations=2, chunk_size=2
        ).best_fitness

    jax.block_until_ready(call())  # compile outside the trace
    with jax.profiler.trace(str(options.trace)):
        jax.block_until_ready(call())
    say(
        f"  profiler trace of {name} in {options.trace}/ (open in Perfetto: "
        "ui.perfetto.dev, or `tensorboard --logdir`)"
    )


def _sized(
    options: Options,
    meta: dict[str, Any],
    name: str,
    title: str,
    measure: Callable[..., list[dict[str, Any]]],
    columns: Sequence[str],
) -> list[dict[str, Any]]:
    """A part that is one call `measure(quick=..., repeats=...)` and one table."""
    say(f"{title}...")
    rows = measure(quick=options.quick, repeats=options.repeats)
    return _save(options, meta, name, rows, columns)


def _breakdown(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .milestones import BREAKDOWN_COLUMNS, l0_breakdown

    title = "L0 breakdown"
    return _sized(options, meta, "breakdown", title, l0_breakdown, BREAKDOWN_COLUMNS)


def _kernels(options: Options, meta: dict[str, Any]) -> list[dict]:
    from . import spawn
    from .kernels import KERNEL_COLUMNS, milestone_kernels

    say("kernels per lifetime step...")
    names = ("L0", "L2", "L4") if options.milestone == "all" else (options.milestone,)
    rows = []
    for name in names:
        rows += milestone_kernels(name, quick=options.quick)
        # the unrolled lowering changes its process for good: a child's
        rows += spawn.call(
            "eqxevo._app.bench.kernels:unrolled_threefry_kernels",
            {"name": name, "quick": options.quick},
        ).result
    return _save(options, meta, "kernels", rows, KERNEL_COLUMNS)


def _threefry(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .prng import THREEFRY_COLUMNS, threefry_lowering

    # L0 only: its unrolled / default ratio is the figure of docs/performance.md
    measure = functools.partial(threefry_lowering, "L0")
    title = "L0: unrolled threefry vs JAX's default lowering (two children)"
    return _sized(options, meta, "threefry", title, measure, THREEFRY_COLUMNS)


def _memory(options: Options, meta: dict[str, Any]) -> dict:
    from .kernels import MEMORY_COLUMNS, chunk_donation, memory_per_genome

    say("L4 planned memory per genome...")
    rows = memory_per_genome(quick=options.quick)
    donation = chunk_donation(quick=options.quick)
    _save(options, meta, "memory", rows, MEMORY_COLUMNS)
    say(
        f"  one L4 chunk, P={donation['population_size']}: donating the state "
        f"saves {donation['saved_bytes']} of {donation['plain']['planned_bytes']} "
        "planned bytes"
    )
    return {"per_genome": rows, "donation": donation}


def _cartpole(options: Options, meta: dict[str, Any]) -> list[dict]:
    from . import spawn
    from .cartpole import CARTPOLE_COLUMNS

    say(f"cartpole (a child process, {options.devices} devices)...")
    rows = spawn.call(
        "eqxevo._app.bench.cartpole:cartpole_comparison",
        {"quick": options.quick, "repeats": options.repeats},
        num_devices=options.devices,
    ).result
    return _save(options, meta, "cartpole", rows, CARTPOLE_COLUMNS)


def _scaling(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .scaling import plot_scaling, scaling_sweep

    say("scaling...")

    def log(r: dict[str, Any]) -> None:
        say(
            f"  {r['varied']:15s} P={r['population_size']:5d} T={r['lifetime']:6d} "
            f"N={r['num_neurons']:5d} K={r['fan_in']:3d}  "
            f"{r['agent_steps_per_s']:9.3g} agent-steps/s  "
            f"compile {r['compile_s']:.2f}s  "
            f"temp {r.get('temp_bytes', 0) / 2**20:.2f} MiB"
        )

    # every point compiles afresh: two repeats are enough for a curve
    records = scaling_sweep(
        quick=options.quick, repeats=min(options.repeats, 2), log=log
    )
    _save(options, meta, "scaling", records)
    plot_scaling(records, options.out / "scaling.png")
    return records


def _cache(options: Options, meta: dict[str, Any]) -> dict:
    from .cache import compilation_cache

    say("compilation cache (two child processes)...")
    record = compilation_cache(quick=options.quick)
    (options.out / "cache.json").write_text(
        json.dumps({"machine": meta, "record": record}, indent=1)
    )
    say(
        f"  compile cold {record['cold']['compile_s']:.2f}s, warm "
        f"{record['warm']['compile_s']:.2f}s "
        f"(x{record['warm_over_cold_compile']:.2f})"
    )
    return record


def _devices(options: Options, meta: dict[str, Any]) -> dict:
    from .scaling import DEVICE_COLUMNS, device_scaling

    counts = sorted({1, options.devices})
    say(f"devices {counts} (child processes)...")

    def log(r: dict[str, Any]) -> None:
        say(
            f"  round {r['round']} devices={r['devices']}: "
            f"{r['agent_steps_per_s']:.3g} agent-steps/s (load {r['load_1min']})"
        )

    result = device_scaling(
        quick=options.quick, devices=counts, repeats=options.repeats, log=log
    )
    _save(options, meta, "devices", result["median_by_devices"], DEVICE_COLUMNS)
    return result


def _fidelity(options: Options, meta: dict[str, Any]) -> dict:
    from .fidelity_curves import fidelity_curves, plot_fidelity

    say("multi-fidelity vs full evaluation...")
    result = fidelity_curves(quick=options.quick)
    _save(options, meta, "fidelity", result["rows"])
    plot_fidelity(result, options.out / "fidelity.png")
    per = result["agent_steps_per_generation"]
    say(
        f"  agent-steps per generation: full {per['full']}, multi-fidelity "
        f"{per['multi_fidelity']} ({result['agent_steps_ratio']:.2f}x fewer)"
    )
    for name, values in result["final_test_fitness"].items():
        say(f"  final test fitness, {name}: {[round(v, 4) for v in values]}")
    # the curves' rows are in fidelity.csv; the report reads the summary
    return {k: v for k, v in result.items() if k != "rows"}


def _batching(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .scaling import BATCHING_COLUMNS, batch_memory

    title = "micro-batching"
    return _sized(options, meta, "batching", title, batch_memory, BATCHING_COLUMNS)


def _layouts(options: Options, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .net_sweeps import best_and_auto, layout_sweep

    say("layouts...")

    def log(r: dict[str, Any]) -> None:
        if "skipped" in r:
            say(f"  N={r['num_neurons']} K={r['fan_in']} {r['layout']}: {r['skipped']}")
            return
        say(
            f"  N={r['num_neurons']:5d} K={r['fan_in']:4d} P={r['population_size']:4d} "
            f"T={r['num_steps']:5d} plastic={r['plastic']!s:5} {r['layout']:8s} "
            f"{r['cpu_steps_per_s']:9.3g} steps/cpu-s  state {r['state_bytes']} B"
        )

    records = layout_sweep(
        quick=options.quick, repeats=options.repeats, key=jr.key(0), log=log
    )
    _save(options, meta, "layouts", records)
    columns = [
        "num_neurons",
        "fan_in",
        "plastic",
        "segment_cpu_steps_per_s",
        "gather_cpu_steps_per_s",
        "dense_cpu_steps_per_s",
        "best",
        "auto",
        "auto_over_best",
    ]
    return _save(options, meta, "layouts_summary", best_and_auto(records), columns)


def _traces(options: Options, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .net_sweeps import trace_drift_sweep

    say("trace dtypes...")
    records = trace_drift_sweep(quick=options.quick, key=jr.key(0))
    columns = [
        "num_steps",
        "trace_dtype",
        "rounding",
        "relative_rms_error",
        "relative_bias",
        "decay_test",
        "decay_exact",
        "accumulate_test",
        "accumulate_exact",
    ]
    return _save(options, meta, "traces", records, columns)


def _bits(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .bit_identity import run_bits

    say("bits across batch sizes and device counts (subprocess)...")
    records = run_bits(options.quick)
    for r in records:
        gap = r["max_relative_fitness_gap"]
        say(
            f"  {r['milestone']} T={r['lifetime']:6d} {r['episodes']:10s} "
            f"{r['variant']:13s} "
            + ("identical" if not gap else f"fitness differs (relative {gap:.2g})")
            + f"; differing leaves: {r['differing_leaves']}"
        )
    return _save(options, meta, "bits", records)


def _pallas(options: Options, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .common import table
    from .pallas import PALLAS_COLUMNS, pallas_comparison

    say("pallas vs XLA layouts...")

    def log(r: dict[str, Any]) -> None:
        head = (
            f"  {r['model']:7s} N={r['num_neurons']:5d} K={r['fan_in']:3d} "
            f"P={r['population_size']:5d} T={r['num_steps']:5d} "
            f"plastic={r['plastic']!s:5} {r.get('trace_dtype') or '':8s} "
            f"{r['layout']:8s}"
        )
        if "skipped" in r:
            say(f"{head} {r['skipped']}")
        elif r["layout"] == "summary":
            ratio = r["pallas_over_best_xla"]
            say(
                f"{head} pallas / best XLA ({r['best_xla']}) = "
                + (f"{ratio:.3g}" if ratio is not None else "n/a")
                + f", fitness |diff| <= {r['fitness_max_abs_diff']:.2g}"
            )
        else:
            say(f"{head} {r['steps_per_s']:9.3g} agent-steps/s")

    records = pallas_comparison(
        quick=options.quick, repeats=options.repeats, key=jr.key(0), log=log
    )
    _save(options, meta, "pallas", records)
    # per point its summary (GPU) or its "not measured" row; layouts skipped for size
    rows = [r for r in records if r["layout"] == "summary" or "skipped" in r]
    say(table(rows, PALLAS_COLUMNS))
    return rows


def _determinism(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .determinism import DETERMINISM_COLUMNS, layout_determinism

    say("the same key twice, per layout...")
    records = layout_determinism(quick=options.quick)
    return _save(options, meta, "determinism", records, DETERMINISM_COLUMNS)


def _gymnax(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .gymnax_suite import gymnax_comparison, markdown, single_threaded_lapack

    say("gymnax suite (eqxevo vs evosax GymnaxProblem)...")
    single_threaded_lapack()
    # where this process has several devices, eqxevo also runs on all of them
    records = gymnax_comparison(quick=options.quick, sharded=not options.quick)
    _save(options, meta, "gymnax", records)
    (options.out / "gymnax.md").write_text(markdown(records))
    say(markdown(records))
    return records


def _brax(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .brax_sides import BRAX_COLUMNS, brax_comparison

    say("brax (Ant, spring: eqxevo vs evosax BraxProblem vs a raw Brax loop)...")
    rows = brax_comparison(quick=options.quick, repeats=options.repeats)
    return _save(options, meta, "brax", rows, BRAX_COLUMNS)


def _qd(options: Options, meta: dict[str, Any]) -> list[dict]:
    from .qd_arm import QD_COLUMNS, qd_arm

    title = "planar arm: eqxevo's MAP-Elites and CMA-ME vs QDax's MAP-Elites"
    return _sized(options, meta, "qd", title, qd_arm, QD_COLUMNS)


_RUNNERS: dict[str, Callable[[Options, dict[str, Any]], Any]] = {
    "milestones": _milestones,
    "breakdown": _breakdown,
    "kernels": _kernels,
    "threefry": _threefry,
    "memory": _memory,
    "cartpole": _cartpole,
    "scaling": _scaling,
    "cache": _cache,
    "devices": _devices,
    "fidelity": _fidelity,
    "batching": _batching,
    "layouts": _layouts,
    "traces": _traces,
    "pallas": _pallas,
    "bits": _bits,
    "determinism": _determinism,
    "gymnax": _gymnax,
    "brax": _brax,
    "qd": _qd,
}


__all__ = [
    "DEFAULT_PARTS",
    "PARTS",
    "QUICK_PARTS",
    "Options",
    "run_part",
    "run_parts",
    "say",
]
