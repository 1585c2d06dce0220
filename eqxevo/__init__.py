"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device.

Re-exports only. Importing eqxevo starts nothing: evosax (whose import starts
JAX's backends) is imported on first use, so `eqxevo.use_cpu_devices()` and
`eqxevo.initialize_distributed(...)` work right after `import eqxevo`.
"""

from .evaluate import (
    AbstractPopulationFitness as AbstractPopulationFitness,
    evaluate as evaluate,
)
from .evolve import (
    Chunk as Chunk,
    EvolveResult as EvolveResult,
    NonFiniteFitnessError as NonFiniteFitnessError,
    evolve as evolve,
    generation_keys as generation_keys,
    stack_runs as stack_runs,
)
from .fidelity import (
    MultiFidelity as MultiFidelity,
    combine_fidelities as combine_fidelities,
)
from .genome import GenomeLayout as GenomeLayout
from .prng import fast_cpu_prng as fast_cpu_prng
from .registry import PresetError as PresetError, strategies as strategies
from .rollout import Trajectory as Trajectory, record as record, rollout as rollout
from .sharding import (
    initialize_distributed as initialize_distributed,
    population_mesh as population_mesh,
    use_cpu_devices as use_cpu_devices,
)
from .strategy import Strategy as Strategy, StrategyState as StrategyState

__version__ = "0.2.0.dev0"
