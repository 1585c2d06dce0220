"""Population fitness: vmap over genomes, episodes, blocks and devices
(docs/architecture.md, "Evaluation"; the bits: docs/reproducibility.md).
"""

import abc
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh

from ._checks import one_of, optional_positive_int
from ._types import Array, Fitness, Int, Population, PRNGKey, PRNGKeys, PyTree
from .bits import block_width
from .fitness import fitness_dtype
from .sharding import check_divisible, mesh_size, shard_population

Episodes = Literal["shared", "per_genome"]
EPISODES: tuple[str, ...] = ("shared", "per_genome")


def genome_keys(key: PRNGKey, population_size: int) -> PRNGKeys:
    """Per-genome keys of `episodes="per_genome"`: `fold_in(key, i)`, i = 0..P-1."""
    return jax.vmap(jr.fold_in, in_axes=(None, 0))(key, jnp.arange(population_size))


def population_size_of(population: Population, filter_spec: Any) -> int:
    """Leading-axis size shared by the evolvable leaves of `population`."""
    leaves = jtu.tree_leaves(eqx.filter(population, filter_spec))
    sizes = {int(x.shape[0]) if getattr(x, "ndim", 0) else -1 for x in leaves}
    if len(sizes) != 1 or -1 in sizes:
        raise ValueError(
            "population: its evolvable leaves (selected by filter_spec) must all carry "
            "one leading population axis; got leading sizes "
            f"{sorted(sizes) if leaves else 'none (no evolvable leaves)'}"
        )
    return sizes.pop()


class EvalSettings(eqx.Module):
    """How a population is evaluated: over which devices, in which blocks, on
    whose episodes. Results never depend on `mesh` or `batch_size`.

    Attributes:
        mesh: split the population over this mesh's devices
            (`eqxevo.population_mesh()`); None: one device.
        batch_size: evaluate this many genomes at a time (per device) to bound
            the lifetimes' memory, rounded up to a multiple of `BLOCK_ALIGN`;
            None: the whole population at once. On CPU at most
            `CPU_BLOCK_MAX` genomes at a time either way (`block_width`).
        episodes: `"shared"` (every genome gets `fold_in(key, 0)`),
            `"per_genome"` (genome i gets `fold_in(key, i)`) or an integer array
            of P episode ids (genome i gets `fold_in(key, ids[i])`).
    """

    mesh: Mesh | None = eqx.field(static=True, default=None)
    batch_size: int | None = eqx.field(static=True, default=None)
    episodes: Any = "shared"

    def __check_init__(self) -> None:
        if self.mesh is not None and not isinstance(self.mesh, Mesh):
            raise TypeError(
                "mesh must be a jax.sharding.Mesh (eqxevo.population_mesh()) or "
                f"None; got {type(self.mesh).__name__}"
            )
        optional_positive_int("batch_size", self.batch_size, "the whole population")
        if isinstance(self.episodes, str):
            one_of("episodes", self.episodes, EPISODES)

    def episode_ids(self, population_size: int) -> Int[Array, " pop"] | None:
        """The episode id of each genome (None for shared episodes); checks them."""
        if isinstance(self.episodes, str):
            if self.episodes == "shared":
                return None
            return jnp.arange(population_size, dtype=jnp.int32)
        ids = jnp.asarray(self.episodes)
        if ids.shape != (population_size,) or not jnp.issubdtype(
            ids.dtype, jnp.integer
        ):
            raise ValueError(
                f"episodes: an array of episode ids needs shape ({population_size},) "
                f"and an integer dtype; got {ids.dtype}{list(ids.shape)}"
            )
        return ids.astype(jnp.int32)

    def check(self, population_size: int) -> None:
        """Raise a clear error unless a population of this size can be evaluated."""
        check_divisible("population size", population_size, mesh_size(self.mesh))
        self.episode_ids(population_size)


# -- what a fitness carries from generation to generation --------------------------


def initial_carry(fitness_fn: Any) -> Any:
    """What `fitness_fn` carries between generations before the first (its
    `initial_carry()`, e.g. `LifetimeFitness`'s running observation moments);
    None for a fitness that carries nothing."""
    hook = getattr(fitness_fn, "initial_carry", None)
    return None if hook is None else hook()


def with_carry(fitness_fn: Any, carry: Any) -> Any:
    """`fitness_fn` for a generation that starts from `carry` (itself for None)."""
    return fitness_fn if carry is None else fitness_fn.with_carry(carry)


def next_carry(
    fitness_fn: Any, carry: Any, aux: Any, improved: Array
) -> tuple[Any, Any]:
    """`(carry, aux)` after a generation whose population returned `aux` and
    found a new best genome where `improved`: the fitness's `next_carry`, or
    both as they are for None."""
    if carry is None:
        return carry, aux
    return fitness_fn.next_carry(carry, aux, improved)


# -- what a fitness function may return ---------------------------------------------


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float | complex | np.number | np.bool_)


def _split_output(out: Any) -> tuple[Array, Any]:
    """`(fitness, aux)` from what `fitness_fn` returned, checked.

    Python and NumPy numbers in aux become arrays (stacked over the population
    like any array); other non-array leaves (strings, None, ...) are passed
    through unchanged as static values.
    """
    if isinstance(out, tuple):
        if len(out) != 2:
            raise ValueError(
                "fitness_fn must return a scalar or a (scalar, aux) pair; got a tuple "
                f"of length {len(out)}"
            )
        fitness, aux = out
    else:
        fitness, aux = out, None
    if not (isinstance(fitness, jax.Array | np.ndarray) or _is_number(fitness)):
        raise ValueError(
            "fitness_fn must return a real scalar (or (scalar, aux)); got "
            f"{type(fitness).__name__}"
        )
    fitness = jnp.asarray(fitness)
    if fitness.shape != ():
        raise ValueError(
            "fitness_fn must return a scalar fitness per genome (or (scalar, aux)); "
            f"got shape {fitness.shape}"
        )
    if fitness.dtype == jnp.bool_ or not (
        jnp.issubdtype(fitness.dtype, jnp.floating)
        or jnp.issubdtype(fitness.dtype, jnp.integer)
    ):
        raise ValueError(
            f"fitness_fn must return a real number; got dtype {fitness.dtype}"
        )
    aux = jtu.tree_map(lambda x: jnp.asarray(x) if _is_number(x) else x, aux)
    return fitness, aux


# -- evaluation ---------------------------------------------------------------------


def _vmap_in_blocks(one: Callable[..., Any], args: Any, batch_size: int | None) -> Any:
    """`vmap(one)(*args)` over the leading axis, in blocks of `block_width`.

    With `batch_size` set, a `lax.map` (scan) over blocks, each block vmapped, so
    only one block's lifetimes are alive at a time. Blocks are a multiple of
    `BLOCK_ALIGN` genomes; a count that the blocks do not cover exactly is padded
    by repeating the last genome (the extra evaluations are dropped from the
    result).
    """
    count = jtu.tree_leaves(args)[0].shape[0]
    width = block_width(count, batch_size)
    num_blocks = -(-count // width)
    total = num_blocks * width
    # Padding repeats the last genome: real work, thrown away, but every block runs
    # the same vectorised code (BLOCK_ALIGN).
    if total != count:
        take = jnp.minimum(jnp.arange(total), count - 1)
        args = jtu.tree_map(lambda x: x[take], args)
    vmapped = eqx.filter_vmap(lambda a: one(*a))
    if num_blocks == 1:
        out = vmapped(args)
    else:
        blocks = jtu.tree_map(
            lambda x: jnp.reshape(x, (num_blocks, width, *x.shape[1:])), args
        )
        out = jtu.tree_map(
            lambda y: jnp.reshape(y, (total, *y.shape[2:])),
            jax.lax.map(vmapped, blocks),
        )
    if total != count:
        out = jtu.tree_map(lambda y: y[:count], out)
    return out


def draws_apart(fitness_fn: Any) -> bool:
    """Whether `fitness_fn` computes every random draw it makes from its key as a
    computation of its own (its `draws_apart` attribute; `eqxevo.LifetimeFitness`
    on an environment with `sample_noise`), so a shared episode can be drawn
    once for the population. Such a fitness may offer `shared_episode()`, the
    version of itself that `evaluate` then uses for shared episodes
    (`LifetimeFitness` draws blocks of steps ahead)."""
    return getattr(fitness_fn, "draws_apart", False) is True


def evaluate_genomes(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    evolvable: Any,
    static: Any,
    ids: Int[Array, " n"] | None,
    settings: EvalSettings,
) -> tuple[Array, Any]:
    """Evaluate the genomes whose evolvable parts are `evolvable` (leading axis n).

    The building block of `evaluate` and of population-level evaluations.
    Genome j gets `fold_in(key, ids[j])` (`ids` None: shared episodes, id 0),
    wherever it runs; `settings` gives the devices and the block size.
    """
    # Arrays reach the devices as explicit shard_map operands (replicated), the
    # rest (functions, configuration) is closed over. This includes arrays held
    # by the fitness function itself (an eqx.Module holding env params, say).
    static_arrays, static_other = eqx.partition(static, eqx.is_array)
    fn_arrays, fn_other = eqx.partition(fitness_fn, eqx.is_array)
    count = jtu.tree_leaves(evolvable)[0].shape[0]
    # Shared episodes, drawn once: a fitness whose every draw from its key is a
    # computation of its own (`draws_apart`) gets the episode key unbatched, so
    # the episode's noise is computed once for the population, and its bits
    # cannot depend on the batched code that reads them. Any other fitness
    # derives the shared key inside the vmap (docs/reproducibility.md, fix 5).
    draw_once = ids is None and draws_apart(fitness_fn)
    if ids is None:
        ids = jnp.zeros((count,), jnp.int32)

    def local(batched: Any, shared: Any) -> tuple[Array, Any]:
        genomes, genome_ids = batched
        key, static_arrays, fn_arrays = shared
        static = eqx.combine(static_arrays, static_other)
        fn = eqx.combine(fn_arrays, fn_other)
        shared_key = jr.fold_in(key, 0) if draw_once else None
        if draw_once and hasattr(fn, "shared_episode"):
            fn = fn.shared_episode()  # e.g. draws blocks of steps ahead

        def one(genome_evolvable: Any, episode: Array) -> tuple[Array, Any]:
            genome = eqx.combine(genome_evolvable, static)
            key_j = jr.fold_in(key, episode) if shared_key is None else shared_key
            return _split_output(fn(genome, key_j))

        return _vmap_in_blocks(one, (genomes, genome_ids), settings.batch_size)

    # Each device evaluates its slice of the genomes; the result is gathered whole
    # on every device, so selection (ask/tell) needs no communication.
    fitness, aux = shard_population(local, settings.mesh)(
        (evolvable, ids), (key, static_arrays, fn_arrays)
    )
    return fitness.astype(fitness_dtype(fitness.dtype)), aux


class AbstractPopulationFitness(eqx.Module):
    """A fitness that evaluates a whole population at once (e.g. `MultiFidelity`).

    Pass one wherever a fitness function goes (`evaluate`, `evolve`); instead of
    mapping it over genomes, `evaluate` calls `evaluate_population`.
    """

    @abc.abstractmethod
    def evaluate_population(
        self,
        key: PRNGKey,
        evolvable: Any,
        static: Any,
        ids: Int[Array, " pop"] | None,
        settings: EvalSettings,
        *,
        maximize: bool,
    ) -> tuple[Fitness, PyTree]:
        """`(fitness, aux)` of a population (see `evaluate_genomes` for the args)."""

    def check(self, population_size: int, settings: EvalSettings) -> None:
        """Raise a clear error if this evaluation cannot run on such a population."""
        del population_size, settings

    def agent_steps(self, population_size: int) -> int | None:
        """Agent-steps one generation spends, when known (for the history)."""
        del population_size
        return None

    def history_fields(self, population_size: int) -> dict[str, int]:
        """Per-generation numbers `evolve` adds to its history (as int64 arrays
        shaped like `history["generation"]`); none by default."""
        del population_size
        return {}

    def heldout_fitness(self) -> Any:
        """The fitness of one held-out lifetime (`eqxevo run`'s held-out
        evaluation); this fitness itself by default."""
        return self


def evaluate(
    key: PRNGKey,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    population: Population,
    *,
    filter_spec: Any = eqx.is_inexact_array,
    maximize: bool | None = None,
    mesh: Mesh | None = None,
    batch_size: int | None = None,
    episodes: Any = "shared",
) -> tuple[Fitness, PyTree]:
    """Evaluate every genome of a population.

    Arguments:
        key: the generation's evaluation key (see `episodes`).
        fitness_fn: `fitness_fn(genome, key)` returning a scalar, or a pair
            `(scalar, aux)` where `aux` is any pytree of small per-genome summaries;
            or an `AbstractPopulationFitness` such as `eqxevo.MultiFidelity`.
        population: the genome type with a leading axis P on its evolvable leaves,
            as returned by `Strategy.ask`.
        filter_spec: the filter the strategy was built with (which leaves carry
            the population axis). `Strategy.filter_spec` holds it.
        maximize: the fitness sign (`Strategy.maximize`); needed by a
            `MultiFidelity` to know which genomes are best, unused otherwise.
        mesh, batch_size, episodes: how to evaluate (see `EvalSettings`); P must
            be a multiple of the mesh's size, not of `batch_size`. The result is
            whole (replicated) on every device.

    Returns:
        `(fitness, aux)`: fitness `Float[Array, "P"]` (float32 or wider) and the
        stacked aux (or None when `fitness_fn` returns a scalar). Numbers in aux
        become arrays; other non-array aux leaves (strings, ...) pass through.

    Example:
        >>> fitness, aux = eqxevo.evaluate(key, f, population)
        >>> fitness, aux = eqxevo.evaluate(key, f, population, batch_size=32)
    """
    settings = EvalSettings(mesh=mesh, batch_size=batch_size, episodes=episodes)
    return evaluate_with(
        key,
        fitness_fn,
        population,
        settings,
        filter_spec=filter_spec,
        maximize=maximize,
    )


@eqx.filter_jit
def evaluate_with(
    key: PRNGKey,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    population: Population,
    settings: EvalSettings,
    *,
    filter_spec: Any = eqx.is_inexact_array,
    maximize: bool | None = None,
) -> tuple[Fitness, PyTree]:
    """`evaluate` with its settings as one object (what `evolve` and held-out
    evaluation call)."""
    evolvable, static = eqx.partition(population, filter_spec)
    size = population_size_of(population, filter_spec)
    settings.check(size)
    ids = settings.episode_ids(size)
    if isinstance(fitness_fn, AbstractPopulationFitness):
        if maximize is None:
            raise ValueError(
                f"maximize: a {type(fitness_fn).__name__} evaluation must know which "
                "fitness is better; pass maximize=True or False (strategy.maximize); "
                "got None"
            )
        fitness_fn.check(size, settings)
        return fitness_fn.evaluate_population(
            key, evolvable, static, ids, settings, maximize=maximize
        )
    if not callable(fitness_fn):
        raise TypeError(
            "fitness_fn must be callable as fitness_fn(genome, key); got "
            f"{type(fitness_fn).__name__}"
        )
    return evaluate_genomes(key, fitness_fn, evolvable, static, ids, settings)


__all__ = [
    "EPISODES",
    "AbstractPopulationFitness",
    "Episodes",
    "EvalSettings",
    "draws_apart",
    "evaluate",
    "evaluate_genomes",
    "evaluate_with",
    "genome_keys",
    "initial_carry",
    "next_carry",
    "population_size_of",
    "with_carry",
]
