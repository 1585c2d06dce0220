"""Benchmarks behind docs/performance.md.

    python scripts/bench.py layouts [--quick] [--out DIR]   # network layouts
    python scripts/bench.py traces  [--quick] [--out DIR]   # trace dtype drift

Each prints a table and writes `<name>.json` and `<name>.csv` to DIR (default
`bench-out/`). `--quick` is the CI smoke mode (well under a minute).
"""

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import jax.random as jr

from eqxevo import bench


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return "" if value is None else str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_fmt(r.get(c)) for c in columns] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)
    ]
    line = lambda values: (
        "| "
        + " | ".join(v.rjust(w) for v, w in zip(values, widths, strict=True))
        + " |"
    )
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(columns), sep, *(line(row) for row in cells)])


def _write(
    out: Path, name: str, meta: dict[str, Any], rows: list[dict[str, Any]]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(
        json.dumps({"machine": meta, "records": rows}, indent=1)
    )
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with (out / f"{name}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def layouts(args: argparse.Namespace) -> None:
    meta = bench.machine_info()
    print(f"# layouts on {meta}", flush=True)

    def log(r: dict[str, Any]) -> None:
        if "skipped" in r:
            print(
                f"N={r['num_neurons']} K={r['fan_in']} {r['layout']} "
                f"plastic={r['plastic']}: "
                f"skipped ({r['skipped']})",
                flush=True,
            )
            return
        print(
            f"N={r['num_neurons']:5d} K={r['fan_in']:4d} P={r['population_size']:4d} "
            f"T={r['num_steps']:5d} plastic={r['plastic']!s:5} {r['layout']:8s} "
            f"compile {r['compile_s']:6.2f}s  {r['steps_per_s']:9.3g} steps/s "
            f"(cpu {r['cpu_steps_per_s']:9.3g})  state {r['state_bytes']} B",
            flush=True,
        )

    records = bench.layout_sweep(
        quick=args.quick, repeats=args.repeats, key=jr.key(args.seed), log=log
    )
    meta["load_average_end"] = bench.machine_info()["load_average"]
    summary = bench.best_and_auto(records)
    columns = [
        "num_neurons",
        "fan_in",
        "density",
        "plastic",
        "segment_cpu_steps_per_s",
        "gather_cpu_steps_per_s",
        "dense_cpu_steps_per_s",
        "best",
        "auto",
        "auto_over_best",
    ]
    print()
    print(_table(summary, columns))
    worst = min((r["auto_over_best"] for r in summary), default=None)
    print(
        f"\nauto / best, worst case: {_fmt(worst)}; "
        f"load average {meta['load_average']} "
        f"-> {meta['load_average_end']}"
    )
    _write(args.out, "layouts", meta, records)
    _write(args.out, "layouts_summary", meta, summary)


def traces(args: argparse.Namespace) -> None:
    meta = bench.machine_info()
    print(f"# trace dtype drift on {meta}", flush=True)
    records = bench.trace_drift_sweep(quick=args.quick, key=jr.key(args.seed))
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
    print(_table(records, columns))
    _write(args.out, "traces", meta, records)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("layouts", layouts), ("traces", traces)):
        p = sub.add_parser(name)
        p.add_argument("--quick", action="store_true", help="CI smoke mode")
        p.add_argument("--out", type=Path, default=Path("bench-out"))
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--repeats", type=int, default=3)
        p.set_defaults(fn=fn)
    args = parser.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
