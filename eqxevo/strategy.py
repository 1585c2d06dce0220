"""Strategy: evosax ask/tell over populations of Equinox modules, on device.

A `Strategy` wraps one evosax algorithm around a genome. evosax searches over one
flat vector per genome; `Strategy` converts between those vectors and the user's
own module type (see `genome.GenomeLayout`), keeps the user's sign (`maximize`),
keeps non-finite fitness out of the update, and tracks the best genome.

Every evosax family works through the same four calls:

- distribution-based (CMA-ES, SNES, OpenAI-ES, ...): evosax's `init(key, mean)`;
- Stein-variational (SV_CMA_ES, SV_Open_ES): `num_populations` means, sampled
  around the genome (the first one is the genome itself);
- population-based (SimpleGA, DE, PSO, ...): `init` samples an initial population
  around the genome (genome 0 is the genome itself, the others are
  `genome + init_scale * N(0, I)`); the first `ask` returns that population and
  the first `tell` hands it with its fitness to evosax's `init`, exactly as a raw
  evosax user would. Later generations are evosax's `ask`/`tell`.

`ask` and `tell` hand their key unchanged to evosax's `ask`/`tell`, so a run
through `Strategy` follows raw evosax exactly given the same keys and fitness.
"""

import dataclasses
import functools
import hashlib
import inspect
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from evosax.algorithms.base import EvolutionaryAlgorithm

from ._types import (
    Array,
    Fitness,
    FlatGenome,
    FlatPopulation,
    Float,
    Genome,
    IntScalar,
    Metrics,
    Population,
    PRNGKey,
    RawFitness,
    Scalar,
)
from .evaluate import fitness_dtype, fitness_summary, rank_nonfinite_worst
from .genome import GenomeLayout
from .registry import Family, Resolved, family_of, resolve


class StrategyState(eqx.Module):
    """Everything a strategy carries between generations; a pytree.

    Attributes:
        inner: evosax's own state.
        generation: number of completed `tell` calls.
        best_flat: the best genome seen so far, flattened.
        best_fitness: its fitness in evosax's sign (lower is better); +inf until
            a finite fitness has been told.
    """

    inner: Any
    generation: IntScalar
    best_flat: FlatGenome
    best_fitness: Scalar


def _strongly_typed(tree: Any) -> Any:
    """Drop weak types from evosax's state.

    evosax's init and tell leave some leaves weakly typed (Python floats such as
    jnp.inf, schedule outputs) and others not, varying by algorithm and call. A
    state whose type never changes lets a user's jitted loop compile once.
    """
    return jtu.tree_map(lambda x: jnp.asarray(x, x.dtype), tree)


def _standard_promotion(fn: Any) -> Any:
    """Trace evosax under standard dtype promotion (it is not strict-clean)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return fn(*args, **kwargs)

    return wrapper


class _Identity:
    """Compares by identity and keeps its object alive (so no id is reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _value_key(value: Any) -> Any:
    """Plain values compare by value; anything else (optax objects, functions) by
    identity."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, tuple | list):
        return tuple(_value_key(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _value_key(v)) for k, v in value.items()))
    return _Identity(value)


class _Algorithm:
    """An evosax instance, compared by what determines its behaviour.

    evosax uses the `solution` it is built with only for its shape, so two
    instances of one class with equal population size, dimension, dtype and
    constructor arguments behave identically. Comparing by that signature (not by
    object identity) lets equal strategies share compiled programs: building the
    same experiment twice in one process compiles once.
    """

    __slots__ = ("instance", "signature")

    def __init__(self, instance: EvolutionaryAlgorithm, signature: Any):
        self.instance = instance
        self.signature = signature

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Algorithm) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)


@_standard_promotion
def _build_algorithm(
    resolved: Resolved,
    family: Family,
    population_size: int,
    solution: FlatGenome,
    init_scale: float,
    kwargs: dict[str, Any],
    kwargs_keys: dict[str, Any],
) -> _Algorithm:
    """Construct the evosax instance; `kwargs_keys` describe `kwargs` for the
    signature (raw preset values, or the user's objects)."""
    accepted = inspect.signature(resolved.cls.__init__).parameters
    bad = sorted(set(kwargs) - set(accepted) - {"self"})
    if bad:
        raise TypeError(
            f"algorithm_kwargs {bad} are not arguments of {resolved.name} "
            f"({resolved.cls.__name__}); it accepts "
            f"{sorted(set(accepted) - {'self', 'population_size', 'solution'})}"
        )
    kwargs = dict(kwargs)
    kwargs_keys = dict(kwargs_keys)
    sampling = accepted.get("sampling_fn")
    if (
        sampling is not None
        and sampling.default is inspect.Parameter.empty
        and "sampling_fn" not in kwargs
    ):
        # RandomSearch needs a sampler; by default sample around the genome. It
        # bakes the genome's values in, so they join the signature.
        values = np.asarray(solution)
        kwargs_keys["sampling_fn"] = (
            "default",
            hashlib.sha256(values.tobytes()).hexdigest(),
            str(values.dtype),
            init_scale,
        )
        kwargs.setdefault(
            "sampling_fn",
            lambda key: (
                solution + init_scale * jr.normal(key, solution.shape, solution.dtype)
            ),
        )
    evosax_size = population_size
    if family == "stein":
        num_populations = kwargs.get("num_populations")
        if not isinstance(num_populations, int) or num_populations < 1:
            raise ValueError(
                f"{resolved.name} runs several sub-populations: pass "
                "num_populations=<int >= 1> (e.g. Strategy('SV_CMA_ES', genome, 32, "
                f"num_populations=4)); got num_populations={num_populations!r}"
            )
        if population_size % num_populations:
            raise ValueError(
                f"population_size={population_size} must be divisible by "
                f"num_populations={num_populations} for {resolved.name}"
            )
        evosax_size = population_size // num_populations
    signature = (
        resolved.cls,
        evosax_size,
        int(solution.shape[0]),
        str(solution.dtype),
        tuple(sorted((k, _value_key(v)) for k, v in kwargs_keys.items())),
    )
    try:
        instance = resolved.cls(
            population_size=evosax_size, solution=solution, **kwargs
        )
        return _Algorithm(instance, signature)
    except TypeError as err:
        raise TypeError(f"cannot construct {resolved.name}: {err}") from err
    except (AssertionError, ValueError) as err:  # evosax asserts on sizes
        raise ValueError(
            f"population_size={population_size} is rejected by {resolved.name}: "
            f"{err or type(err).__name__}"
        ) from err


@_standard_promotion
def _apply_params(algorithm: EvolutionaryAlgorithm, name: str, overrides: Any) -> Any:
    defaults = algorithm.default_params
    if overrides is None:
        return defaults
    if not isinstance(overrides, dict):
        if type(overrides) is not type(defaults):
            raise TypeError(
                f"params: expected a dict of overrides or a {type(defaults).__name__}; "
                f"got {type(overrides).__name__}"
            )
        return overrides
    fields = {f.name for f in dataclasses.fields(defaults)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ValueError(
            f"params: {bad} are not parameters of {name}; it has {sorted(fields)}"
        )
    return defaults.replace(**overrides)


class Strategy(eqx.Module):
    """An evosax algorithm over populations of one Equinox module type.

    Arguments:
        algorithm: an evosax name (`"CMA_ES"`), an evosax class or instance, a
            preset name (`"snes"`, see `eqxevo.strategies()`), a path to a preset
            TOML file, or `"package.module:Class"` naming a subclass of evosax's
            `EvolutionaryAlgorithm`.
        genome: the initial genome: any Equinox module (or pytree). Its evolvable
            leaves are `eqx.filter(genome, filter_spec)`; the rest is shared.
        population_size: P, a Python int.
        maximize: if True the user's fitness is maximised (evosax minimises; the
            sign flip is internal and every metric is in the user's sign).
        filter_spec: selects the evolvable leaves (default `eqx.is_inexact_array`).
        params: overrides of the algorithm's evosax `Params` (a dict of fields, or
            a whole `Params`); applied over the preset's `[params]`.
        init_scale: standard deviation of the Gaussian around `genome` from which
            population-based algorithms draw their initial population,
            Stein-variational ones their sub-population means, and RandomSearch
            its samples (unless given `sampling_fn`). Default 0.1.
        **algorithm_kwargs: extra constructor arguments for the evosax class
            (e.g. `optimizer=optax.adam(1e-2)`, `num_populations=4`); they
            override a preset's `[kwargs]`.

    Example:
        >>> mlp = eqx.nn.MLP(4, 2, 16, 1, key=jr.key(0))
        >>> strategy = eqxevo.Strategy("snes", mlp, 64, maximize=True)
        >>> state = strategy.init(jr.key(1))
        >>> population, state = strategy.ask(jr.key(2), state)
    """

    _algorithm: _Algorithm = eqx.field(static=True)
    params: Any
    layout: GenomeLayout
    initial_flat: FlatGenome
    population_size: int = eqx.field(static=True)
    maximize: bool = eqx.field(static=True)
    init_scale: float = eqx.field(static=True)
    family: Family = eqx.field(static=True)
    name: str = eqx.field(static=True)

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
        **algorithm_kwargs: Any,
    ):
        if (
            not isinstance(population_size, int)
            or isinstance(population_size, bool)
            or population_size < 1
        ):
            raise ValueError(
                "population_size must be a positive Python int; "
                f"got {population_size!r}"
            )
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0; got {init_scale!r}")
        resolved = resolve(algorithm)
        family = family_of(resolved.cls)
        layout = GenomeLayout.from_genome(genome, filter_spec)
        initial_flat = layout.flatten(genome)
        if resolved.instance is not None:
            instance = resolved.instance
            algorithm = _Algorithm(instance, ("instance", _Identity(instance)))
            if algorithm_kwargs:
                raise TypeError(
                    "algorithm_kwargs cannot be combined with an evosax instance; "
                    "construct the instance with them instead"
                )
            if instance.num_dims != layout.num_params:
                raise ValueError(
                    f"algorithm: the {resolved.name} instance was built for "
                    f"{instance.num_dims} parameters but the genome has "
                    f"{layout.num_params}"
                )
            total = getattr(instance, "total_population_size", instance.population_size)
            if total != population_size:
                raise ValueError(
                    f"population_size={population_size} differs from the instance's "
                    f"population size {total}"
                )
        else:
            kwargs = {**resolved.kwargs, **algorithm_kwargs}
            kwargs_keys = {
                **{k: ("preset", v) for k, v in resolved.raw_kwargs.items()},
                **algorithm_kwargs,
            }
            algorithm = _build_algorithm(
                resolved,
                family,
                population_size,
                initial_flat,
                init_scale,
                kwargs,
                kwargs_keys,
            )
            instance = algorithm.instance
        param_overrides = resolved.params
        if isinstance(params, dict):
            param_overrides = {**param_overrides, **params}
            params = None
        base = _apply_params(instance, resolved.name, param_overrides or None)
        self.params = (
            base if params is None else _apply_params(instance, resolved.name, params)
        )
        self._algorithm = algorithm
        self.layout = layout
        self.initial_flat = initial_flat
        self.population_size = population_size
        self.maximize = bool(maximize)
        self.init_scale = float(init_scale)
        self.family = family
        self.name = resolved.name
        self._check_population_size()

    # -- construction-time checks -----------------------------------------------

    def _check_population_size(self) -> None:
        """Trace one ask (no compilation) to catch sizes the algorithm rejects."""
        try:
            flat_shape = eqx.filter_eval_shape(
                lambda: self._evosax_ask(
                    jr.key(0), self.init(jr.key(0)).inner, jnp.int32(1)
                )[0]
            )
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

    # -- properties ---------------------------------------------------------------

    @property
    def algorithm(self) -> EvolutionaryAlgorithm:
        """The evosax instance."""
        return self._algorithm.instance

    @property
    def filter_spec(self) -> Any:
        """The filter spec that selects evolvable leaves; pass it to `evaluate`."""
        return self.layout.filter_spec

    @property
    def num_params(self) -> int:
        """D, the number of evolvable scalars per genome."""
        return self.layout.num_params

    @property
    def _num_subpopulations(self) -> int:
        return int(getattr(self.algorithm, "num_populations", 1))

    # -- sign ---------------------------------------------------------------------

    def _to_evosax(self, fitness: Array) -> Array:
        return -fitness if self.maximize else fitness

    def _to_user(self, fitness: Array) -> Array:
        return -fitness if self.maximize else fitness

    # -- ask / tell ---------------------------------------------------------------

    @_standard_promotion
    def _evosax_init(self, key: PRNGKey) -> Any:
        if self.family == "distribution":
            return self.algorithm.init(key, self.initial_flat, self.params)
        sample_key, init_key = jr.split(key)
        count = (
            self._num_subpopulations if self.family == "stein" else self.population_size
        )
        noise = jr.normal(
            sample_key, (count, self.layout.num_params), self.layout.dtype
        )
        noise = noise.at[0].set(0.0)
        points = self.initial_flat + self.init_scale * noise
        if self.family == "stein":
            return self.algorithm.init(init_key, points, self.params)
        # A container holding the initial population; evosax's real `init` runs on
        # the first tell, once the population's fitness is known.
        placeholder = jnp.full((count,), jnp.inf, self.layout.dtype)
        return self.algorithm.init(init_key, points, placeholder, self.params)

    @eqx.filter_jit
    def init(self, key: PRNGKey) -> StrategyState:
        """A fresh strategy state.

        Arguments:
            key: handed to evosax's `init` for distribution-based algorithms; for
                population-based and Stein-variational ones it is split into a
                sampling key and evosax's `init` key.
        """
        inner = _strongly_typed(self._evosax_init(key))
        return StrategyState(
            inner=inner,
            generation=jnp.zeros((), jnp.int32),
            best_flat=self.initial_flat,
            best_fitness=jnp.asarray(jnp.inf, fitness_dtype(self.layout.dtype)),
        )

    @_standard_promotion
    def _evosax_ask(
        self, key: PRNGKey, inner: Any, generation: Array
    ) -> tuple[Array, Any]:
        algorithm, params = self.algorithm, self.params
        if self.family != "population":
            return algorithm.ask(key, inner, params)

        def first(inner: Any) -> tuple[Array, Any]:
            return inner.population, inner

        def later(inner: Any) -> tuple[Array, Any]:
            return algorithm.ask(key, inner, params)

        return jax.lax.cond(generation == 0, first, later, inner)

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
        flat, inner = self._evosax_ask(key, state.inner, state.generation)
        inner = _strongly_typed(inner)
        flat = jnp.reshape(flat, (self.population_size, self.layout.num_params))
        population = self.layout.unflatten_population(flat)
        return population, dataclasses.replace(state, inner=inner)

    @_standard_promotion
    def _evosax_tell(
        self, key: PRNGKey, flat: FlatPopulation, fitness: Fitness, state: StrategyState
    ) -> Any:
        algorithm, params, inner = self.algorithm, self.params, state.inner
        if self.family == "distribution":
            return algorithm.tell(key, flat, fitness, inner, params)[0]
        if self.family == "stein":
            grouped = jnp.reshape(
                flat, (self._num_subpopulations, algorithm.population_size, -1)
            )
            return algorithm.tell(key, grouped, fitness, inner, params)[0]

        def first(inner: Any) -> Any:
            return algorithm.init(key, flat, fitness, params)

        def later(inner: Any) -> Any:
            return algorithm.tell(key, flat, fitness, inner, params)[0]

        return jax.lax.cond(state.generation == 0, first, later, inner)

    def _check_fitness(self, fitness: Any) -> Array:
        fitness = jnp.asarray(fitness)
        if fitness.shape != (self.population_size,):
            raise ValueError(
                f"fitness: expected shape ({self.population_size},), one value per "
                f"genome; got shape {fitness.shape}"
            )
        if (
            not (
                jnp.issubdtype(fitness.dtype, jnp.floating)
                or jnp.issubdtype(fitness.dtype, jnp.integer)
            )
            or fitness.dtype == jnp.bool_
        ):
            raise ValueError(
                "fitness: expected a real (floating or integer) dtype; "
                f"got {fitness.dtype}"
            )
        return fitness.astype(fitness_dtype(fitness.dtype))

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
        worse than every finite one (see `rank_nonfinite_worst`) and are counted.

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
        flat = self.layout.flatten_population(population, self.population_size)
        fitness = self._check_fitness(fitness)
        internal = self._to_evosax(fitness)
        reference = None
        if self.family == "population":
            reference = jnp.where(
                state.generation == 0, jnp.inf, state.inner.fitness
            ).astype(internal.dtype)
        clean, nonfinite = rank_nonfinite_worst(internal, reference)
        inner = _strongly_typed(self._evosax_tell(key, flat, clean, state))
        # Archive from the true fitness: a failed genome never becomes the best.
        archive = jnp.where(nonfinite, jnp.inf, internal).astype(
            state.best_fitness.dtype
        )
        index = jnp.argmin(archive)
        improved = archive[index] < state.best_fitness
        new_state = StrategyState(
            inner=inner,
            generation=state.generation + 1,
            best_flat=jnp.where(improved, flat[index], state.best_flat),
            best_fitness=jnp.where(improved, archive[index], state.best_fitness),
        )
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
        if self.family == "population":
            raise TypeError(
                f"{self.name} is population-based and has no search mean; use "
                "strategy.best(state)"
            )
        if self.family == "stein":
            return self.layout.unflatten_population(state.inner.mean)
        return self.layout.unflatten(state.inner.mean)
