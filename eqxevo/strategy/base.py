"""What the three evosax families share: the strategy state and the family interface.

`Strategy` (in `strategy.py`) is one class for every evosax algorithm; what
differs between the families (distribution-based, population-based,
Stein-variational) is how evosax's state is made, asked and told. Each family is
an `AbstractFamily` in its own module (`distribution.py`, `population.py`,
`stein.py`), and `Strategy` delegates those few steps to it.
"""

import abc
import functools
from typing import Any, ClassVar, Protocol, runtime_checkable

import equinox as eqx
import jax
import jax.numpy as jnp
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

    @property
    def algorithm(self) -> Any: ...
    @property
    def params(self) -> Any: ...
    @property
    def layout(self) -> Any: ...
    @property
    def initial_flat(self) -> Any: ...
    @property
    def population_size(self) -> int: ...
    @property
    def init_scale(self) -> float: ...
    @property
    def name(self) -> str: ...


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
    """

    inner: Any
    generation: IntScalar
    best_flat: FlatGenome
    best_fitness: Scalar
    made_by: tuple[str, int] = eqx.field(static=True, default=("", 0))


def strongly_typed(tree: Any) -> Any:
    """Drop weak types from evosax's state.

    evosax's init and tell leave some leaves weakly typed (Python floats such as
    jnp.inf, schedule outputs) and others not, varying by algorithm and call. A
    state whose type never changes lets a user's jitted loop compile once.
    """
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

    @abc.abstractmethod
    def tell(
        self,
        strategy: StrategyView,
        key: PRNGKey,
        flat: FlatPopulation,
        fitness: Fitness,
        inner: Any,
        generation: Array,
    ) -> Any:
        """evosax's state after being told `fitness` (evosax's sign, all finite)."""

    def reference(
        self, strategy: StrategyView, inner: Any, generation: Array
    ) -> Array | None:
        """Fitness (raw, evosax's sign) that a non-finite genome must rank below,
        beside the generation's own; None when the generation alone counts."""
        del strategy, inner, generation
        return None

    def mean(self, strategy: StrategyView, inner: Any) -> Array:
        """The search mean(s), flat."""
        del inner
        raise TypeError(
            f"{strategy.name} is population-based and has no search mean; use "
            "strategy.best(state)"
        )

    def episode_ids(self, strategy: StrategyView) -> np.ndarray:
        """Episode id per genome for `episodes="per_genome"`: genome i plays
        episode ids[i]; genomes that must be compared on equal terms (mirrored
        pairs) share one. Distinct ids by default."""
        return np.arange(strategy.population_size, dtype=np.int32)


def state_signature(state: Any) -> tuple[Any, ...]:
    """The structure, shapes and dtypes of a state (hashable), to check a state
    against the strategy it is handed to."""
    leaves, treedef = jtu.tree_flatten(state)
    return (
        treedef,
        tuple((tuple(int(d) for d in x.shape), str(x.dtype)) for x in leaves),
    )


__all__ = [
    "AbstractFamily",
    "StrategyState",
    "standard_promotion",
    "state_signature",
    "strongly_typed",
]
