"""The key schedule: a run's keys from its seed or key, a generation's from its index.

What a hand-written loop must do to reproduce `evolve`: docs/reproducibility.md.
"""

from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr

from ._types import Array, PRNGKey, PRNGKeys


def seed_keys(seed: int) -> tuple[PRNGKey, PRNGKey]:
    """`(genome_key, run_key)` of a run with integer seed `seed` (`run.seed`).

    The genome key draws the initial network (topology and weights); the run key
    is what `evolve` receives. Runs and studies derive both the same way.
    """
    # Two independent streams: the network drawn from one, the search from the
    # other, so changing the search (its algorithm, P) keeps the initial network.
    genome_key, run_key = jr.split(jr.key(seed))
    return genome_key, run_key


def run_keys(
    key: PRNGKey | PRNGKeys, num_seeds: int | None = None, runs: int | None = None
) -> tuple[Any, Any]:
    """`(init_key, run_key)` of the run `evolve(key, ...)` starts.

    With `num_seeds=K`, seed k uses `split(key, K)[k]` as its key; with `runs=R`,
    `key` already holds the R runs' keys. Either way the results get a leading
    axis K or R.
    """
    # R runs carry R keys already (one per run, from the caller): each run is
    # split exactly as a run of its own would be.
    if runs is not None:
        return jax.vmap(lambda k: tuple(jr.split(k)))(key)
    if num_seeds is None:
        init_key, run_key = jr.split(key)
        return init_key, run_key
    seed_keys_ = jr.split(key, num_seeds)
    return jax.vmap(lambda k: tuple(jr.split(k)))(seed_keys_)


def generation_keys(run_key: PRNGKey, generation: Array | int) -> tuple[PRNGKey, ...]:
    """`(ask_key, eval_key, tell_key)` of generation `generation` of a run.

    They depend on the generation index alone (not on chunking or resumption).
    """
    # fold_in by the generation index, not a key carried from one generation to the
    # next: any generation's keys are known without running the ones before it.
    ask_key, eval_key, tell_key = jr.split(jr.fold_in(run_key, generation), 3)
    return ask_key, eval_key, tell_key


def is_typed_key(key: Any) -> bool:
    """Whether `key` is an array of typed JAX keys (`jax.random.key`)."""
    return isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)


__all__ = ["generation_keys", "is_typed_key", "run_keys", "seed_keys"]
