"""Benchmark harness: every figure in docs/performance.md comes from here.

`eqxevo bench ...` and `python scripts/bench.py ...` are thin over `bench.cli`.
Timings are reported as ratios against baselines run in the same process and
are never asserted in tests.

- `common`: machine info, timing, memory, tables and files;
- `spawn`: one measurement in a child process (device count, JAX config);
- `milestones`: L0/L2/L4 through `eqxevo.evolve`;
- `baselines`: the same math written by hand, for the ratio table;
- `cartpole`: eqxevo against evosax's GymnaxProblem and EvoJAX on CartPole;
- `scaling`: curves against P, T, E, N, devices and batch size;
- `cache`: the persistent compilation cache, cold against warm;
- `fidelity`: multi-fidelity against full evaluation, per agent-step;
- `nets`: network layouts and trace dtypes;
- `fused`: the fused Pallas kernel against the XLA layouts (GPU only);
- `cli`: the command line.

Importing the package loads nothing else: names load on first use.
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
    "time_milestone": "milestones",
    "batch_memory": "scaling",
    "device_scaling": "scaling",
    "scaling_sweep": "scaling",
    "compilation_cache": "cache",
    "fidelity_curves": "fidelity",
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
