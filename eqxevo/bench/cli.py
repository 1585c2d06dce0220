"""`eqxevo bench` / `python scripts/bench.py`: run benchmarks, write the report.

    eqxevo bench --milestone all            # L0, L2, L4 + CartPole + scaling + cache
    eqxevo bench --quick                    # the CI smoke run (< 2 minutes)
    eqxevo bench --only devices             # L0 on 1 vs all CPU devices, in rounds
    eqxevo bench --only fidelity            # multi-fidelity vs full evaluation (long)
    eqxevo bench --only batching            # micro-batching: memory per block size
    eqxevo bench --milestone L0 --trace tr  # also a jax.profiler trace of L0
    eqxevo bench --only layouts             # network layout sweep (long)
    eqxevo bench --only traces              # trace dtype drift
    eqxevo bench --only breakdown           # where an L0 step's time goes
    eqxevo bench --only kernels             # kernels per lifetime step (HLO)
    eqxevo bench --only threefry            # L0: eqxevo.fast_cpu_prng vs default
    eqxevo bench --only memory              # L4 planned bytes per genome
    eqxevo bench --only pallas              # fused Pallas kernel vs XLA (GPU)
    eqxevo bench --only bits                # same bits across batch sizes, devices
    eqxevo bench --only gymnax              # 4 gymnax tasks vs evosax (1-2 h)

Writes to `--out` (default `bench-out/`): `milestones.json`, `ratios.csv`,
`cartpole.csv`, `scaling.csv` + `scaling.png`, `cache.json`, `layouts*.csv`,
`traces.csv`, `breakdown.csv`, `kernels.csv`, `threefry.csv`, `memory.csv`,
`pallas.csv`, `bits.csv`, `gymnax.csv` + `gymnax.md` (each `.csv`
with a `.json` twin holding the machine info) and `report.md`: the ratio table
against the targets, saying by how much a missed target is missed.

The harness's own process leaves JAX as it finds it (one CPU device): figures
on several devices (`sharded`, CartPole, `devices`) and the compilation cache
are measured in child processes (`bench.spawn`) that expose `--devices` CPU
devices. `devices`, `fidelity` and `batching` write `devices.json`,
`fidelity.csv` + `fidelity.png` and `batching.csv`.
"""

import argparse
import os
import time
import traceback
from pathlib import Path
from typing import Any

PARTS = (
    "milestones",
    "breakdown",
    "kernels",
    "threefry",
    "memory",
    "cartpole",
    "scaling",
    "cache",
    "devices",
    "fidelity",
    "batching",
    "layouts",
    "traces",
    "pallas",
    "bits",
    "gymnax",
)
# "pallas" costs nothing without a GPU (one "not measured" row per point)
DEFAULT_PARTS = (
    "milestones",
    "breakdown",
    "kernels",
    "threefry",
    "memory",
    "cartpole",
    "scaling",
    "cache",
    "pallas",
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eqxevo bench",
        description="Benchmarks of eqxevo against hand-written baselines.",
    )
    p.add_argument(
        "--milestone",
        default="all",
        choices=("L0", "L2", "L4", "all"),
        help="which milestone workloads to time (default all)",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        help="run only these parts (repeatable); default: "
        + ", ".join(DEFAULT_PARTS)
        + " (quick mode adds traces and gymnax)",
    )
    p.add_argument("--quick", action="store_true", help="CI smoke mode, small sizes")
    p.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder")
    p.add_argument(
        "--trace", type=Path, default=None, help="write a jax.profiler trace here"
    )
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per figure")
    p.add_argument(
        "--devices",
        type=int,
        default=None,
        help="CPU devices of the child processes that measure sharded figures "
        "(default: one per core)",
    )
    return p


def _devices(args: argparse.Namespace) -> int:
    """How many CPU devices the children of sharded figures expose."""
    return args.devices or os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.repeats < 1:
        parser().error(f"--repeats must be >= 1; got {args.repeats}")
    if args.devices is not None and args.devices < 1:
        parser().error(f"--devices must be >= 1; got {args.devices}")

    from . import common
    from .report import write_report

    parts = args.only or (
        (*DEFAULT_PARTS, "traces", "bits", "gymnax") if args.quick else DEFAULT_PARTS
    )
    meta = common.machine_info()
    print(f"# eqxevo bench on {meta}", flush=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    meta["child_devices"] = _devices(args)
    results: dict[str, Any] = {"machine": meta, "quick": args.quick}
    start = time.perf_counter()

    runners = {
        "milestones": _milestones,
        "breakdown": _breakdown,
        "kernels": _kernels,
        "threefry": _threefry,
        "memory": _memory,
        "cartpole": _cartpole,
        "scaling": _scaling,
        "cache": _cache,
        "devices": _devices_part,
        "fidelity": _fidelity,
        "batching": _batching,
        "layouts": _layouts,
        "traces": _traces,
        "pallas": _pallas,
        "bits": _bits,
        "gymnax": _gymnax,
    }
    failed = []
    for part in PARTS:
        if part not in parts:
            continue
        try:
            results[part] = runners[part](args, meta)
        except Exception:  # keep the other parts' figures
            traceback.print_exc()
            failed.append(part)
            results.setdefault("failed", []).append(part)
    results["wall_s"] = time.perf_counter() - start
    report = write_report(results, out)
    print()
    print(report)
    print(f"\nwrote {out}/ in {results['wall_s']:.0f} s", flush=True)
    if failed:
        print(f"failed parts: {', '.join(failed)} (tracebacks above)", flush=True)
        return 1
    return 0


def _milestones(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import table, write_records
    from .milestones import MILESTONES, run_milestone

    names = list(MILESTONES) if args.milestone == "all" else [args.milestone]
    if args.quick and args.milestone == "all":
        names = ["L0", "L4"]  # L2 costs what L0 does; L4 adds plasticity
    records = []
    for name in names:
        print(f"milestone {name}...", flush=True)
        record = run_milestone(
            name,
            quick=args.quick,
            repeats=args.repeats,
            sharded_devices=_devices(args),
        )
        records.append(record)
        sharded = record.get("sharded", {}).get("agent_steps_per_s")
        print(
            f"  {name}: P={record['population_size']} T={record['lifetime']} "
            f"compile {record['compile_s']:.1f}s  "
            f"generation {record['generation_s']:.3g}s  "
            f"{record['agent_steps_per_s']:.3g} agent-steps/s (1 device)"
            + (f", {sharded:.3g} sharded" if sharded else ""),
            flush=True,
        )
        for b in record.get("baselines", []):
            print(
                f"    vs {b['baseline']:17s} {b['agent_steps_per_s']:10.3g} "
                f"agent-steps/s -> evolve is {b['evolve_over_baseline']:.3g}x",
                flush=True,
            )
    if args.trace is not None and records:
        _profile(args, names[0])
    write_records(args.out, "milestones", meta, records)
    ratios = [
        {"milestone": r["milestone"], **b}
        for r in records
        for b in r.get("baselines", [])
    ]
    if ratios:
        write_records(args.out, "ratios", meta, ratios)
        print(
            table(
                ratios,
                ["milestone", "baseline", "agent_steps_per_s", "evolve_over_baseline"],
            )
        )
    return records


def _profile(args: argparse.Namespace, name: str) -> None:
    import jax

    from ..evolve import evolve
    from ..experiment import build
    from .milestones import milestone_experiment

    built = build(milestone_experiment(name, quick=args.quick))

    def call() -> Any:
        return evolve(
            built.key, built.strategy, built.fitness, num_generations=2, chunk_size=2
        ).best_fitness

    jax.block_until_ready(call())  # compile outside the trace
    with jax.profiler.trace(str(args.trace)):
        jax.block_until_ready(call())
    print(
        f"  profiler trace of {name} in {args.trace}/ (open in Perfetto: "
        "ui.perfetto.dev, or `tensorboard --logdir`)",
        flush=True,
    )


def _breakdown(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import table, write_records
    from .milestones import l0_breakdown

    print("L0 breakdown...", flush=True)
    rows = l0_breakdown(quick=args.quick, repeats=args.repeats)
    write_records(args.out, "breakdown", meta, rows)
    print(
        table(
            rows,
            [
                "variant",
                "population_size",
                "lifetime",
                "agent_steps_per_s",
                "kernels_per_step",
            ],
        )
    )
    return rows


def _kernels(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from . import spawn
    from .common import table, write_records
    from .kernels import milestone_kernels

    print("kernels per lifetime step...", flush=True)
    names = ("L0", "L2", "L4") if args.milestone == "all" else (args.milestone,)
    rows = []
    for name in names:
        rows += milestone_kernels(name, quick=args.quick)
        rows += spawn.call(
            "eqxevo.bench.kernels:unrolled_threefry_kernels",
            {"name": name, "quick": args.quick},
        ).result
    write_records(args.out, "kernels", meta, rows)
    print(table(rows, KERNEL_COLUMNS))
    return rows


def _threefry(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import table, write_records
    from .prng import THREEFRY_COLUMNS, threefry_lowering

    print("L0: unrolled threefry vs JAX's default lowering (two children)...")
    rows = threefry_lowering("L0", quick=args.quick, repeats=args.repeats)
    write_records(args.out, "threefry", meta, rows)
    print(table(rows, THREEFRY_COLUMNS))
    return rows


KERNEL_COLUMNS = [
    "milestone",
    "option",
    "kernels_per_step",
    "top_level",
    "in_nested_loops",
]


def _memory(args: argparse.Namespace, meta: dict[str, Any]) -> dict:
    from .common import table, write_records
    from .kernels import chunk_donation, memory_per_genome

    print("L4 planned memory per genome...", flush=True)
    rows = memory_per_genome(quick=args.quick)
    donation = chunk_donation(quick=args.quick)
    write_records(args.out, "memory", meta, rows)
    print(table(rows, MEMORY_COLUMNS))
    print(
        f"  one L4 chunk, P={donation['population_size']}: donating the state "
        f"saves {donation['saved_bytes']} of {donation['plain']['planned_bytes']} "
        "planned bytes",
        flush=True,
    )
    return {"per_genome": rows, "donation": donation}


MEMORY_COLUMNS = [
    "trace_dtype",
    "population_sizes",
    "planned_bytes",
    "bytes_per_genome",
]


def _cartpole(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from . import spawn
    from .common import table, write_records

    print(f"cartpole (a child process, {_devices(args)} devices)...", flush=True)
    rows = spawn.call(
        "eqxevo.bench.cartpole:cartpole_comparison",
        {"quick": args.quick, "repeats": args.repeats},
        num_devices=_devices(args),
    ).result
    write_records(args.out, "cartpole", meta, rows)
    print(
        table(
            rows,
            ["side", "agent_steps_per_s", "compile_s", "eqxevo_over_side", "skipped"],
        )
    )
    return rows


def _scaling(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import write_records
    from .scaling import plot_scaling, scaling_sweep

    print("scaling...", flush=True)

    def log(r: dict[str, Any]) -> None:
        print(
            f"  {r['varied']:15s} P={r['population_size']:5d} T={r['lifetime']:6d} "
            f"N={r['num_neurons']:5d} K={r['fan_in']:3d}  "
            f"{r['agent_steps_per_s']:9.3g} agent-steps/s  "
            f"compile {r['compile_s']:.2f}s  "
            f"temp {r.get('temp_bytes', 0) / 2**20:.2f} MiB",
            flush=True,
        )

    records = scaling_sweep(quick=args.quick, repeats=min(args.repeats, 2), log=log)
    write_records(args.out, "scaling", meta, records)
    plot_scaling(records, args.out / "scaling.png")
    return records


def _cache(args: argparse.Namespace, meta: dict[str, Any]) -> dict:
    import json

    from .cache import compilation_cache

    print("compilation cache (two child processes)...", flush=True)
    record = compilation_cache(quick=args.quick)
    (args.out / "cache.json").write_text(
        json.dumps({"machine": meta, "record": record}, indent=1)
    )
    print(
        f"  compile cold {record['cold']['compile_s']:.2f}s, warm "
        f"{record['warm']['compile_s']:.2f}s "
        f"(x{record['warm_over_cold_compile']:.2f})",
        flush=True,
    )
    return record


def _devices_part(args: argparse.Namespace, meta: dict[str, Any]) -> dict:
    from .common import table, write_records
    from .scaling import device_scaling

    counts = sorted({1, _devices(args)})
    print(f"devices {counts} (child processes)...", flush=True)

    def log(r: dict[str, Any]) -> None:
        print(
            f"  round {r['round']} devices={r['devices']}: "
            f"{r['agent_steps_per_s']:.3g} agent-steps/s (load {r['load_1min']})",
            flush=True,
        )

    result = device_scaling(
        quick=args.quick, devices=counts, repeats=args.repeats, log=log
    )
    write_records(args.out, "devices", meta, result["median_by_devices"])
    print(
        table(result["median_by_devices"], ["devices", "agent_steps_per_s", "speedup"])
    )
    return result


def _fidelity(args: argparse.Namespace, meta: dict[str, Any]) -> dict:
    from .common import write_records
    from .fidelity import fidelity_curves, plot_fidelity

    print("multi-fidelity vs full evaluation...", flush=True)
    result = fidelity_curves(quick=args.quick)
    write_records(args.out, "fidelity", meta, result["rows"])
    plot_fidelity(result, args.out / "fidelity.png")
    per = result["agent_steps_per_generation"]
    print(
        f"  agent-steps per generation: full {per['full']}, multi-fidelity "
        f"{per['multi_fidelity']} ({result['agent_steps_ratio']:.2f}x fewer)",
        flush=True,
    )
    for name, values in result["final_test_fitness"].items():
        print(f"  final test fitness, {name}: {[round(v, 4) for v in values]}")
    return {k: v for k, v in result.items() if k != "rows"}


def _batching(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import table, write_records
    from .scaling import batch_memory

    print("micro-batching...", flush=True)
    records = batch_memory(quick=args.quick, repeats=args.repeats)
    write_records(args.out, "batching", meta, records)
    print(table(records, ["batch_size", "temp_bytes", "argument_bytes", "wall_s"]))
    return records


def _layouts(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .common import table, write_records
    from .nets import best_and_auto, layout_sweep

    print("layouts...", flush=True)

    def log(r: dict[str, Any]) -> None:
        if "skipped" in r:
            print(
                f"  N={r['num_neurons']} K={r['fan_in']} {r['layout']}: {r['skipped']}"
            )
            return
        print(
            f"  N={r['num_neurons']:5d} K={r['fan_in']:4d} P={r['population_size']:4d} "
            f"T={r['num_steps']:5d} plastic={r['plastic']!s:5} {r['layout']:8s} "
            f"{r['cpu_steps_per_s']:9.3g} steps/cpu-s  state {r['state_bytes']} B",
            flush=True,
        )

    records = layout_sweep(
        quick=args.quick, repeats=args.repeats, key=jr.key(0), log=log
    )
    summary = best_and_auto(records)
    write_records(args.out, "layouts", meta, records)
    write_records(args.out, "layouts_summary", meta, summary)
    print(
        table(
            summary,
            [
                "num_neurons",
                "fan_in",
                "plastic",
                "segment_cpu_steps_per_s",
                "gather_cpu_steps_per_s",
                "dense_cpu_steps_per_s",
                "best",
                "auto",
                "auto_over_best",
            ],
        )
    )
    return summary


def _traces(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .common import table, write_records
    from .nets import trace_drift_sweep

    print("trace dtypes...", flush=True)
    records = trace_drift_sweep(quick=args.quick, key=jr.key(0))
    write_records(args.out, "traces", meta, records)
    print(
        table(
            records,
            [
                "num_steps",
                "trace_dtype",
                "rounding",
                "relative_rms_error",
                "relative_bias",
                "decay_test",
                "decay_exact",
                "accumulate_test",
                "accumulate_exact",
            ],
        )
    )
    return records


def _bits(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .bits import run_bits
    from .common import write_records

    print("bits across batch sizes and device counts (subprocess)...", flush=True)
    records = run_bits(args.quick)
    for r in records:
        gap = r["max_relative_fitness_gap"]
        print(
            f"  {r['milestone']} T={r['lifetime']:6d} {r['episodes']:10s} "
            f"{r['variant']:13s} "
            + ("identical" if not gap else f"fitness differs (relative {gap:.2g})")
            + f"; differing leaves: {r['differing_leaves']}",
            flush=True,
        )
    write_records(args.out, "bits", meta, records)
    return records


def _pallas(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    import jax.random as jr

    from .common import table, write_records
    from .fused import PALLAS_COLUMNS, pallas_comparison

    print("pallas vs XLA layouts...", flush=True)

    def log(r: dict[str, Any]) -> None:
        head = (
            f"  {r['model']:7s} N={r['num_neurons']:5d} K={r['fan_in']:3d} "
            f"P={r['population_size']:5d} T={r['num_steps']:5d} "
            f"plastic={r['plastic']!s:5} {r.get('trace_dtype') or '':8s} "
            f"{r['layout']:8s}"
        )
        if "skipped" in r:
            print(f"{head} {r['skipped']}", flush=True)
        elif r["layout"] == "summary":
            ratio = r["pallas_over_best_xla"]
            print(
                f"{head} pallas / best XLA ({r['best_xla']}) = "
                + (f"{ratio:.3g}" if ratio is not None else "n/a")
                + f", fitness |diff| <= {r['fitness_max_abs_diff']:.2g}",
                flush=True,
            )
        else:
            print(f"{head} {r['steps_per_s']:9.3g} agent-steps/s", flush=True)

    records = pallas_comparison(
        quick=args.quick, repeats=args.repeats, key=jr.key(0), log=log
    )
    write_records(args.out, "pallas", meta, records)
    # per point its summary (GPU) or its "not measured" row; layouts skipped for size
    rows = [r for r in records if r["layout"] == "summary" or "skipped" in r]
    print(table(rows, PALLAS_COLUMNS))
    return rows


def _gymnax(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .common import write_records
    from .gymnax_suite import gymnax_comparison, markdown, single_threaded_lapack

    print("gymnax suite (eqxevo vs evosax GymnaxProblem)...", flush=True)
    single_threaded_lapack()
    records = gymnax_comparison(quick=args.quick, sharded=not args.quick)
    write_records(args.out, "gymnax", meta, records)
    (args.out / "gymnax.md").write_text(markdown(records))
    print(markdown(records))
    return records


__all__ = ["main", "parser"]
