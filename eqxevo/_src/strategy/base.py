"""What the evosax families share: the strategy state and the family interface."""

import abc
import copy
import functools
from typing import Any, ClassVar, Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

from .._types import (
    Array,
    Fitness,
    FlatGenome,
    FlatPopulation,
    IntScalar,
    PRNGKey,
    Scalar,
)


@runtime_checkable
class StrategyView(Protocol):
    """What a family reads of its strategy; `eqxevo.Strategy` is one.

    (A protocol rather than the class keeps the families below `strategy.py`.)
    """

    algorithm: Any  # the evosax instance
    params: Any  # its evosax `Params`
    layout: Any  # the `GenomeLayout`
    initial_flat: Any  # the user's genome, flat
    population_size: int
    init_scale: float
    name: str


class StrategyState(eqx.Module):
    """Everything a strategy carries between generations; a pytree.

    Attributes:
        inner: evosax's own state.
        generation: number of completed `tell` calls.
        best_flat: the best genome seen so far, flattened.
        best_fitness: its fitness in evosax's sign (lower is better); +inf until
            a finite fitness has been told.
        made_by: the evosax algorithm and population size that made the state
            (static), so a state is never handed to another strategy whose
            state happens to have the same shapes.
        evaluation: what the evaluation carries from generation to generation
            (the running observation moments of a fitness with observation
            normalisation: `LifetimeFitness.initial_carry`); None for most.
            `tell` keeps it; `evolve` updates it.
    """

    inner: Any
    generation: IntScalar
    best_flat: FlatGenome
    best_fitness: Scalar
    # Static, so it is part of the state's type: two strategies with equal
    # shapes still cannot swap states.
    made_by: tuple[str, int] = eqx.field(static=True, default=("", 0))
    evaluation: Any = None


def with_evaluation(state: StrategyState, evaluation: Any) -> StrategyState:
    """`state` with `evaluation` replaced; also for a state batched over seeds or
    runs (whose leaves do not match the field annotations `__init__` checks)."""
    new = copy.copy(state)
    object.__setattr__(new, "evaluation", evaluation)
    return new


def strongly_typed(tree: Any) -> Any:
    """Drop weak types from evosax's state.

    evosax's init and tell leave some leaves weakly typed (Python floats such as
    jnp.inf, schedule outputs) and others not, varying by algorithm and call. A
    state whose type never changes lets a user's jitted loop compile once.
    """
    # An explicit dtype makes asarray return a strongly typed array.
    return jtu.tree_map(lambda x: jnp.asarray(x, x.dtype), tree)


def standard_promotion(fn: Any) -> Any:
    """Trace evosax under standard dtype promotion (it is not strict-clean)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jax.numpy_dtype_promotion("standard"):
            return fn(*args, **kwargs)

    return wrapper


class AbstractFamily(eqx.Module):
    """How one evosax family is initialised, asked and told, behind `Strategy`.

    Members hold no fields; every method receives the `Strategy`, whose
    `algorithm`, `params`, `layout`, `initial_flat`, `population_size` and
    `init_scale` they read.
    """

    name: ClassVar[str]

    def evosax_size(
        self, algorithm_name: str, population_size: int, kwargs: Any
    ) -> int:
        """The `population_size` evosax's constructor gets (P unless the family
        splits the population)."""
        del algorithm_name, kwargs
        return population_size

    @abc.abstractmethod
    def init(self, strategy: StrategyView, key: PRNGKey) -> Any:
        """evosax's state before the first generation."""

    def ask(
        self, strategy: StrategyView, key: PRNGKey, inner: Any, generation: Array
    ) -> tuple[Array, Any]:
        """`(flat population, evosax state)`; evosax's own `ask` by default."""
        del generation
        return strategy.algorithm.ask(key, inner, strategy.params)

    def tell(
        self,
        strategy: StrategyView,
        key: PRNGKey,
        flat: FlatPopulation,
        fitness: Fitness,
        inner: Any,
        generation: Array,
    ) -> Any:
        """evosax's state after being told `fitness` (evosax's sign, all finite);
        evosax's own `tell` of the population as `group` shapes it by default."""
        del generation
        grouped = self.group(strategy, flat)
        # [0]: evosax's tell returns (state, metrics); Strategy makes its own.
        return strategy.algorithm.tell(key, grouped, fitness, inner, strategy.params)[0]

    def group(self, strategy: StrategyView, flat: FlatPopulation) -> Array:
        """The population in the shape evosax's `tell` takes (as asked by default)."""
        del strategy
        return flat

    def reference(
        self, strategy: StrategyView, inner: Any, generation: Array
    ) -> Array | None:
        """Fitness (raw, evosax's sign) that a non-finite genome must rank below,
        beside the generation's own; None when the generation alone counts."""
        del strategy, inner, generation
        return None

    def mean(self, strategy: StrategyView, inner: Any) -> Array:
        """The search mean(s), flat (evosax's `state.mean` by default)."""
        del strategy
        return inner.mean

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        """Episode id per genome for `episodes="per_genome"`: genome i plays
        episode ids[i]; genomes that must be compared on equal terms (mirrored
        pairs) share one. Distinct ids by default."""
        return np.arange(strategy.population_size, dtype=np.int32)


def sample_around(strategy: StrategyView, key: PRNGKey, count: int) -> Array:
    """`count` flat genomes: the initial genome, then the initial genome plus
    `init_scale * N(0, I)` (population-based starts, Stein-variational means)."""
    noise = jr.normal(key, (count, strategy.layout.num_params), strategy.layout.dtype)
    noise = noise.at[0].set(0.0)
    return strategy.initial_flat + strategy.init_scale * noise


def state_signature(state: Any) -> tuple[Any, ...]:
    """The structure, shapes and dtypes of a state (hashable), to check a state
    against the strategy it is handed to."""
    # Plain ints and dtype names: hashable, and comparable across processes.
    leaves, treedef = jtu.tree_flatten(state)
    return (
        treedef,
        tuple((tuple(int(d) for d in x.shape), str(x.dtype)) for x in leaves),
    )


def told(
    state: StrategyState,
    inner: Any,
    flat: FlatPopulation,
    internal: Fitness,
    nonfinite: Any,
) -> StrategyState:
    """The state after a `tell`: `inner` as the algorithm's state, one more
    generation, and the best genome kept from the true fitness (`internal`, in
    evosax's sign: lower is better), so a failed genome never becomes the best."""
    archive = jnp.where(nonfinite, jnp.inf, internal).astype(state.best_fitness.dtype)
    index = jnp.argmin(archive)
    improved = archive[index] < state.best_fitness
    return StrategyState(
        inner=inner,
        generation=state.generation + 1,
        best_flat=jnp.where(improved, flat[index], state.best_flat),
        best_fitness=jnp.where(improved, archive[index], state.best_fitness),
        made_by=state.made_by,
        evaluation=state.evaluation,
    )


def check_state(
    state: Any,
    owner: Any,
    made_by: tuple[str, int],
    signature: tuple[Any, ...],
    batch_shape: tuple[int, ...] = (),
) -> None:
    """Raise a clear error unless `state` was made by a strategy like `owner`
    (whose `name`, `population_size` and `num_params` the message names):
    made by `made_by`, of `signature` (`state_signature`), with leading axes
    `batch_shape` on every leaf. The evaluation's carry is not checked here."""
    if not isinstance(state, StrategyState):
        raise TypeError(
            f"state: expected a StrategyState (from strategy.init or "
            f"EvolveResult.state); got {type(state).__name__}"
        )
    treedef, leaves = signature
    # What the evaluation carries is the fitness's to check (`evolve`).
    state = with_evaluation(state, None)
    got_treedef, got_leaves = state_signature(state)
    problem = None
    # Cheapest and most telling first: who made it, then its structure,
    # then the first leaf of another shape or dtype.
    if state.made_by != made_by:
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
            f"state: it was not made by this strategy ({owner.name}, "
            f"population_size={owner.population_size}, "
            f"{owner.num_params} parameters{seeds}): {problem}. Hand "
            "over a state of this same strategy."
        )


__all__ = [
    "AbstractFamily",
    "StrategyState",
    "StrategyView",
    "check_state",
    "sample_around",
    "standard_promotion",
    "state_signature",
    "strongly_typed",
    "told",
    "with_evaluation",
]
