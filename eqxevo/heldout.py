"""Held-out evaluation: a genome's fitness on lifetimes selection never saw.

Training fitness is what selection ranked: the best single noisy evaluation of
a generation says as much about the episodes' luck as about the genome. What a
run reports, and what runs are compared on, is the genome's mean fitness over
`num_episodes` fresh lifetimes, with a 95% confidence interval:

    result = heldout_evaluate(heldout_key(seed), fitness_fn, genome, 64)
    result.mean, result.ci_low, result.ci_high

The episodes come from their own key stream, `heldout_key(seed)`, derived from
the run's seed apart from everything `evolve` derives (its init, ask, evaluate
and tell keys), so selection never plays them (`tests/test_heldout.py` checks
that the two streams share no key). The same seed gives the same held-out
episodes at every evaluation of a run, so the figures of a resumed run, or of
two runs of one seed, compare genomes on equal terms.

A held-out evaluation is `evaluate` on `num_episodes` copies of the genome with
per-genome episodes: it shares `evaluate`'s batching, devices and bits.
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
from jax.sharding import Mesh

from ._types import Array, Float, Genome, PRNGKey
from .evaluate import evaluate

HELDOUT_STREAM = 0x48454C44
"""`fold_in` data that separates the held-out stream from `evolve`'s ("HELD")."""


def heldout_key(seed: int | PRNGKey) -> PRNGKey:
    """The held-out episodes' key of a run with this seed (or root key).

    `evolve` derives its keys from the root key by `split`; this key is
    `fold_in(root, HELDOUT_STREAM)`, which no `split` of the root produces.
    """
    root = jr.key(seed) if isinstance(seed, int) else seed
    return jr.fold_in(root, HELDOUT_STREAM)


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
    evolvable, static = eqx.partition(genome, filter_spec)
    repeated = jax.tree.map(lambda x: jnp.broadcast_to(x, (count, *x.shape)), evolvable)
    return eqx.combine(repeated, static)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts traces; tests read it
def _episode_fitness(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    genome: Genome,
    num_episodes: int,
    filter_spec: Any,
    mesh: Mesh | None,
    batch_size: int | None,
) -> Float[Array, " episodes"]:
    population = _copies(genome, num_episodes, filter_spec)
    fitness, _ = evaluate(
        key,
        fitness_fn,
        population,
        filter_spec=filter_spec,
        mesh=mesh,
        batch_size=batch_size,
        episodes="per_genome",
    )
    return fitness


def heldout_fitness(
    key: PRNGKey,
    fitness_fn: Callable[..., Any],
    genome: Genome,
    num_episodes: int,
    *,
    filter_spec: Any = eqx.is_inexact_array,
    mesh: Mesh | None = None,
    batch_size: int | None = None,
) -> Float[np.ndarray, " episodes"]:
    """The genome's fitness on each of `num_episodes` held-out lifetimes.

    Episode e is `fitness_fn(genome, fold_in(key, e))`: `evaluate` of
    `num_episodes` copies of the genome with per-genome episodes, in one jitted
    program (compiled once per genome structure, fitness function and
    `num_episodes`; other keys and genomes' values reuse it). Episode e's key
    does not depend on `num_episodes`: fewer episodes are a prefix of more.
    """
    if (
        not isinstance(num_episodes, int)
        or isinstance(num_episodes, bool)
        or num_episodes < 1
    ):
        raise ValueError(
            f"num_episodes must be a positive Python int; got {num_episodes!r}"
        )
    fitness = _episode_fitness(
        key, fitness_fn, genome, num_episodes, filter_spec, mesh, batch_size
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
        >>> result = heldout_evaluate(heldout_key(0), fitness_fn, genome, 64)
        >>> print(result)  # -212.4 ± 9.1 (95% CI, 64 episodes)
    """
    return summarize(heldout_fitness(key, fitness_fn, genome, num_episodes, **kwargs))


__all__ = [
    "HELDOUT_STREAM",
    "HeldOut",
    "heldout_evaluate",
    "heldout_fitness",
    "heldout_key",
    "summarize",
]
