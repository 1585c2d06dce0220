"""Emitters: what proposes each generation's candidates from a MAP-Elites archive.

- `IsoLineEmitter`: Vassiliades & Mouret's (2018) iso+line variation of two
  elites drawn uniformly from the archive.
- `ESEmitter`: an evolution strategy (any distribution-based evosax algorithm,
  through `Strategy`) whose candidates are ranked for its update by what they
  did to the archive (`ranking="improvement"`, CMA-ME: Fontaine et al. 2020),
  by their fitness, by their novelty (the mean distance of their descriptor
  to the k nearest elites'), or by the two in turn (`"alternate"`,
  MAP-Elites-ES: Colas et al. 2020), and which restarts from an elite when a
  generation added nothing or after a fixed number of generations. With
  `insert="mean"` only its mean enters the archive, as in MAP-Elites-ES.

Every emitter works on flat genomes (`GenomeLayout`'s vectors); `MapElites`
(`map_elites.py`) runs several at once, each on its own slice of the
population. docs/qd.md, "Emitters".
"""

import abc
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from .._checks import one_of, positive_int, positive_number
from .._types import Array, Bool, Float, PRNGKey
from ..strategy.strategy import Strategy
from .archive import ArchiveState, Insertion

Ranking = Literal["improvement", "fitness", "novelty", "alternate"]
RANKINGS: tuple[Ranking, ...] = ("improvement", "fitness", "novelty", "alternate")
Insert = Literal["samples", "mean"]
INSERTS: tuple[Insert, ...] = ("samples", "mean")


def random_elites(
    key: PRNGKey, archive_state: ArchiveState, count: int
) -> Float[Array, "count dim"]:
    """`count` elites drawn uniformly, with replacement, from the filled cells
    (cell 0's row when the archive is empty: callers check). One integer per
    draw: the k-th filled cell, found in the running count of filled cells."""
    cumulative = jnp.cumsum(archive_state.filled.astype(jnp.int32))
    k = jr.randint(key, (count,), 0, jnp.maximum(cumulative[-1], 1))
    cells = jnp.searchsorted(cumulative, k, side="right")
    return archive_state.genomes[jnp.minimum(cells, cumulative.size - 1)]


def novelty(
    descriptors: Float[Array, "batch d"], archive_state: ArchiveState, k: int
) -> Float[Array, " batch"]:
    """Each descriptor's mean Euclidean distance to its k nearest elites' (fewer
    when fewer cells are filled; +inf when none is)."""
    difference = descriptors[:, None, :] - archive_state.descriptors[None]
    distance = jnp.sqrt(jnp.sum(jnp.square(difference), -1))
    distance = jnp.where(archive_state.filled[None], distance, jnp.inf)
    k = min(k, distance.shape[1])
    nearest = -jax.lax.top_k(-distance, k)[0]
    finite = jnp.isfinite(nearest)
    count = jnp.sum(finite, -1)
    total = jnp.sum(jnp.where(finite, nearest, 0.0), -1)
    mean = total / jnp.maximum(count, 1).astype(total.dtype)
    return jnp.where(count > 0, mean, jnp.inf)


def top_elite(
    key: PRNGKey, score: Float[Array, " cells"], filled: Bool[Array, " cells"], n: int
) -> Array:
    """A cell drawn uniformly from the `n` filled cells of highest `score`
    (fewer when fewer are filled; cell 0 when none is: callers check)."""
    score = jnp.where(filled, score, -jnp.inf)
    value, cells = jax.lax.top_k(score, min(n, score.shape[0]))
    weight = jnp.where(value > -jnp.inf, 1.0, 0.0)
    pick = jr.choice(key, cells.shape[0], p=weight / jnp.maximum(weight.sum(), 1.0))
    return cells[pick]


class AbstractEmitter(eqx.Module):
    """Proposes `batch_size` candidates a generation and learns from what they did.

    Subclasses implement `init`, `ask` and `tell`; states are pytrees of fixed
    shapes.
    """

    batch_size: eqx.AbstractVar[int]

    def bind(self, initial: Float[Array, " dim"]) -> "AbstractEmitter":
        """This emitter made for genomes like `initial` (flat)."""
        del initial
        return self

    def insertable(self) -> np.ndarray:
        """Which of its candidates may enter the archive (all, unless the
        emitter evaluates some only to learn from them)."""
        return np.ones(self.batch_size, bool)

    @abc.abstractmethod
    def init(self, key: PRNGKey, initial: Float[Array, " dim"]) -> Any:
        """The emitter's state, given the user's genome (flat)."""

    @abc.abstractmethod
    def ask(
        self, key: PRNGKey, state: Any, archive_state: ArchiveState
    ) -> tuple[Float[Array, "batch dim"], Any]:
        """`batch_size` candidates (flat) and the new state."""

    @abc.abstractmethod
    def tell(
        self,
        key: PRNGKey,
        candidates: Float[Array, "batch dim"],
        fitness: Float[Array, " batch"],
        descriptors: Float[Array, "batch d"],
        insertion: Insertion,
        state: Any,
        before: ArchiveState,
        after: ArchiveState,
    ) -> Any:
        """The state after the candidates were evaluated and inserted (`before`
        and `after`: the archive then and now; fitness maximised)."""


class IsoLineEmitter(AbstractEmitter):
    """Iso+line variation (Vassiliades & Mouret 2018): for two elites x and y
    drawn uniformly from the archive, `x + iso_sigma * N(0, I) + line_sigma *
    N(0, 1) * (y - x)`. With an empty archive, `initial + iso_sigma * N(0, I)`.

    Arguments:
        batch_size: candidates per generation.
        iso_sigma: the isotropic step, in genome units.
        line_sigma: the step along the line between the two elites.
    """

    batch_size: int = eqx.field(static=True)
    iso_sigma: float = eqx.field(static=True)
    line_sigma: float = eqx.field(static=True)

    def __init__(
        self, batch_size: int, iso_sigma: float = 0.01, line_sigma: float = 0.1
    ):
        self.batch_size = positive_int("batch_size", batch_size)
        self.iso_sigma = positive_number("iso_sigma", iso_sigma)
        self.line_sigma = _non_negative("line_sigma", line_sigma)

    def init(self, key: PRNGKey, initial: Float[Array, " dim"]) -> Any:
        del key
        return initial

    def ask(
        self, key: PRNGKey, state: Any, archive_state: ArchiveState
    ) -> tuple[Float[Array, "batch dim"], Any]:
        k_x, k_y, k_iso, k_line = jr.split(key, 4)
        x = random_elites(k_x, archive_state, self.batch_size)
        y = random_elites(k_y, archive_state, self.batch_size)
        any_elite = jnp.any(archive_state.filled)
        x = jnp.where(any_elite, x, state[None])
        y = jnp.where(any_elite, y, x)
        iso = jr.normal(k_iso, x.shape, x.dtype) * self.iso_sigma
        line = jr.normal(k_line, (self.batch_size, 1), x.dtype) * self.line_sigma
        return x + iso + line * (y - x), state

    def tell(
        self,
        key: PRNGKey,
        candidates: Float[Array, "batch dim"],
        fitness: Float[Array, " batch"],
        descriptors: Float[Array, "batch d"],
        insertion: Insertion,
        state: Any,
        before: ArchiveState,
        after: ArchiveState,
    ) -> Any:
        return state


class ESState(eqx.Module):
    """An `ESEmitter`'s state: its strategy's, generations since its start, and
    (`ranking="alternate"`) whether it explores (novelty) or exploits (fitness)."""

    strategy: Any
    age: Array
    explore: Array


class ESEmitter(AbstractEmitter):
    """An evolution strategy over the archive: CMA-ME with `"CMA_ES"` and the
    defaults; MAP-Elites-ES with `ranking="alternate", insert="mean",
    restart=10`.

    Arguments:
        algorithm: a distribution-based evosax algorithm, by any name `Strategy`
            takes (`"CMA_ES"`, `"Sep_CMA_ES"`, `"snes"`, a class or instance).
        batch_size: candidates per generation.
        ranking: how candidates are ranked for the strategy's update:
            `"improvement"` (first those that filled an empty cell, then those
            that improved a cell, each by how much; then the rest, by how far
            short of their cell's elite they fell), `"fitness"`, `"novelty"`
            (mean descriptor distance to the `novelty_k` nearest elites before
            the generation's insertion), or `"alternate"`: fitness and novelty
            in turn, switching at each restart (it starts by exploiting), the
            new start drawn from the `exploit_cells` fittest elites when it
            exploits and from the `explore_cells` most novel when it explores.
        restart: `"no_improvement"` restarts the strategy from an elite (drawn
            uniformly, or as `"alternate"` says) after a generation that added
            nothing to the archive; an int n restarts it every n generations;
            None never.
        insert: `"samples"`: every candidate may enter the archive (the
            strategy's population is `batch_size`); `"mean"`: the first
            candidate is the strategy's mean, the only one that may enter, and
            the other `batch_size - 1` are samples the strategy learns from.
        novelty_k: neighbours for novelty.
        exploit_cells, explore_cells: the elites `"alternate"` starts from.
        params, **kwargs: the strategy's evosax `Params` overrides
            (`{"std_init": 0.5}`) and constructor arguments, as `Strategy`.

    The strategy itself is built for the genome when `MapElites` (or `bind`)
    gives it one.
    """

    algorithm: Any = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    ranking: Ranking = eqx.field(static=True)
    restart: str | int | None = eqx.field(static=True)
    insert: Insert = eqx.field(static=True)
    novelty_k: int = eqx.field(static=True)
    exploit_cells: int = eqx.field(static=True)
    explore_cells: int = eqx.field(static=True)
    options: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    params: Any
    strategy: Strategy | None

    def __init__(
        self,
        algorithm: Any,
        batch_size: int,
        *,
        ranking: Ranking = "improvement",
        restart: str | int | None = "no_improvement",
        insert: Insert = "samples",
        novelty_k: int = 15,
        exploit_cells: int = 2,
        explore_cells: int = 5,
        params: Any = None,
        **kwargs: Any,
    ):
        self.algorithm = algorithm
        self.batch_size = positive_int("batch_size", batch_size)
        self.ranking = one_of("ranking", ranking, RANKINGS)
        if restart is not None and restart != "no_improvement":
            restart = positive_int("restart (generations)", restart)
        self.restart = restart
        self.insert = one_of("insert", insert, INSERTS)
        if insert == "mean" and batch_size < 3:
            raise ValueError(
                f'insert="mean" needs batch_size >= 3 (the mean and at least 2 '
                f"samples); got {batch_size}"
            )
        self.novelty_k = positive_int("novelty_k", novelty_k)
        self.exploit_cells = positive_int("exploit_cells", exploit_cells)
        self.explore_cells = positive_int("explore_cells", explore_cells)
        self.options = tuple(sorted(kwargs.items()))
        self.params = params
        self.strategy = None

    @property
    def num_samples(self) -> int:
        """The strategy's population: the candidates it learns from."""
        return self.batch_size - (self.insert == "mean")

    def insertable(self) -> np.ndarray:
        mask = np.ones(self.batch_size, bool)
        if self.insert == "mean":
            mask[1:] = False
        return mask

    def bind(self, initial: Float[Array, " dim"]) -> "ESEmitter":
        """This emitter with its strategy built for genomes like `initial`."""
        strategy = Strategy(
            self.algorithm,
            initial,
            self.num_samples,
            maximize=True,
            params=self.params,
            **dict(self.options),
        )
        if strategy.family != "distribution":
            raise ValueError(
                f"ESEmitter needs a distribution-based algorithm (a search mean to "
                f"restart from an elite); {strategy.name} is {strategy.family}-based"
            )
        return eqx.tree_at(
            lambda e: e.strategy, self, strategy, is_leaf=lambda x: x is None
        )

    @property
    def _strategy(self) -> Strategy:
        if self.strategy is None:
            raise ValueError("this ESEmitter has no genome yet: use it in MapElites")
        return self.strategy

    def _start(
        self, key: PRNGKey, mean: Float[Array, " dim"], explore: Array
    ) -> ESState:
        # The strategy's own init around `mean`: as if it had been built there.
        moved = eqx.tree_at(lambda s: s.initial_flat, self._strategy, mean)
        age = jnp.zeros((), jnp.int32)
        return ESState(strategy=moved.init(key), age=age, explore=explore)

    def init(self, key: PRNGKey, initial: Float[Array, " dim"]) -> Any:
        return self._start(key, initial, jnp.zeros((), bool))

    def ask(
        self, key: PRNGKey, state: Any, archive_state: ArchiveState
    ) -> tuple[Float[Array, "batch dim"], Any]:
        samples, inner = self._strategy.ask(key, state.strategy)
        if self.insert == "mean":
            mean = self._strategy.mean(state.strategy)
            samples = jnp.concatenate([mean[None].astype(samples.dtype), samples])
        return samples, ESState(strategy=inner, age=state.age, explore=state.explore)

    def _score(
        self,
        fitness: Float[Array, " batch"],
        descriptors: Float[Array, "batch d"],
        insertion: Insertion,
        before: ArchiveState,
        explore: Array,
    ) -> Float[Array, " batch"]:
        """Each candidate's rank for the update (0 the worst, higher better)."""
        tier = jnp.zeros(fitness.shape, jnp.int32)
        if self.ranking == "fitness":
            value = fitness
        elif self.ranking == "novelty":
            value = novelty(descriptors, before, self.novelty_k)
        elif self.ranking == "alternate":
            value = jnp.where(
                explore, novelty(descriptors, before, self.novelty_k), fitness
            )
        else:
            tier = insertion.new_cell.astype(jnp.int32) * 2 + (
                insertion.added & ~insertion.new_cell
            ).astype(jnp.int32)
            short = fitness - before.fitness[insertion.cell]
            value = jnp.where(insertion.added, insertion.improvement, short)
        # Non-finite values rank below every finite one (in their own tier).
        tier = jnp.where(insertion.invalid | jnp.isnan(value), -1, tier)
        value = jnp.where(jnp.isnan(value), 0.0, value)
        order = jnp.lexsort((value, tier))  # ascending: the best last
        rank = (
            jnp.zeros(fitness.shape, jnp.int32)
            .at[order]
            .set(jnp.arange(fitness.shape[0], dtype=jnp.int32))
        )
        return rank.astype(fitness.dtype)

    def _restart_from(
        self, key: PRNGKey, archive: ArchiveState, explore: Array
    ) -> Float[Array, " dim"]:
        """Where a restart starts: an elite drawn uniformly, or (`"alternate"`)
        one of the fittest or most novel."""
        if self.ranking != "alternate":
            return random_elites(key, archive, 1)[0]
        fit_key, novel_key = jr.split(key)
        fittest = top_elite(
            fit_key, archive.fitness, archive.filled, self.exploit_cells
        )
        # novelty against the archive, each elite its own nearest neighbour
        novel = novelty(archive.descriptors, archive, self.novelty_k)
        novelest = top_elite(novel_key, novel, archive.filled, self.explore_cells)
        return archive.genomes[jnp.where(explore, novelest, fittest)]

    def tell(
        self,
        key: PRNGKey,
        candidates: Float[Array, "batch dim"],
        fitness: Float[Array, " batch"],
        descriptors: Float[Array, "batch d"],
        insertion: Insertion,
        state: Any,
        before: ArchiveState,
        after: ArchiveState,
    ) -> Any:
        tell_key, elite_key, start_key = jr.split(key, 3)
        score = self._score(fitness, descriptors, insertion, before, state.explore)
        learn = slice(self.batch_size - self.num_samples, None)  # the samples
        inner, _ = self._strategy.tell(
            tell_key, candidates[learn], score[learn], state.strategy
        )
        told = ESState(strategy=inner, age=state.age + 1, explore=state.explore)
        if self.restart is None:
            return told
        if isinstance(self.restart, int):
            again = told.age >= self.restart
        else:  # "no_improvement"
            again = ~jnp.any(insertion.added)
        again = again & jnp.any(after.filled)

        def restarted(told: ESState) -> ESState:
            # "alternate" switches between exploiting and exploring here
            explore = ~told.explore if self.ranking == "alternate" else told.explore
            start = self._restart_from(elite_key, after, explore)
            return self._start(start_key, start, explore)

        # A cond, not a select: a fresh strategy (CMA-ES's covariance, ...) is
        # built only in the generations that restart.
        return jax.lax.cond(again, restarted, lambda told: told, told)


def _non_negative(name: str, value: Any) -> float:
    if value == 0:
        return 0.0
    return positive_number(name, value)


def check_emitters(emitters: Any) -> tuple[AbstractEmitter, ...]:
    """`emitters` as a non-empty tuple of emitters, or a `ValueError`."""
    if isinstance(emitters, AbstractEmitter):
        emitters = (emitters,)
    emitters = tuple(emitters)
    if not emitters or not all(isinstance(e, AbstractEmitter) for e in emitters):
        raise ValueError(
            "emitters must be one emitter or a non-empty sequence of them "
            "(IsoLineEmitter, ESEmitter, ...); got "
            f"{[type(e).__name__ for e in emitters]}"
        )
    return emitters


__all__ = [
    "INSERTS",
    "RANKINGS",
    "AbstractEmitter",
    "ESEmitter",
    "ESState",
    "Insert",
    "IsoLineEmitter",
    "Ranking",
    "check_emitters",
    "novelty",
    "random_elites",
    "top_elite",
]
