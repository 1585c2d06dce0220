"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device."""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from .evaluate import (
    MultiFidelity as MultiFidelity,
    combine_fidelities as combine_fidelities,
    evaluate as evaluate,
)
from .genome import GenomeLayout as GenomeLayout
from .sharding import (
    initialize_distributed as initialize_distributed,
    population_mesh as population_mesh,
    use_cpu_devices as use_cpu_devices,
)

if TYPE_CHECKING:
    from .evolve import (
        EvolveResult as EvolveResult,
        NonFiniteFitnessError as NonFiniteFitnessError,
        evolve as evolve,
        generation_keys as generation_keys,
    )
    from .registry import PresetError as PresetError, strategies as strategies
    from .rollout import Trajectory as Trajectory, record as record, rollout as rollout
    from .strategy import Strategy as Strategy, StrategyState as StrategyState

__version__ = "0.1.0"

# Importing evosax starts JAX's backends (it builds arrays at import time), after
# which neither `jax.distributed.initialize` nor the CPU device count can be set.
# So the names that import evosax load on first use (PEP 562): a script can call
# `eqxevo.initialize_distributed(...)` or `eqxevo.use_cpu_devices()` right after
# `import eqxevo`. Re-exports only; `from eqxevo import Strategy` works as usual.
_LAZY = {
    "EvolveResult": "evolve",
    "NonFiniteFitnessError": "evolve",
    "evolve": "evolve",
    "generation_keys": "evolve",
    "PresetError": "registry",
    "strategies": "registry",
    "Trajectory": "rollout",
    "record": "rollout",
    "rollout": "rollout",
    "Strategy": "strategy",
    "StrategyState": "strategy",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'eqxevo' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    # Importing the submodule `eqxevo.evolve` sets the package attribute `evolve`
    # to that module; keep the name for the function, as an eager
    # `from .evolve import evolve` would.
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
