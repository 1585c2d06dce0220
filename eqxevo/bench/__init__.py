"""The benchmark harness (`eqxevo bench`): every figure of docs/performance.md.

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
    "layout_determinism": "determinism",
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
