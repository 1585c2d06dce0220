"""Distribution-based algorithms (CMA-ES, SNES, OpenAI-ES, PGPE, ...).

evosax's `init(key, mean)` with the user's genome as the mean; `ask` and
`tell` are evosax's own. Algorithms that sample mirrored (antithetic) pairs
declare the pairs here, so that `episodes="per_genome"` gives both members of
a pair the same episodes (a pair's fitness difference then measures the
perturbation, not the luck of two draws). `tests/test_strategy.py` checks the
declared pairs against what each algorithm's `ask` produces.
"""

from typing import Any, ClassVar

import numpy as np

from .._types import Array, Fitness, FlatPopulation, PRNGKey
from .base import AbstractFamily, StrategyView

# Algorithms whose `ask` returns `[z, -z]` around the mean (rows i and i + P/2
# mirror each other), and the attribute that switches it off, if any.
_HALVES = {
    "Open_ES": "use_antithetic_sampling",
    "EvoTF_ES": "use_antithetic_sampling",
    "PGPE": None,
    "ARS": None,
    "GuidedES": None,
    "ASEBO": None,
    "CR_FM_NES": None,
}


def mirrored_episode_ids(algorithm: Any, population_size: int) -> np.ndarray:
    """Episode ids under which `algorithm`'s mirrored pairs share episodes."""
    ids = np.arange(population_size, dtype=np.int32)
    name = type(algorithm).__name__
    half = population_size // 2
    if name in _HALVES:
        switch = _HALVES[name]
        if switch is None or getattr(algorithm, switch, False):
            ids[half:] = ids[: population_size - half]
    elif name == "ESMC":
        # [mean, mean, z, -z]: the two copies of the mean share, as do the pairs.
        ids[1] = 0
        ids[half + 1 :] = ids[2 : population_size - half + 1]
    return ids


class DistributionFamily(AbstractFamily):
    """evosax's distribution-based algorithms: a search distribution around a mean."""

    name: ClassVar[str] = "distribution"

    def init(self, strategy: StrategyView, key: PRNGKey) -> Any:
        return strategy.algorithm.init(key, strategy.initial_flat, strategy.params)

    def tell(
        self,
        strategy: StrategyView,
        key: PRNGKey,
        flat: FlatPopulation,
        fitness: Fitness,
        inner: Any,
        generation: Array,
    ) -> Any:
        del generation
        return strategy.algorithm.tell(key, flat, fitness, inner, strategy.params)[0]

    def mean(self, strategy: StrategyView, inner: Any) -> Array:
        del strategy
        return inner.mean

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        return mirrored_episode_ids(strategy.algorithm, strategy.population_size)


__all__ = ["DistributionFamily", "mirrored_episode_ids"]
