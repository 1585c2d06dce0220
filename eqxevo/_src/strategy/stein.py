"""Stein-variational algorithms (SV_CMA_ES, SV_Open_ES): K interacting searches,
each around its own mean, told together.
"""

from typing import Any, ClassVar

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import positive_int
from .._types import Array, FlatPopulation, PRNGKey
from .base import AbstractFamily, StrategyView, sample_around
from .distribution import mirrored_episode_ids


class SteinFamily(AbstractFamily):
    """evosax's Stein-variational algorithms (`SV_ES` subclasses)."""

    name: ClassVar[str] = "stein"

    def evosax_size(
        self, algorithm_name: str, population_size: int, kwargs: Any
    ) -> int:
        if kwargs.get("num_populations") is None:
            raise ValueError(
                f"{algorithm_name} runs several sub-populations: pass "
                "num_populations=<int >= 1> (e.g. Strategy('SV_CMA_ES', genome, 32, "
                "num_populations=4))"
            )
        num_populations = positive_int("num_populations", kwargs["num_populations"])
        if population_size % num_populations:
            raise ValueError(
                f"population_size={population_size} must be divisible by "
                f"num_populations={num_populations} for {algorithm_name}"
            )
        return population_size // num_populations

    def num_subpopulations(self, strategy: StrategyView) -> int:
        algorithm: Any = strategy.algorithm  # an SV_ES, which keeps the count
        return int(algorithm.num_populations)

    def init(self, strategy: StrategyView, key: PRNGKey) -> Any:
        sample_key, init_key = jr.split(key)
        means = sample_around(strategy, sample_key, self.num_subpopulations(strategy))
        return strategy.algorithm.init(init_key, means, strategy.params)

    def group(self, strategy: StrategyView, flat: FlatPopulation) -> Array:
        # evosax tells the K sub-populations together, one block each.
        size = strategy.algorithm.population_size
        return jnp.reshape(flat, (self.num_subpopulations(strategy), size, -1))

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        # Blocks of per-sub-population ids, offset so no two blocks share one.
        # Each sub-population samples like its base algorithm, one after another.
        size = strategy.algorithm.population_size
        blocks = [
            mirrored_episode_ids(strategy.algorithm, size) + k * size
            for k in range(self.num_subpopulations(strategy))
        ]
        return np.concatenate(blocks).astype(np.int32)


__all__ = ["SteinFamily"]
