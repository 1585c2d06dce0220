"""Stein-variational algorithms (SV_CMA_ES, SV_Open_ES): K interacting searches.

The population is split into `num_populations` sub-populations, each around
its own mean; the K means are sampled around the user's genome (the first is
the genome itself, the others `genome + init_scale * N(0, I)`). evosax tells
them together, with the fitness grouped per sub-population.
"""

from typing import Any, ClassVar

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._types import Array, Fitness, FlatPopulation, PRNGKey
from .base import AbstractFamily, StrategyView
from .distribution import mirrored_episode_ids


def sample_around(strategy: StrategyView, key: PRNGKey, count: int) -> Array:
    """`count` flat genomes: the initial genome, then the initial genome plus
    `init_scale * N(0, I)`."""
    noise = jr.normal(key, (count, strategy.layout.num_params), strategy.layout.dtype)
    noise = noise.at[0].set(0.0)
    return strategy.initial_flat + strategy.init_scale * noise


class SteinFamily(AbstractFamily):
    """evosax's Stein-variational algorithms (`SV_ES` subclasses)."""

    name: ClassVar[str] = "stein"

    def evosax_size(
        self, algorithm_name: str, population_size: int, kwargs: Any
    ) -> int:
        num_populations = kwargs.get("num_populations")
        if (
            not isinstance(num_populations, int)
            or isinstance(num_populations, bool)
            or num_populations < 1
        ):
            raise ValueError(
                f"{algorithm_name} runs several sub-populations: pass "
                "num_populations=<int >= 1> (e.g. Strategy('SV_CMA_ES', genome, 32, "
                f"num_populations=4)); got num_populations={num_populations!r}"
            )
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
        algorithm = strategy.algorithm
        grouped = jnp.reshape(
            flat, (self.num_subpopulations(strategy), algorithm.population_size, -1)
        )
        return algorithm.tell(key, grouped, fitness, inner, strategy.params)[0]

    def mean(self, strategy: StrategyView, inner: Any) -> Array:
        del strategy
        return inner.mean

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        # Each sub-population samples like its base algorithm, one after another.
        size = strategy.algorithm.population_size
        blocks = [
            mirrored_episode_ids(strategy.algorithm, size) + k * size
            for k in range(self.num_subpopulations(strategy))
        ]
        return np.concatenate(blocks).astype(np.int32)


__all__ = ["SteinFamily", "sample_around"]
