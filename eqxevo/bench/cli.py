"""`eqxevo bench` / `python scripts/bench.py`: run benchmarks, write the report.

    eqxevo bench --milestone all            # L0, L2, L4 + CartPole + scaling + cache
    eqxevo bench --quick                    # the CI smoke run (< 2 minutes)
    eqxevo bench --milestone L0 --trace tr  # also a jax.profiler trace of L0
    eqxevo bench --only layouts             # network layout sweep (long)
    eqxevo bench --only traces              # trace dtype drift
    eqxevo bench --only breakdown           # where an L0 step's time goes
    eqxevo bench --only gymnax              # 4 gymnax tasks vs evosax (30-60 min)

Writes to `--out` (default `bench-out/`): `milestones.json`, `ratios.csv`,
`cartpole.csv`, `scaling.csv` + `scaling.png`, `cache.json`, `layouts*.csv`,
`traces.csv`, `gymnax.csv` + `gymnax.md` (each `.csv` with a `.json` twin
holding the machine info) and `report.md`: the ratio table against the
targets, saying by how much a missed target is missed.
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
    "cartpole",
    "scaling",
    "cache",
    "layouts",
    "traces",
    "gymnax",
)
DEFAULT_PARTS = ("milestones", "breakdown", "cartpole", "scaling", "cache")


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
        help="CPU devices to expose (default: one per core; sharded figures use "
        "them all)",
    )
    return p


def _setup_devices(count: int | None) -> None:
    import jax

    n = count if count is not None else (os.cpu_count() or 1)
    # Only affects the CPU platform; must run before JAX starts its backends.
    jax.config.update("jax_num_cpu_devices", max(1, n))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.repeats < 1:
        parser().error(f"--repeats must be >= 1; got {args.repeats}")
    _setup_devices(args.devices)

    from . import common
    from .report import write_report

    quick_parts = (*DEFAULT_PARTS, "traces", "gymnax")
    parts = args.only or (quick_parts if args.quick else DEFAULT_PARTS)
    meta = common.machine_info()
    print(f"# eqxevo bench on {meta}", flush=True)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": meta, "quick": args.quick}
    start = time.perf_counter()

    runners = {
        "milestones": _milestones,
        "breakdown": _breakdown,
        "cartpole": _cartpole,
        "scaling": _scaling,
        "cache": _cache,
        "layouts": _layouts,
        "traces": _traces,
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
        record = run_milestone(name, quick=args.quick, repeats=args.repeats)
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
    print(table(rows, ["variant", "population_size", "lifetime", "agent_steps_per_s"]))
    return rows


def _cartpole(args: argparse.Namespace, meta: dict[str, Any]) -> list[dict]:
    from .cartpole import cartpole_comparison
    from .common import table, write_records

    print("cartpole...", flush=True)
    rows = cartpole_comparison(quick=args.quick, repeats=args.repeats)
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

    from .scaling import compilation_cache

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
