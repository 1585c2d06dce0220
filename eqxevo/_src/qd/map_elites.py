"""`MapElites`: an archive and the emitters that fill it, over populations of an
Equinox module, with the ask/tell of `Strategy`, so that `evolve` runs it (its
chunks, checkpoints, sharding and studies). The first generation samples around
the user's genome; every later one concatenates the emitters' batches, inserts
the evaluated batch (fitness and descriptor) and tells each emitter what its own
slice did. docs/qd.md, "The QD loop".
"""

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar, TypeAlias

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import positive_number
from .._types import Array, Float, Genome, Int, Metrics, Population, PRNGKey, RawFitness
from ..fitness import check_fitness, fitness_dtype, fitness_summary
from ..genome import GenomeLayout
from ..memory import available_memory, format_bytes
from ..strategy.base import StrategyState, check_state, state_signature, told
from ..strategy.strategy import Strategy
from .archive import Archive, ArchiveState
from .emitters import AbstractEmitter, check_emitters

FAMILY = "qd"
"""`MapElites.family`: what `evolve` reads to hand `tell` the descriptors."""


class QDState(eqx.Module):
    """What MAP-Elites carries between generations (`StrategyState.inner`).

    Attributes:
        archive: the archive's contents.
        emitters: each emitter's state, in the order of `MapElites.emitters`.
    """

    archive: ArchiveState
    emitters: tuple[Any, ...]


class MapElites(eqx.Module):
    """MAP-Elites over populations of one Equinox module type: an archive of
    elites and one or more emitters. `evolve` runs it as it runs a `Strategy`;
    the fitness function returns `(fitness, descriptor)` (or `(fitness,
    {"descriptor": ..., ...})`), fitness maximised.

    Arguments:
        genome: the initial genome (any Equinox module or pytree); its evolvable
            leaves are `eqx.filter(genome, filter_spec)`.
        archive: where the elites live (`Archive.grid`, `Archive.cvt`, ...).
        emitters: one emitter or several; the population is their batches one
            after another (P = the sum of their batch sizes).
        filter_spec: selects the evolvable leaves (default `eqx.is_inexact_array`).
        init_scale: the first generation is P samples `genome + init_scale *
            N(0, I)` (ES emitters start at the genome itself).
        maximize: must be True: an archive keeps the highest fitness (negate a
            cost).
        descriptor: where the descriptor is in what the fitness function
            returns beside its fitness (its aux): None, the aux itself or its
            `"descriptor"` entry; or the names of scalar aux entries, one per
            descriptor dimension (`("mean_intake", "mean_homeostasis")` for a
            `LifetimeFitness`, whose aux averages the environment's info).

    Example:
        >>> archive = Archive.grid((32, 32), 0.0, 1.0)
        >>> strategy = MapElites(genome, archive, IsoLineEmitter(256))
        >>> result = eqxevo.evolve(key, strategy, fitness_fn, num_generations=200)
    """

    archive: Archive
    emitters: tuple[AbstractEmitter, ...]
    layout: GenomeLayout
    initial_flat: Float[Array, " dim"]
    population_size: int = eqx.field(static=True)
    init_scale: float = eqx.field(static=True)
    name: str = eqx.field(static=True)
    descriptor: tuple[str, ...] | None = eqx.field(static=True)
    _state_signature: Any = eqx.field(static=True)

    def __init__(
        self,
        genome: Genome,
        archive: Archive,
        emitters: AbstractEmitter | Sequence[AbstractEmitter],
        *,
        filter_spec: Any = eqx.is_inexact_array,
        init_scale: float = 0.1,
        maximize: bool = True,
        descriptor: Sequence[str] | None = None,
    ):
        if not isinstance(archive, Archive):
            raise ValueError(
                f"archive must be an Archive (Archive.grid, Archive.cvt); got "
                f"{type(archive).__name__}"
            )
        if maximize is not True:
            raise ValueError(
                "MapElites keeps the highest fitness in each cell: maximize must be "
                "True (return minus a cost as the fitness)"
            )
        self.layout = GenomeLayout.from_genome(genome, filter_spec, None)
        self.initial_flat = self.layout.flatten(genome)
        _check_fits(archive, self.initial_flat)
        self.archive = archive
        self.emitters = tuple(
            e.bind(self.initial_flat) for e in check_emitters(emitters)
        )
        self.population_size = sum(e.batch_size for e in self.emitters)
        self.init_scale = positive_number("init_scale", init_scale)
        if descriptor is not None:
            descriptor = tuple(descriptor)
            if len(descriptor) != archive.descriptor_size or not all(
                isinstance(k, str) for k in descriptor
            ):
                raise ValueError(
                    f"descriptor must name {archive.descriptor_size} aux entries, "
                    f"one per dimension of the archive; got {descriptor!r}"
                )
        self.descriptor = descriptor
        self.name = "MAP-Elites(" + ", ".join(_named(e) for e in self.emitters) + ")"
        self._state_signature = None
        self._state_signature = state_signature(
            eqx.filter_eval_shape(self._init, jr.key(0))
        )

    # -- what `evolve` reads --------------------------------------------------------

    family: ClassVar[str] = FAMILY
    maximize: ClassVar[bool] = True
    has_mean: ClassVar[bool] = False

    @property
    def filter_spec(self) -> Any:
        return self.layout.filter_spec

    @property
    def num_params(self) -> int:
        return self.layout.num_params

    @property
    def episode_ids(self) -> Int[Array, " pop"]:
        """Episode id per genome for per-genome episodes: one each."""
        return jnp.arange(self.population_size, dtype=jnp.int32)

    @property
    def _made_by(self) -> tuple[str, int]:
        return ("MapElites", self.population_size)

    def check_state(self, state: Any, batch_shape: tuple[int, ...] = ()) -> None:
        """Raise a clear error unless `state` was made by a MapElites like this."""
        check_state(state, self, self._made_by, self._state_signature, batch_shape)

    def descriptors(self, aux: Any) -> Array:
        """The population's descriptors in what the fitness function returned
        beside its fitness (`descriptor`)."""
        if self.descriptor is not None and isinstance(aux, dict):
            missing = [k for k in self.descriptor if k not in aux]
            if not missing:
                return jnp.stack([aux[k] for k in self.descriptor], axis=-1)
            raise ValueError(
                f"descriptor names {missing}, which the fitness function's aux "
                f"lacks; it has {sorted(aux)}"
            )
        if self.descriptor is None and isinstance(aux, dict) and "descriptor" in aux:
            return aux["descriptor"]
        if self.descriptor is None and isinstance(aux, jax.Array):
            return aux
        raise ValueError(
            "MAP-Elites needs a descriptor per genome: the fitness function returns "
            "(fitness, descriptor) or (fitness, {'descriptor': descriptor, ...}), "
            "or MapElites(descriptor=...) names aux entries; got aux of type "
            f"{type(aux).__name__}"
            + (f" with keys {sorted(aux)}" if isinstance(aux, dict) else "")
        )

    def _slices(self) -> list[slice]:
        bounds, start = [], 0
        for emitter in self.emitters:
            bounds.append(slice(start, start + emitter.batch_size))
            start += emitter.batch_size
        return bounds

    # -- init / ask / tell ----------------------------------------------------------

    def _init(self, key: PRNGKey) -> StrategyState:
        keys = jr.split(key, len(self.emitters))
        flat = self.initial_flat
        inner = QDState(
            archive=self.archive.init(flat.size, flat.dtype),
            emitters=tuple(
                e.init(k, flat) for e, k in zip(self.emitters, keys, strict=True)
            ),
        )
        return StrategyState(
            inner=inner,
            generation=jnp.zeros((), jnp.int32),
            best_flat=flat,
            best_fitness=jnp.asarray(jnp.inf, fitness_dtype(flat.dtype)),
            made_by=self._made_by,
        )

    @eqx.filter_jit
    def init(self, key: PRNGKey) -> StrategyState:
        """An empty archive and each emitter's first state."""
        return self._init(key)

    @eqx.filter_jit
    def ask(
        self, key: PRNGKey, state: StrategyState
    ) -> tuple[Population, StrategyState]:
        """The population (the genome type, a leading axis P) and the state the
        emitters moved on to. Generation 0: samples around the genome."""
        self.check_state(state)
        shape = (self.population_size, self.num_params)
        dtype = self.initial_flat.dtype

        def first(key: PRNGKey, inner: QDState) -> Any:
            noise = jr.normal(key, shape, dtype)
            return self.initial_flat + self.init_scale * noise, inner

        def emit(key: PRNGKey, inner: QDState) -> Any:
            keys = jr.split(key, len(self.emitters))
            parts, states = [], []
            for emitter, k, s in zip(self.emitters, keys, inner.emitters, strict=True):
                candidates, s = emitter.ask(k, s, inner.archive)
                parts.append(candidates.astype(dtype))
                states.append(s)
            return jnp.concatenate(parts, axis=0), QDState(inner.archive, tuple(states))

        flat, inner = jax.lax.cond(state.generation == 0, first, emit, key, state.inner)
        population = self.layout.unflatten_population(flat)
        return population, dataclasses.replace(state, inner=inner)

    @eqx.filter_jit
    def tell(
        self,
        key: PRNGKey,
        population: Population,
        fitness: RawFitness,
        state: StrategyState,
        descriptors: Array,
    ) -> tuple[StrategyState, Metrics]:
        """Insert the evaluated population and tell each emitter what its slice
        did (generation 0's samples are no emitter's: only inserted).

        Returns `(state, metrics)`: `Strategy.tell`'s metrics (`best`, `mean`,
        ..., `best_so_far`) and the archive's `qd_score`, `coverage` and
        `max_fitness`, and this generation's `num_added`, `num_new_cells`,
        `num_outside` (descriptors outside the box) and `num_invalid`
        (non-finite fitness or descriptor).
        """
        self.check_state(state)
        flat = self.layout.flatten_population(population, self.population_size)
        fitness = check_fitness(fitness, self.population_size)
        descriptors = jnp.asarray(descriptors)
        self.archive.check_descriptors(descriptors, self.population_size)
        inner: QDState = state.inner
        # Generation 0's samples all may enter; later, what each emitter allows.
        allowed = np.concatenate([e.insertable() for e in self.emitters])
        insertable = (state.generation == 0) | jnp.asarray(allowed)
        after, info = self.archive.insert(
            inner.archive, flat, fitness, descriptors, insertable
        )

        def tell_emitters(key: PRNGKey, inner: QDState) -> tuple[Any, ...]:
            keys = jr.split(key, len(self.emitters))
            new = []
            for emitter, k, s, part in zip(
                self.emitters, keys, inner.emitters, self._slices(), strict=True
            ):
                new.append(
                    emitter.tell(
                        k,
                        flat[part],
                        fitness[part],
                        descriptors[part],
                        jax.tree.map(lambda a, part=part: a[part], info),
                        s,
                        inner.archive,
                        after,
                    )
                )
            return tuple(new)

        emitters = jax.lax.cond(
            state.generation == 0, lambda _, s: s.emitters, tell_emitters, key, inner
        )
        nonfinite = ~jnp.isfinite(fitness)
        inner = QDState(archive=after, emitters=emitters)
        new_state = told(state, inner, flat, -fitness, nonfinite)
        metrics = fitness_summary(fitness, nonfinite, True)
        metrics["best_so_far"] = -new_state.best_fitness
        metrics.update(self.archive.metrics(after))
        metrics["num_added"] = jnp.sum(info.added)
        metrics["num_new_cells"] = jnp.sum(info.new_cell)
        metrics["num_outside"] = jnp.sum(info.outside)
        metrics["num_invalid"] = jnp.sum(info.invalid)
        return new_state, metrics

    # -- read-outs ------------------------------------------------------------------

    def best(self, state: StrategyState) -> Genome:
        """The best genome told so far (the initial genome before any tell)."""
        return self.layout.unflatten(state.best_flat)

    def best_fitness(self, state: StrategyState) -> Array:
        """The best fitness told so far (-inf before any tell)."""
        return -state.best_fitness

    def mean(self, state: StrategyState) -> Genome:
        raise TypeError("MAP-Elites has no search mean; see MapElites.elites")

    def elites(self, state: StrategyState) -> tuple[Population, Array, Array]:
        """`(genomes, fitness, filled)`: every cell's elite (the genome type, a
        leading axis of cells; zeros where empty), its fitness (-inf where
        empty) and whether the cell holds one."""
        archive: ArchiveState = state.inner.archive
        genomes = self.layout.unflatten_population(archive.genomes)
        return genomes, archive.fitness, archive.filled


def _check_fits(archive: Archive, initial: Array) -> None:
    """Refuse, with the estimate, an archive larger than the memory available
    (before anything is allocated or compiled)."""
    needed = archive.nbytes(initial.size, initial.dtype)
    available, where = available_memory()
    if available is not None and needed > available:
        item = jnp.dtype(initial.dtype).itemsize
        raise ValueError(
            f"the archive needs about {format_bytes(needed)} ({archive.num_cells} "
            f"cells x ({initial.size} genome values + "
            f"{archive.descriptor_size} descriptor values + 1 fitness) x {item} "
            f"bytes) but {where} has {format_bytes(available)} available: use "
            "fewer cells (a coarser grid, fewer CVT centroids) or a smaller genome"
        )


def _named(emitter: AbstractEmitter) -> str:
    kind = type(emitter).__name__.removesuffix("Emitter")
    algorithm = getattr(emitter, "algorithm", None)
    if isinstance(algorithm, str):
        kind = algorithm
    return f"{kind} x{emitter.batch_size}"


AnyStrategy: TypeAlias = Strategy | MapElites
"""What `evolve` runs: an evosax `Strategy` or `MapElites`."""


__all__ = ["FAMILY", "AnyStrategy", "MapElites", "QDState"]
