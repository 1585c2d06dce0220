"""Several runs in one program: K seeds of one strategy, or R runs stacked by
`stack_runs`; their initial states and one run's slice of them.
"""

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

from ._types import PRNGKey, PRNGKeys
from .evaluate import initial_carry
from .keys import is_typed_key, run_keys
from .program import Batch
from .qd.map_elites import AnyStrategy
from .strategy.base import StrategyState, with_evaluation


def batch_of(num_seeds: int | None, runs: int | None) -> Batch:
    """The program's `Batch` for `evolve(..., num_seeds=..., runs=...)`."""
    if runs is not None:
        return "runs"
    return "none" if num_seeds is None else "seeds"


def stack_runs(trees: Sequence[Any]) -> Any:
    """Stack R strategies (or R fitness functions) into one, for `evolve(runs=R)`.

    The R trees must share their structure, their non-array parts (algorithm,
    sizes, functions, configuration) and their arrays' shapes and dtypes; their
    arrays (strategy params, initial genome, topology, environment params ...)
    may differ, and get a leading axis R.

    Raises:
        ValueError: the trees differ in more than array values (they would need
            separate programs), naming the first difference.
    """
    trees = list(trees)
    if not trees:
        raise ValueError("stack_runs: need at least one tree; got none")
    # Only arrays may differ between runs: everything else is part of the compiled
    # program, and must be equal for the runs to share it.
    parts = [eqx.partition(t, eqx.is_array) for t in trees]
    arrays0, static0 = parts[0]
    leaves0, treedef0 = jtu.tree_flatten(arrays0)
    for r, (arrays, static) in enumerate(parts[1:], start=1):
        leaves, treedef = jtu.tree_flatten(arrays)
        same_static = jtu.tree_structure(static) == jtu.tree_structure(static0)
        if same_static:
            same_static = bool(eqx.tree_equal(static, static0))
        if treedef != treedef0 or not same_static:
            raise ValueError(
                f"stack_runs: tree {r} differs from tree 0 in more than array "
                "values (structure, sizes, algorithm or configuration); such runs "
                "need programs of their own"
            )
        for a, b in zip(leaves, leaves0, strict=True):
            if a.shape != b.shape or a.dtype != b.dtype:
                raise ValueError(
                    f"stack_runs: tree {r} has an array {a.dtype}{list(a.shape)} "
                    f"where tree 0 has {b.dtype}{list(b.shape)}"
                )
    # Run r is slice r of every array: `program.run_chunk` maps over the leading axis.
    stacked = jtu.tree_map(lambda *xs: jnp.stack(xs), *[arrays for arrays, _ in parts])
    return eqx.combine(stacked, static0)


def check_runs(key: Any, strategy: AnyStrategy, fitness_fn: Any, runs: int) -> None:
    """Raise a clear error unless `key`, `strategy`, `fitness_fn` carry R runs."""
    # Raw uint32 keys are refused: their last axis would read as a run axis.
    key_shape = tuple(jnp.shape(jr.key_data(key))) if is_typed_key(key) else None
    if key_shape is None or key_shape[:1] != (runs,) or len(key_shape) != 2:
        raise ValueError(
            f"runs={runs}: key must hold {runs} typed keys (jax.random.split(key, "
            f"{runs}) or one key per run); got {getattr(key, 'shape', key)!r}"
        )
    for name, tree in (("strategy", strategy), ("fitness_fn", fitness_fn)):
        leaves = jtu.tree_leaves(eqx.filter(tree, eqx.is_array))
        bad = [x.shape for x in leaves if x.shape[:1] != (runs,)]
        if bad:
            raise ValueError(
                f"runs={runs}: every array of {name} needs a leading axis {runs} "
                f"(stack R of them with eqxevo.stack_runs); got shapes {bad[:3]}"
            )


@eqx.filter_jit
def _init_seeds(strategy: AnyStrategy, keys: PRNGKeys) -> StrategyState:
    # lax.map, not vmap: each seed runs the code of a run of its own (same bits).
    return jax.lax.map(strategy.init, keys)


@eqx.filter_jit
def _init_runs(strategy: AnyStrategy, keys: PRNGKeys) -> StrategyState:
    arrays, static = eqx.partition(strategy, eqx.is_array)
    return jax.lax.map(
        lambda args: eqx.combine(args[1], static).init(args[0]), (keys, arrays)
    )


def initial_state(
    key: PRNGKey | PRNGKeys,
    strategy: AnyStrategy,
    num_seeds: int | None = None,
    runs: int | None = None,
    fitness_fn: Any = None,
) -> StrategyState:
    """The state `evolve(key, strategy, fitness_fn, ..., num_seeds=..., runs=...)`
    starts from, with what `fitness_fn` carries between generations
    (`evaluate.initial_carry`), one per seed or run."""
    init_key, _ = run_keys(key, num_seeds, runs)
    if runs is not None:
        state = _init_runs(strategy, init_key)
    elif num_seeds is None:
        state = strategy.init(init_key)
    else:
        state = _init_seeds(strategy, init_key)
    carry = initial_carry(fitness_fn)
    if carry is None:
        return state
    count = runs if runs is not None else num_seeds
    if count is not None:
        carry = jtu.tree_map(lambda x: jnp.broadcast_to(x, (count, *x.shape)), carry)
    return with_evaluation(state, carry)


def take(tree: Any, r: int) -> Any:
    """Run (or seed) `r` of a tree batched over runs; other leaves as they are."""
    return jtu.tree_map(
        lambda x: x[r] if isinstance(x, np.ndarray | jax.Array) else x, tree
    )


def best_run(strategy: AnyStrategy, state: Any) -> tuple[int | None, Any, Any]:
    """`(seed, its state, its best fitness)` of the seed whose best fitness is the
    highest (NaN and inf rank lowest), or `(None, state, best fitness)` for the
    state of one seed."""
    fitness = np.asarray(strategy.best_fitness(state))
    if not fitness.ndim:
        return None, state, fitness
    seed = int(np.nanargmax(np.where(np.isfinite(fitness), fitness, -np.inf)))
    return seed, take(state, seed), fitness[seed]


__all__ = ["batch_of", "best_run", "check_runs", "initial_state", "stack_runs", "take"]
