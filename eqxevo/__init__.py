"""eqxevo: neuroevolution with Equinox genomes and evosax strategies, on device."""

from .evaluate import evaluate as evaluate
from .evolve import (
    EvolveResult as EvolveResult,
    NonFiniteFitnessError as NonFiniteFitnessError,
    evolve as evolve,
    generation_keys as generation_keys,
)
from .genome import GenomeLayout as GenomeLayout
from .registry import PresetError as PresetError, strategies as strategies
from .rollout import Trajectory as Trajectory, record as record, rollout as rollout
from .strategy import Strategy as Strategy, StrategyState as StrategyState

__version__ = "0.1.0"
