"""Distribution-based algorithms (CMA-ES, SNES, OpenAI-ES, PGPE, ...): a search
distribution around the user's genome; evosax's own `ask` and `tell`.
"""

from typing import Any, ClassVar

import numpy as np

from .._types import PRNGKey
from .base import AbstractFamily, StrategyView

# Algorithms whose `ask` returns `[z, -z]` around the mean (rows i and i + P/2
# mirror each other), and the attribute that switches it off, if any. Giving a
# pair the same episodes makes its fitness difference measure the perturbation,
# not the luck of two draws; tests/test_strategy.py checks this table against
# what each algorithm's `ask` produces.
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

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        return mirrored_episode_ids(strategy.algorithm, strategy.population_size)


__all__ = ["DistributionFamily", "mirrored_episode_ids"]
