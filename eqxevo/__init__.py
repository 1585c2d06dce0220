"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device.
Re-exports only, each loaded on first use: importing starts nothing, JAX included
(so `use_cpu_devices()` works right after `import eqxevo`, and the `eqxevo`
command takes over Ctrl-C before anything heavy loads: eqxevo/__main__.py).
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bits import fast_cpu_prng as fast_cpu_prng
    from .evaluate import (
        AbstractPopulationFitness as AbstractPopulationFitness,
        evaluate as evaluate,
    )
    from .evolve import (
        Chunk as Chunk,
        EvolveResult as EvolveResult,
        NonFiniteFitnessError as NonFiniteFitnessError,
        evolve as evolve,
    )
    from .fidelity import (
        MultiFidelity as MultiFidelity,
        combine_fidelities as combine_fidelities,
    )
    from .genome import GenomeLayout as GenomeLayout
    from .keys import generation_keys as generation_keys
    from .options import EvolveOptions as EvolveOptions
    from .presets import PresetError as PresetError
    from .registry import strategies as strategies
    from .rollout import LifetimeFitness as LifetimeFitness, rollout as rollout
    from .runs import stack_runs as stack_runs
    from .sharding import (
        initialize_distributed as initialize_distributed,
        population_mesh as population_mesh,
        use_cpu_devices as use_cpu_devices,
    )
    from .strategy import Strategy as Strategy, StrategyState as StrategyState
    from .trajectory import Trajectory as Trajectory, record as record

_LAZY = {
    "fast_cpu_prng": "bits",
    "AbstractPopulationFitness": "evaluate",
    "evaluate": "evaluate",
    "Chunk": "evolve",
    "EvolveResult": "evolve",
    "NonFiniteFitnessError": "evolve",
    "evolve": "evolve",
    "MultiFidelity": "fidelity",
    "combine_fidelities": "fidelity",
    "GenomeLayout": "genome",
    "generation_keys": "keys",
    "EvolveOptions": "options",
    "PresetError": "presets",
    "strategies": "registry",
    "LifetimeFitness": "rollout",
    "rollout": "rollout",
    "stack_runs": "runs",
    "initialize_distributed": "sharding",
    "population_mesh": "sharding",
    "use_cpu_devices": "sharding",
    "Strategy": "strategy",
    "StrategyState": "strategy",
    "Trajectory": "trajectory",
    "record": "trajectory",
}


def __getattr__(name: str) -> Any:
    """A re-exported name (`_LAZY`), or a submodule, loaded on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    else:
        # `eqxevo.bits` after a bare `import eqxevo`, as the eager imports allowed
        try:
            value = importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r}"
            ) from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(types.ModuleType):
    """Keeps `eqxevo.evolve` (`evaluate`, `rollout`) the function when its
    submodule is first imported from elsewhere: the import system then binds the
    submodule to the package's attribute of the same name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            _LAZY.get(name) == name
            and isinstance(value, types.ModuleType)
            and value.__name__ == f"{__name__}.{name}"
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__version__ = "0.2.0.dev0"
