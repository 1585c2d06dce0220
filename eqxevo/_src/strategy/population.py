"""Population-based algorithms (SimpleGA, DifferentialEvolution, PSO, LGA, ...):
generation 0 is a population sampled around the user's genome, handed to evosax's
`init` with its fitness at the first `tell` (see docs/internals.md).
"""

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from .._types import Array, Fitness, FlatPopulation, PRNGKey
from .base import AbstractFamily, StrategyView, sample_around


class PopulationFamily(AbstractFamily):
    """evosax's population-based algorithms (`PopulationBasedAlgorithm`)."""

    name: ClassVar[str] = "population"

    def init(self, strategy: StrategyView, key: PRNGKey) -> Any:
        # evosax's state needs an evaluated population, which only the first
        # tell has: until then, a container of the right type (a scan carry
        # cannot change type) holding the sampled population, +inf fitness and
        # zeros, built without running fitness shaping on placeholders (so no
        # NaN). The first tell replaces it whole.
        sample_key, init_key = jr.split(key)
        size = strategy.population_size
        points = sample_around(strategy, sample_key, size)
        fitness = jnp.full((size,), jnp.inf, strategy.layout.dtype)
        algorithm, params = strategy.algorithm, strategy.params
        shapes = jax.eval_shape(
            lambda: algorithm.init(init_key, points, fitness, params)
        )
        inner = jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        # What the first ask hands out, and a best that any finite fitness beats.
        replace = {"population": points, "fitness": fitness}
        fields = {f.name for f in dataclasses.fields(inner)}
        if "best_solution" in fields:
            replace["best_solution"] = points[0]
        if "best_fitness" in fields:
            replace["best_fitness"] = jnp.asarray(jnp.inf, inner.best_fitness.dtype)
        return inner.replace(**replace)

    def ask(
        self, strategy: StrategyView, key: PRNGKey, inner: Any, generation: Array
    ) -> tuple[Array, Any]:
        algorithm, params = strategy.algorithm, strategy.params

        # Generation 0 hands out the population init sampled; lax.cond because
        # the generation is a traced counter.
        def first(inner: Any) -> tuple[Array, Any]:
            return inner.population, inner

        def later(inner: Any) -> tuple[Array, Any]:
            return algorithm.ask(key, inner, params)

        return jax.lax.cond(generation == 0, first, later, inner)

    def tell(
        self,
        strategy: StrategyView,
        key: PRNGKey,
        flat: FlatPopulation,
        fitness: Fitness,
        inner: Any,
        generation: Array,
    ) -> Any:
        algorithm, params = strategy.algorithm, strategy.params

        # Generation 0's tell is evosax's init, with the fitness just measured.
        def first(inner: Any) -> Any:
            return algorithm.init(key, flat, fitness, params)

        def later(inner: Any) -> Any:
            return algorithm.tell(key, flat, fitness, inner, params)[0]

        return jax.lax.cond(generation == 0, first, later, inner)

    def mean(self, strategy: StrategyView, inner: Any) -> Array:
        del inner
        raise TypeError(
            f"{strategy.name} is population-based and has no search mean; use "
            "strategy.best(state)"
        )

    def reference(
        self, strategy: StrategyView, inner: Any, generation: Array
    ) -> Array | None:
        # A failed genome must not displace a stored one. evosax stores *shaped*
        # fitness; only under identity shaping (the default) is it comparable
        # with this generation's raw fitness. Under any other shaping the
        # algorithm compares shaped values, and ranking a failed genome last in
        # its own generation is all that can be said in raw terms.
        from evosax.core.fitness_shaping import identity_fitness_shaping_fn

        if strategy.algorithm.fitness_shaping_fn is not identity_fitness_shaping_fn:
            return None
        return jnp.where(generation == 0, jnp.inf, inner.fitness)


__all__ = ["PopulationFamily"]
