"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device.
Re-exports only; importing starts nothing (evosax, and with it JAX's backends,
loads on first use, so `use_cpu_devices()` works right after `import eqxevo`).
"""

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

__version__ = "0.2.0.dev0"
