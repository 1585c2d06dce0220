"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device.

The public API is what this module and its faces export: `eqxevo.nets`,
`eqxevo.envs`, `eqxevo.agents`, `eqxevo.experiment`, `eqxevo.study` and
`eqxevo.testing`. The library lives in `eqxevo._src`, the application (commands,
experiments, studies, the benchmark) in `eqxevo._app`; both are private
(docs/architecture.md, "Layout").

Re-exports only, each loaded on first use: importing starts nothing, JAX included
(so `use_cpu_devices()` works right after `import eqxevo`, and the `eqxevo`
command takes over Ctrl-C before anything heavy loads: eqxevo/__main__.py).
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._src.version import __version__ as __version__

if TYPE_CHECKING:
    from ._src.bits import (
        fast_cpu_prng as fast_cpu_prng,
    )
    from ._src.evaluate import (
        AbstractPopulationFitness as AbstractPopulationFitness,
        evaluate as evaluate,
    )
    from ._src.evolve import (
        Chunk as Chunk,
        EvolveResult as EvolveResult,
        NonFiniteFitnessError as NonFiniteFitnessError,
        evolve as evolve,
    )
    from ._src.fidelity import (
        MultiFidelity as MultiFidelity,
        combine_fidelities as combine_fidelities,
    )
    from ._src.genome import (
        GenomeLayout as GenomeLayout,
    )
    from ._src.keys import (
        generation_keys as generation_keys,
    )
    from ._src.options import (
        EvolveOptions as EvolveOptions,
    )
    from ._src.presets import (
        PresetError as PresetError,
    )
    from ._src.registry import (
        strategies as strategies,
    )
    from ._src.rollout import (
        LifetimeFitness as LifetimeFitness,
        rollout as rollout,
    )
    from ._src.runs import (
        stack_runs as stack_runs,
    )
    from ._src.sharding import (
        initialize_distributed as initialize_distributed,
        population_mesh as population_mesh,
        use_cpu_devices as use_cpu_devices,
    )
    from ._src.strategy.base import (
        StrategyState as StrategyState,
    )
    from ._src.strategy.strategy import (
        Strategy as Strategy,
    )
    from ._src.trajectory import (
        Trajectory as Trajectory,
        record as record,
    )

_LAZY = {
    "fast_cpu_prng": "_src.bits",
    "AbstractPopulationFitness": "_src.evaluate",
    "evaluate": "_src.evaluate",
    "Chunk": "_src.evolve",
    "evolve": "_src.evolve",
    "EvolveResult": "_src.evolve",
    "NonFiniteFitnessError": "_src.evolve",
    "combine_fidelities": "_src.fidelity",
    "MultiFidelity": "_src.fidelity",
    "GenomeLayout": "_src.genome",
    "generation_keys": "_src.keys",
    "EvolveOptions": "_src.options",
    "PresetError": "_src.presets",
    "strategies": "_src.registry",
    "LifetimeFitness": "_src.rollout",
    "rollout": "_src.rollout",
    "stack_runs": "_src.runs",
    "initialize_distributed": "_src.sharding",
    "population_mesh": "_src.sharding",
    "use_cpu_devices": "_src.sharding",
    "StrategyState": "_src.strategy.base",
    "Strategy": "_src.strategy.strategy",
    "record": "_src.trajectory",
    "Trajectory": "_src.trajectory",
}
"""Each public name and the private module it is loaded from."""


def __getattr__(name: str) -> Any:
    """A re-exported name (`_LAZY`), or a face (`eqxevo.nets` ...), on first use."""
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    elif name in _FACES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_FACES})


_FACES = ("agents", "envs", "experiment", "nets", "study", "testing")
