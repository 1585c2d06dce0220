"""THE held-out rule: which genomes a run reports, on which lifetimes, how many, and
the record runs, `eqxevo eval` and studies write (docs/operations.md).
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ._checks import positive_int
from ._types import Array, Float, Genome, PRNGKey
from .evaluate import EvalSettings, evaluate_with
from .obs_norm import NormalizedPolicy, RunningObs, normalized
from .qd.map_elites import AnyStrategy
from .runs import take
from .strategy.base import StrategyState

HELDOUT_STREAM = 0x48454C44
"""`fold_in` data that separates the held-out stream from `evolve`'s ("HELD")."""

GENOMES = ("mean", "best")
"""The genomes a run evaluates held out: its distribution mean and best-so-far."""


def heldout_key(run_key: PRNGKey) -> PRNGKey:
    """The held-out lifetimes' key of the run `evolve(run_key, ...)` (one seed).

    `evolve` derives its keys from `run_key` by `split`; this key is
    `fold_in(run_key, HELDOUT_STREAM)`, which no `split` produces. Episode e is
    `fold_in(heldout_key(run_key), e)`.
    """
    # `evolve` only ever splits the run key; a fold_in with a constant no split
    # produces keeps the two streams apart (tests/test_heldout.py checks it).
    return jr.fold_in(run_key, HELDOUT_STREAM)


def heldout_keys(run_key: PRNGKey, num_seeds: int | None = None) -> list[PRNGKey]:
    """The held-out key of each seed of `evolve(run_key, ..., num_seeds=K)`: seed k
    holds out `heldout_key(split(run_key, K)[k])` (one key without `num_seeds`)."""
    if num_seeds is None:
        return [heldout_key(run_key)]
    return [heldout_key(k) for k in jr.split(run_key, num_seeds)]


def evaluates_mean(strategy: AnyStrategy) -> bool:
    """Whether a run of `strategy` evaluates its distribution mean held out: when
    the algorithm has one genome as its mean (not population-based algorithms,
    not Stein-variational ones with one mean per sub-population)."""
    return strategy.has_mean and strategy.family != "stein"


def heldout_genomes(strategy: AnyStrategy, state: StrategyState) -> dict[str, Any]:
    """`{"mean": agent | None, "best": agent}` of one run's (unbatched) state:
    its genomes, each with the run's observation moments frozen into it
    (`NormalizedPolicy`) where it normalises observations."""
    carry = state.evaluation if isinstance(state.evaluation, RunningObs) else None
    mean = strategy.mean(state) if evaluates_mean(strategy) else None
    # The mean is the genome the next generation samples around, with the
    # moments it will act on; the best keeps the moments it was scored with.
    if carry is None:
        return {"mean": mean, "best": strategy.best(state)}
    return {
        "mean": None if mean is None else normalized(mean, carry.moments),
        "best": normalized(strategy.best(state), carry.best),
    }


def agent_filter_spec(strategy: AnyStrategy, agent: Any) -> Any:
    """Which leaves of a held-out `agent` carry the population axis: the
    strategy's own filter, or every float array for a genome wrapped with its
    observation moments (which the strategy's filter does not describe)."""
    if isinstance(agent, NormalizedPolicy):
        return eqx.is_inexact_array
    return strategy.filter_spec


def heldout_settings(settings: EvalSettings, num_episodes: int) -> EvalSettings:
    """The run's evaluation settings for `num_episodes` held-out lifetimes: its own
    episodes per lifetime, over the run's devices when they split evenly."""
    # Lifetimes split over the run's devices like genomes do; a count that does not
    # divide evenly runs on one device rather than failing the run.
    mesh = settings.mesh
    if mesh is not None and num_episodes % mesh.devices.size:
        mesh = None
    return EvalSettings(
        mesh=mesh, batch_size=settings.batch_size, episodes="per_genome"
    )


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """A held-out evaluation: mean fitness over episodes, with a 95% CI.

    Attributes:
        mean: mean fitness over the episodes (the user's sign).
        ci_low, ci_high: a 95% confidence interval of the mean (Student's t over
            the episodes, `scipy.stats.t`); equal to `mean` for one episode or
            no spread.
        std: standard deviation over episodes (ddof=1; 0 for one episode).
        num_episodes: how many episodes, and how many were non-finite
            (`num_nonfinite`, left out of the statistics).
        values: the per-episode fitness (NumPy).
    """

    mean: float
    ci_low: float
    ci_high: float
    std: float
    num_episodes: int
    num_nonfinite: int
    values: np.ndarray

    def as_record(self, prefix: str = "heldout") -> dict[str, Any]:
        """Plain fields for metrics and summaries (`heldout_mean`, ...)."""
        return {
            f"{prefix}_mean": self.mean,
            f"{prefix}_ci_low": self.ci_low,
            f"{prefix}_ci_high": self.ci_high,
            f"{prefix}_std": self.std,
            f"{prefix}_episodes": self.num_episodes,
        }

    def summary(self) -> dict[str, Any]:
        """The record summary.json keeps: mean, CI, std and episodes (non-finite
        values as None)."""
        return {
            "mean": _finite(self.mean),
            "ci_low": _finite(self.ci_low),
            "ci_high": _finite(self.ci_high),
            "std": _finite(self.std),
            "episodes": self.num_episodes,
        }

    def __str__(self) -> str:
        half = (self.ci_high - self.ci_low) / 2
        return f"{self.mean:.5g} ± {half:.2g} (95% CI, {self.num_episodes} episodes)"


def summarize(values: Any) -> HeldOut:
    """Mean and Student-t 95% CI of per-episode fitness (non-finite left out)."""
    from scipy import stats

    values = np.asarray(values, dtype=np.float64)
    finite = values[np.isfinite(values)]
    n = int(finite.size)
    if n == 0:
        nan = float("nan")
        return HeldOut(nan, nan, nan, nan, int(values.size), int(values.size), values)
    mean = float(finite.mean())
    std = float(finite.std(ddof=1)) if n > 1 else 0.0
    if n > 1 and std > 0:
        low, high = stats.t.interval(0.95, n - 1, loc=mean, scale=std / math.sqrt(n))
    else:
        low = high = mean
    return HeldOut(
        mean,
        float(low),
        float(high),
        std,
        int(values.size),
        int(values.size - n),
        values,
    )


def _copies(genome: Genome, count: int, filter_spec: Any) -> Any:
    # The evolvable leaves are broadcast (no copies until XLA needs them); the
    # static parts stay shared, as in a population.
    evolvable, static = eqx.partition(genome, filter_spec)
    repeated = jax.tree.map(lambda x: jnp.broadcast_to(x, (count, *x.shape)), evolvable)
    return eqx.combine(repeated, static)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts compilations; tests read it
def episode_fitness(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    genome: Genome,
    num_episodes: int,
    filter_spec: Any,
    settings: EvalSettings,
) -> Float[Array, " episodes"]:
    """Fitness of `genome` on each held-out lifetime: `evaluate` of
    `num_episodes` copies with per-genome episodes, as one jitted program.
    `eqx.debug.get_num_traces(episode_fitness)` counts its compilations."""
    population = _copies(genome, num_episodes, filter_spec)
    fitness, _ = evaluate_with(
        key, fitness_fn, population, settings, filter_spec=filter_spec
    )
    return fitness


def heldout_fitness(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    genome: Genome,
    num_episodes: int,
    *,
    filter_spec: Any = eqx.is_inexact_array,
    settings: EvalSettings | None = None,
) -> Float[np.ndarray, " episodes"]:
    """The genome's fitness on each of `num_episodes` held-out lifetimes.

    Episode e is `fitness_fn(genome, fold_in(key, e))`, whatever `num_episodes`
    is (fewer episodes are a prefix of more). `settings` gives the devices and
    block size (`heldout_settings`); other keys and genomes' values reuse the
    compiled program.
    """
    positive_int("num_episodes", num_episodes)
    settings = heldout_settings(settings or EvalSettings(), num_episodes)
    fitness = episode_fitness(
        key, fitness_fn, genome, num_episodes, filter_spec, settings
    )
    return np.asarray(fitness)


def heldout_evaluate(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    genome: Genome,
    num_episodes: int,
    **kwargs: Any,
) -> HeldOut:
    """Mean fitness of `genome` over `num_episodes` held-out lifetimes, with a
    95% CI (see `heldout_fitness` for the arguments).

    Example:
        >>> result = heldout_evaluate(heldout_key(run_key), fitness_fn, genome, 64)
        >>> print(result)  # -212.4 ± 9.1 (95% CI, 64 episodes)
    """
    return summarize(heldout_fitness(key, fitness_fn, genome, num_episodes, **kwargs))


def evaluate_run(
    run_key: PRNGKey,
    fitness_fn: Callable[..., Any],
    strategy: AnyStrategy,
    state: StrategyState,
    num_episodes: int,
    *,
    num_seeds: int | None = None,
    settings: EvalSettings | None = None,
) -> list[dict[str, HeldOut | None]]:
    """Held-out evaluation of a run's `heldout_genomes`, one dict per seed.

    Arguments:
        run_key: the key the run's `evolve` received.
        fitness_fn: the run's fitness function (one lifetime).
        strategy, state: the run's strategy and state (batched over seeds with
            `num_seeds`).
        num_episodes: lifetimes per genome (`run.eval_episodes`).
        num_seeds: K for a run of `evolve(..., num_seeds=K)`.
        settings: the run's evaluation settings (devices, block size).
    """
    out: list[dict[str, HeldOut | None]] = []
    for seed, key in enumerate(heldout_keys(run_key, num_seeds)):
        one = state if num_seeds is None else take(state, seed)
        genomes = heldout_genomes(strategy, one)
        out.append(
            {
                name: None
                if genome is None
                else heldout_evaluate(
                    key,
                    fitness_fn,
                    genome,
                    num_episodes,
                    filter_spec=agent_filter_spec(strategy, genome),
                    settings=settings,
                )
                for name, genome in genomes.items()
            }
        )
    return out


# -- the record ---------------------------------------------------------------------


def _finite(value: Any) -> Any:
    # JSON has no NaN or inf: non-finite statistics are written as null.
    return value if isinstance(value, int) or np.isfinite(value) else None


def heldout_fields(result: dict[str, HeldOut | None]) -> dict[str, Any]:
    """One seed's evaluation as metric fields: `heldout_mean_mean`,
    `heldout_mean_ci_low`, ..., `heldout_best_*` (non-finite values as None)."""
    fields: dict[str, Any] = {}
    for genome in GENOMES:
        held = result[genome]
        if held is not None:
            record = held.as_record(f"heldout_{genome}")
            fields.update({k: _finite(v) for k, v in record.items()})
    return fields


def heldout_record(
    results: list[dict[str, HeldOut | None]], generation: int
) -> dict[str, Any] | list[dict[str, Any]]:
    """`summary.json["heldout"]`: `{"mean": {...} | None, "best": {...},
    "generation": G}` with `{"mean", "ci_low", "ci_high", "std", "episodes"}`
    per genome (G: generations run when evaluated); a list of those, one per
    seed, for runs of several seeds."""
    entries = []
    for result in results:
        entry: dict[str, Any] = {}
        for genome in GENOMES:
            held = result[genome]
            entry[genome] = None if held is None else held.summary()
        entry["generation"] = generation
        entries.append(entry)
    return entries[0] if len(entries) == 1 else entries


def heldout_cost(strategy: AnyStrategy, episodes: int, every: int = 0) -> str:
    """What a run's held-out evaluations cost, in lifetimes and in generations
    (`episodes` lifetimes per genome, at the end and every `every` generations)."""
    genomes = 2 if evaluates_mean(strategy) else 1
    when = "at the end" + (f" and every {every} generations" if every else "")
    return (
        f"held-out evaluation {when}: {genomes} genome(s) x {episodes} lifetimes "
        f"per seed, as many lifetimes as "
        f"{genomes * episodes / strategy.population_size:.3g} generations"
    )


__all__ = [
    "GENOMES",
    "HELDOUT_STREAM",
    "HeldOut",
    "agent_filter_spec",
    "episode_fitness",
    "evaluate_run",
    "evaluates_mean",
    "heldout_cost",
    "heldout_evaluate",
    "heldout_fields",
    "heldout_fitness",
    "heldout_genomes",
    "heldout_key",
    "heldout_keys",
    "heldout_record",
    "heldout_settings",
    "summarize",
]
