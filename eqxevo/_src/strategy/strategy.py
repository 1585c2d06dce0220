"""`Strategy`: an evosax algorithm over populations of an Equinox module, on device.

See docs/internals.md ("Strategy") for the design.
"""

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from .._checks import positive_int, positive_number
from .._types import (
    Array,
    FlatGenome,
    Float,
    Genome,
    Int,
    Metrics,
    Population,
    PRNGKey,
    RawFitness,
)
from ..fitness import (
    check_fitness,
    fitness_dtype,
    fitness_summary,
    rank_nonfinite_worst,
)
from ..genome import GenomeLayout
from ..registry import Family, StrategySpec, family_of, lookup_strategy
from .algorithm import Algorithm, algorithm_params, build_algorithm, given_algorithm
from .base import (
    AbstractFamily,
    StrategyState,
    check_state,
    standard_promotion,
    state_signature,
    strongly_typed,
    told,
)
from .distribution import DistributionFamily
from .population import PopulationFamily
from .stein import SteinFamily

if TYPE_CHECKING:
    from evosax.algorithms.base import EvolutionaryAlgorithm


def _check_scalable(spec: StrategySpec, algorithm_kwargs: dict[str, Any]) -> None:
    """Raise where per-leaf scales cannot apply: a RandomSearch whose genomes
    come from the user's own `sampling_fn`, which bypasses the search
    coordinates."""
    own = "sampling_fn" in algorithm_kwargs or "sampling_fn" in spec.kwargs
    if spec.instance is not None:
        own = hasattr(spec.instance, "sampling_fn")
    if own:
        raise ValueError(
            f"leaf_scales: {spec.name} draws its genomes with your own sampling_fn, "
            "which per-leaf scales cannot reach; scale the leaves inside "
            "sampling_fn, or leave sampling_fn out (the default samples "
            "init_scale x each leaf's scale around the genome)"
        )


FAMILIES: dict[str, AbstractFamily] = {
    "distribution": DistributionFamily(),
    "population": PopulationFamily(),
    "stein": SteinFamily(),
}
"""The behaviour of each evosax family, by `registry.family_of` name."""


class Strategy(eqx.Module):
    """An evosax algorithm over populations of one Equinox module type.

    Arguments:
        algorithm: an evosax name (`"CMA_ES"`), an evosax class or instance, a
            preset name (`"snes"`, see `eqxevo.strategies()`), a path to a preset
            TOML file, or `"package.module:Class"` naming a subclass of evosax's
            `EvolutionaryAlgorithm`.
        genome: the initial genome: any Equinox module (or pytree). Its evolvable
            leaves are `eqx.filter(genome, filter_spec)`; the rest is shared.
        population_size: P, a Python int (>= 1; some algorithms need more, or an
            even number: a clear error says so).
        maximize: if True the user's fitness is maximised (evosax minimises; the
            sign flip is internal and every metric is in the user's sign).
        filter_spec: selects the evolvable leaves (default `eqx.is_inexact_array`).
        params: overrides of the algorithm's evosax `Params` (a dict of fields, or
            a whole `Params`); applied over the preset's `[params]`. Parameters
            must not be NaN, and `std_init` must be finite and > 0.
        init_scale: standard deviation of the Gaussian around `genome` from which
            population-based algorithms draw their initial population,
            Stein-variational ones their sub-population means, and RandomSearch
            its samples (unless given `sampling_fn`). Finite and > 0; default 0.1.
        leaf_scales: per-leaf search scales, `{leaf path or prefix: scale}`
            (`{"rule.learning_rate": 0.01}`; paths as `eqxevo._src.genome.leaf_path`
            writes them, nested tables read as dotted keys). The algorithm
            searches each evolvable value divided by its leaf's scale, so a
            leaf of scale s gets s times the others' step: `std_init * s`
            for its first samples, and `init_scale * s` for a first population.
            For an algorithm with a per-dimension scale it is that scale's
            start (SNES, PGPE, Sep_CMA_ES: std or diagonal covariance times s;
            CMA_ES: as if its covariance started at diag(s**2)), adapted from
            there; for an isotropic one (Open_ES, ...) the leaf's samples and
            its mean's updates are s times the others'. Every algorithm takes
            it, except RandomSearch with your own `sampling_fn` (it draws the
            genomes itself: scale inside it). None or empty (default): no
            scales, and not one operation more. Leaves of scale 1 keep their
            exact values; others round-trip through the search coordinates to
            within one rounding (exactly for powers of 2). docs/internals.md,
            "Per-leaf search scales".
        **algorithm_kwargs: extra constructor arguments for the evosax class
            (e.g. `optimizer=optax.adam(1e-2)`, `num_populations=4`); they
            override a preset's `[kwargs]`.

    Example:
        >>> mlp = eqx.nn.MLP(4, 2, 16, 1, key=jr.key(0))
        >>> strategy = eqxevo.Strategy("snes", mlp, 64, maximize=True)
        >>> state = strategy.init(jr.key(1))
        >>> population, state = strategy.ask(jr.key(2), state)
    """

    _algorithm: Algorithm = eqx.field(static=True)
    params: Any
    layout: GenomeLayout
    initial_flat: FlatGenome
    population_size: int = eqx.field(static=True)
    maximize: bool = eqx.field(static=True)
    init_scale: float = eqx.field(static=True)
    family: Family = eqx.field(static=True)
    name: str = eqx.field(static=True)
    _state_signature: Any = eqx.field(static=True)

    def __init__(
        self,
        algorithm: Any,
        genome: Genome,
        population_size: int,
        *,
        maximize: bool = False,
        filter_spec: Any = eqx.is_inexact_array,
        params: Any = None,
        init_scale: float = 0.1,
        leaf_scales: Mapping[str, Any] | None = None,
        **algorithm_kwargs: Any,
    ):
        population_size = positive_int("population_size", population_size)
        init_scale = positive_number("init_scale", init_scale)
        spec = lookup_strategy(algorithm)
        family = family_of(spec.cls)
        layout = GenomeLayout.from_genome(genome, filter_spec, leaf_scales)
        if layout.scales is not None:
            _check_scalable(spec, algorithm_kwargs)
        initial_flat = layout.flatten(genome)
        if spec.instance is not None:
            algorithm = given_algorithm(
                spec.instance,
                spec.name,
                layout.num_params,
                population_size,
                algorithm_kwargs,
            )
        else:
            # Preset kwargs enter the signature as written in the TOML file
            # (built objects such as optimizers would compare by identity).
            kwargs_keys = {
                **{k: ("preset", v) for k, v in spec.raw_kwargs.items()},
                **algorithm_kwargs,
            }
            algorithm = build_algorithm(
                spec,
                FAMILIES[family],
                population_size,
                initial_flat,
                init_scale,
                {**spec.kwargs, **algorithm_kwargs},
                kwargs_keys,
            )
        self.params = algorithm_params(algorithm.instance, spec, params)
        self._algorithm = algorithm
        self.layout = layout
        self.initial_flat = initial_flat
        self.population_size = population_size
        self.maximize = bool(maximize)
        self.init_scale = init_scale
        self.family = family
        self.name = spec.name
        # Set before the check, which reads the other fields through self.
        self._state_signature = None
        self._state_signature = self._check_population_size()

    # -- construction-time checks -----------------------------------------------

    def _check_population_size(self) -> Any:
        """Trace init and one ask (no compilation) to catch sizes the algorithm
        rejects; returns the state's signature."""
        try:
            state = eqx.filter_eval_shape(self._init, jr.key(0))

            # Generation 1, not 0: a population-based family's generation 0
            # returns its sampled start, not what evosax's ask would.
            @standard_promotion
            def ask_once() -> Array:
                inner = self._init(jr.key(0)).inner
                return self._behaviour.ask(self, jr.key(0), inner, jnp.int32(1))[0]

            flat_shape = eqx.filter_eval_shape(ask_once)
            size = flat_shape.shape[0]
        except Exception as err:  # evosax raises many kinds at trace time
            raise ValueError(
                f"population_size={self.population_size} is rejected by {self.name}: "
                f"{type(err).__name__}: {err}"
            ) from err
        if size != self.population_size:
            hint = ""
            if size == self.population_size - 1 and self.population_size % 2:
                hint = " It samples antithetic (mirrored) pairs: use an even size."
            raise ValueError(
                f"population_size={self.population_size} is rejected by {self.name}: "
                f"it produces {size} genomes per generation.{hint}"
            )
        return state_signature(state)

    def check_state(self, state: Any, batch_shape: tuple[int, ...] = ()) -> None:
        """Raise a clear error unless `state` was made by a strategy like this one.

        Arguments:
            state: a `StrategyState` (or anything handed over as one).
            batch_shape: leading axes every leaf carries (`(K,)` for K seeds).
        """
        check_state(state, self, self._made_by, self._state_signature, batch_shape)

    # -- properties ---------------------------------------------------------------

    @property
    def _made_by(self) -> tuple[str, int]:
        return (type(self.algorithm).__name__, self.population_size)

    @property
    def algorithm(self) -> "EvolutionaryAlgorithm":
        """The evosax instance."""
        return self._algorithm.instance

    @property
    def _behaviour(self) -> AbstractFamily:
        return FAMILIES[self.family]

    @property
    def filter_spec(self) -> Any:
        """The filter spec that selects evolvable leaves; pass it to `evaluate`."""
        return self.layout.filter_spec

    @property
    def num_params(self) -> int:
        """D, the number of evolvable scalars per genome."""
        return self.layout.num_params

    @property
    def episode_ids(self) -> Int[Array, " pop"]:
        """Episode id per genome for per-genome episodes: mirrored (antithetic)
        pairs share one, so both members of a pair play the same episodes
        (`evaluate(..., episodes=strategy.episode_ids)`)."""
        return jnp.asarray(self._behaviour.episode_ids(self))

    # -- sign (evosax minimises; negation is its own inverse) ----------------------

    def _to_evosax(self, fitness: Array) -> Array:
        return -fitness if self.maximize else fitness

    def _to_user(self, fitness: Array) -> Array:
        return -fitness if self.maximize else fitness

    # -- init / ask / tell -----------------------------------------------------------

    @standard_promotion
    def _init(self, key: PRNGKey) -> StrategyState:
        inner = strongly_typed(self._behaviour.init(self, key))
        return StrategyState(
            inner=inner,
            generation=jnp.zeros((), jnp.int32),
            best_flat=self.initial_flat,
            best_fitness=jnp.asarray(jnp.inf, fitness_dtype(self.layout.dtype)),
            made_by=self._made_by,
        )

    @eqx.filter_jit
    def init(self, key: PRNGKey) -> StrategyState:
        """A fresh strategy state.

        Arguments:
            key: handed to evosax's `init` for distribution-based algorithms; for
                population-based and Stein-variational ones it is split into a
                sampling key and evosax's `init` key.
        """
        return self._init(key)

    @eqx.filter_jit
    def ask(
        self, key: PRNGKey, state: StrategyState
    ) -> tuple[Population, StrategyState]:
        """Propose a population.

        Arguments:
            key: handed unchanged to evosax's `ask`.
            state: the strategy state.

        Returns:
            `(population, state)`: the genome type with a leading axis P on every
            evolvable leaf (static leaves shared, not copied), and the new state.
        """
        self.check_state(state)
        with jax.numpy_dtype_promotion("standard"):
            flat, inner = self._behaviour.ask(self, key, state.inner, state.generation)
        inner = strongly_typed(inner)
        flat = jnp.reshape(flat, (self.population_size, self.layout.num_params))
        population = self.layout.unflatten_population(flat)
        return population, dataclasses.replace(state, inner=inner)

    def check_fitness(self, fitness: Any) -> Array:
        """`fitness` as this strategy's fitness dtype, or a `ValueError` unless it
        is one real (floating or integer) value per genome."""
        return check_fitness(fitness, self.population_size)

    @eqx.filter_jit
    def tell(
        self,
        key: PRNGKey,
        population: Population,
        fitness: RawFitness,
        state: StrategyState,
    ) -> tuple[StrategyState, Metrics]:
        """Update the strategy with the population's fitness.

        Non-finite fitness never reaches evosax: such genomes get a finite value
        worse than every finite one (see `fitness.rank_nonfinite_worst`) and are
        counted.

        Arguments:
            key: handed unchanged to evosax's `tell` (its `init` on a
                population-based strategy's first generation).
            population: the population `ask` returned.
            fitness: one value per genome, in the user's sign.
            state: the strategy state `ask` returned.

        Returns:
            `(state, metrics)` with scalar metrics in the user's sign: `best`,
            `mean`, `std`, `min`, `max` of this generation's finite fitness,
            `num_nonfinite`, and `best_so_far`.
        """
        self.check_state(state)
        flat = self.layout.flatten_population(population, self.population_size)
        fitness = self.check_fitness(fitness)
        internal = self._to_evosax(fitness)
        behaviour = self._behaviour
        reference = behaviour.reference(self, state.inner, state.generation)
        if reference is not None:
            reference = reference.astype(internal.dtype)
        clean, nonfinite = rank_nonfinite_worst(internal, reference)
        with jax.numpy_dtype_promotion("standard"):
            inner = behaviour.tell(
                self, key, flat, clean, state.inner, state.generation
            )
        inner = strongly_typed(inner)
        new_state = told(state, inner, flat, internal, nonfinite)
        metrics = fitness_summary(fitness, nonfinite, self.maximize)
        metrics["best_so_far"] = self._to_user(new_state.best_fitness)
        return new_state, metrics

    # -- read-outs ----------------------------------------------------------------

    def best(self, state: StrategyState) -> Genome:
        """The best genome told so far (the initial genome before any tell)."""
        return self.layout.unflatten(state.best_flat)

    def best_fitness(self, state: StrategyState) -> Float[Array, "*seeds"]:
        """The best fitness told so far, in the user's sign (+-inf before any tell).

        A state batched over seeds gives one value per seed."""
        return self._to_user(state.best_fitness)

    def mean(self, state: StrategyState) -> Genome:
        """The search distribution's mean as a genome.

        Stein-variational algorithms return one genome per sub-population (a
        leading axis of size `num_populations`).

        Raises:
            TypeError: population-based algorithms have no mean.
        """
        flat = self._behaviour.mean(self, state.inner)
        if flat.ndim == 2:
            return self.layout.unflatten_population(flat)
        return self.layout.unflatten(flat)

    @property
    def has_mean(self) -> bool:
        """Whether the algorithm has a search mean (`mean` works)."""
        return self.family != "population"


__all__ = ["FAMILIES", "Strategy", "StrategyState"]
