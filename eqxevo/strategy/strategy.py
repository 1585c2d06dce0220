"""Strategy: evosax ask/tell over populations of Equinox modules, on device.

A `Strategy` wraps one evosax algorithm around a genome. evosax searches over one
flat vector per genome; `Strategy` converts between those vectors and the user's
own module type (see `genome.GenomeLayout`), keeps the user's sign (`maximize`),
keeps non-finite fitness out of the update, and tracks the best genome.

Every evosax family works through the same calls; what differs between them
(how evosax's state is made, asked and told) lives in one module per family:
`distribution.py`, `population.py`, `stein.py`.

`ask` and `tell` hand their key unchanged to evosax's `ask`/`tell`, so a run
through `Strategy` follows raw evosax exactly given the same keys and fitness.
"""

import dataclasses
import hashlib
import inspect
import math
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

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
from ..fitness import fitness_dtype, fitness_summary, rank_nonfinite_worst
from ..genome import GenomeLayout
from ..registry import Family, Resolved, family_of, resolve
from .base import (
    AbstractFamily,
    StrategyState,
    standard_promotion,
    state_signature,
    strongly_typed,
)
from .distribution import DistributionFamily
from .population import PopulationFamily
from .stein import SteinFamily

if TYPE_CHECKING:
    from evosax.algorithms.base import EvolutionaryAlgorithm

FAMILIES: dict[str, AbstractFamily] = {
    "distribution": DistributionFamily(),
    "population": PopulationFamily(),
    "stein": SteinFamily(),
}
"""The behaviour of each evosax family, by `registry.family_of` name."""


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

    def __init__(self, instance: "EvolutionaryAlgorithm", signature: Any):
        self.instance = instance
        self.signature = signature

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Algorithm) and other.signature == self.signature

    def __hash__(self) -> int:
        return hash(self.signature)


@standard_promotion
def _build_algorithm(
    resolved: Resolved,
    family: AbstractFamily,
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
    evosax_size = family.evosax_size(resolved.name, population_size, kwargs)
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


@standard_promotion
def _apply_params(algorithm: "EvolutionaryAlgorithm", name: str, overrides: Any) -> Any:
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


def _check_params(name: str, params: Any) -> None:
    """Raise a clear error for a NaN parameter, or a `std_init` not finite and > 0."""
    for field in dataclasses.fields(params):
        value = getattr(params, field.name)
        array = np.asarray(value)
        if array.dtype.kind not in "fi" or array.size == 0:
            continue
        if array.dtype.kind == "f" and np.isnan(array).any():
            raise ValueError(f"params.{field.name} = {value!r} for {name} is NaN")
        if field.name == "std_init" and not (np.isfinite(array) & (array > 0)).all():
            raise ValueError(
                f"params.{field.name} = {value!r} for {name} must be finite and "
                "> 0 (a standard deviation)"
            )


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
        if (
            not isinstance(init_scale, int | float)
            or isinstance(init_scale, bool)
            or not math.isfinite(init_scale)
            or init_scale <= 0
        ):
            raise ValueError(
                f"init_scale must be a finite number > 0; got {init_scale!r}"
            )
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
                FAMILIES[family],
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
        _check_params(resolved.name, self.params)
        self._algorithm = algorithm
        self.layout = layout
        self.initial_flat = initial_flat
        self.population_size = population_size
        self.maximize = bool(maximize)
        self.init_scale = float(init_scale)
        self.family = family
        self.name = resolved.name
        self._state_signature = None
        self._state_signature = self._check_population_size()

    # -- construction-time checks -----------------------------------------------

    def _check_population_size(self) -> Any:
        """Trace init and one ask (no compilation) to catch sizes the algorithm
        rejects; returns the state's signature."""
        try:
            state = eqx.filter_eval_shape(self._init, jr.key(0))

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
        if not isinstance(state, StrategyState):
            raise TypeError(
                f"state: expected a StrategyState (from strategy.init or "
                f"EvolveResult.state); got {type(state).__name__}"
            )
        treedef, leaves = self._state_signature
        got_treedef, got_leaves = state_signature(state)
        problem = None
        if state.made_by != self._made_by:
            name, size = state.made_by
            problem = f"it was made by {name} with population_size={size}"
        elif got_treedef != treedef:
            problem = "its structure differs (another algorithm?)"
        else:
            paths = [jtu.keystr(p) for p, _ in jtu.tree_flatten_with_path(state)[0]]
            for path, (shape, dtype), (got_shape, got_dtype) in zip(
                paths, leaves, got_leaves, strict=True
            ):
                want = (*batch_shape, *shape)
                if got_shape != want or got_dtype != dtype:
                    problem = (
                        f"state{path} is {got_dtype}{list(got_shape)}, expected "
                        f"{dtype}{list(want)}"
                    )
                    break
        if problem is not None:
            seeds = f", {batch_shape[0]} seeds" if batch_shape else ""
            raise ValueError(
                f"state: it was not made by this strategy ({self.name}, "
                f"population_size={self.population_size}, "
                f"{self.layout.num_params} parameters{seeds}): {problem}. Hand "
                "over a state of this same strategy."
            )

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

    # -- sign ---------------------------------------------------------------------

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
        fitness = self._check_fitness(fitness)
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
            made_by=state.made_by,
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
        flat = self._behaviour.mean(self, state.inner)
        if flat.ndim == 2:
            return self.layout.unflatten_population(flat)
        return self.layout.unflatten(flat)

    @property
    def has_mean(self) -> bool:
        """Whether the algorithm has a search mean (`mean` works)."""
        return self.family != "population"


__all__ = ["FAMILIES", "Strategy", "StrategyState"]
