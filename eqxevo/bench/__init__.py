"""Benchmark harness: every figure in docs/performance.md comes from here.

`eqxevo bench ...` and `python scripts/bench.py ...` are thin over `bench.cli`.
Timings are reported as ratios against baselines run in the same process and
are never asserted in tests.

- `common`: machine info, timing, memory, tables and files;
- `milestones`: L0/L2/L4 through `eqxevo.evolve`;
- `baselines`: what one would write by hand, for the ratio table;
- `cartpole`: eqxevo against evosax's GymnaxProblem and EvoJAX on CartPole;
- `scaling`: curves against P, T, E, N; the persistent compilation cache;
- `nets`: network layouts and trace dtypes;
- `fused`: the fused Pallas kernel against the XLA layouts (GPU only);
- `cli`: the command line.

Names load on first use, so `eqxevo bench` can set the CPU device count
before JAX starts.
"""

import importlib
from typing import Any

_LAZY = {
    "machine_info": "common",
    "peak_memory": "common",
    "program_bytes": "common",
    "time_call": "common",
    "MILESTONES": "milestones",
    "milestone_experiment": "milestones",
    "run_milestone": "milestones",
    "LAYOUT_SIZES": "nets",
    "LAYOUT_DENSITIES": "nets",
    "best_and_auto": "nets",
    "build_policy": "nets",
    "layout_grid": "nets",
    "layout_sweep": "nets",
    "layout_throughput": "nets",
    "make_population": "nets",
    "state_bytes": "nets",
    "trace_drift": "nets",
    "trace_drift_sweep": "nets",
    "NEEDS_GPU": "fused",
    "fitness_agreement": "fused",
    "pallas_comparison": "fused",
    "pallas_grid": "fused",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'eqxevo.bench' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
