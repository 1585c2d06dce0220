"""The device program `evolve` runs: one generation (ask, evaluate, tell) and a
scanned chunk of generations, for one run or several.
"""

from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu

from ._types import Array, Metrics, PRNGKey, PRNGKeys
from .bits import stage
from .evaluate import (
    AbstractPopulationFitness,
    EvalSettings,
    evaluate_with,
    next_carry,
    with_carry,
)
from .fitness import best_index
from .keys import generation_keys
from .qd.map_elites import FAMILY as QD_FAMILY, AnyStrategy
from .sharding import replicated
from .strategy.base import StrategyState, with_evaluation

Batch = Literal["none", "seeds", "runs"]
"""How many runs one program holds: one, K seeds of one strategy, or R stacked runs."""


class ChunkProgram(eqx.Module):
    """What a compiled chunk is, apart from the arrays it runs on.

    Attributes:
        chunk_size: generations per chunk (a shorter chunk masks the rest).
        halt_on_nonfinite: freeze a run at its first generation with non-finite
            fitness (`on_nonfinite="raise"`).
        batch: one run, K seeds or R stacked runs (`Batch`).
        settings: how each generation's population is evaluated.
    """

    chunk_size: int = eqx.field(static=True)
    halt_on_nonfinite: bool = eqx.field(static=True)
    batch: Batch = eqx.field(static=True)
    settings: EvalSettings


def generation_step(
    strategy: AnyStrategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    run_key: PRNGKey,
    state: StrategyState,
    settings: EvalSettings,
) -> tuple[StrategyState, Metrics, Any]:
    """One generation: ask, evaluate, tell. Returns `(state, record, best_aux)`.

    `record` holds the generation index and `tell`'s metrics; `best_aux` is the
    array part of the generation-best genome's aux (its other leaves are static
    and returned as they are).
    """
    ask_key, eval_key, tell_key = generation_keys(run_key, state.generation)
    always = state.generation >= 0
    # What the evaluation carries (running observation moments): this
    # generation acts on it as it was, and adds its own observations after.
    carry = state.evaluation

    def evaluate_stage(key: PRNGKey, population: Any) -> Any:
        return evaluate_with(
            key,
            with_carry(fitness_fn, carry),
            population,
            settings,
            filter_spec=strategy.filter_spec,
            maximize=strategy.maximize,
        )

    # Each stage is its own computation, so a generation computes the bits of the
    # separately jitted public calls (the hand-written loop).
    population, state_asked = stage(strategy.ask, always)(ask_key, state)
    fitness, aux = stage(evaluate_stage, always)(eval_key, population)
    if strategy.family == QD_FAMILY:  # MAP-Elites: the descriptors too
        new_state, metrics = stage(strategy.tell, always)(
            tell_key, population, fitness, state_asked, strategy.descriptors(aux)
        )
    else:
        new_state, metrics = stage(strategy.tell, always)(
            tell_key, population, fitness, state_asked
        )
    if carry is not None:
        improved = new_state.best_fitness != state_asked.best_fitness
        carry, aux = next_carry(fitness_fn, carry, aux, improved)
        new_state = with_evaluation(new_state, carry)
    record = {"generation": state.generation, **metrics}
    best = best_index(fitness, strategy.maximize)
    best_aux = jtu.tree_map(lambda a: a[best] if eqx.is_array(a) else a, aux)
    return new_state, record, best_aux


def _scan_generations(
    program: ChunkProgram,
    strategy: AnyStrategy,
    fitness_fn: Any,
    run_key: PRNGKey,
    state: StrategyState,
    halted: Array,
    num_active: Array,
    aux_static: list[Any],
) -> Any:
    """One run's chunk: `program.chunk_size` generations, the first `num_active`
    of them run, the rest skipped (the same program serves every chunk length)."""

    def generation(carry: Any) -> Any:
        state, halted = carry
        new_state, record, aux = generation_step(
            strategy, fitness_fn, run_key, state, program.settings
        )
        aux, static = eqx.partition(aux, eqx.is_array)
        aux_static.append(static)
        if not program.halt_on_nonfinite:
            return (new_state, halted), (record, aux, jnp.bool_(True))
        stop = halted | (record["num_nonfinite"] > 0)
        kept = jtu.tree_map(
            lambda old, new: jnp.where(stop, old, new), state, new_state
        )
        return (kept, stop), (record, aux, ~halted)

    def skip(carry: Any) -> Any:
        shapes = jax.eval_shape(generation, carry)[1]
        return carry, jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step(carry: Any, i: Array) -> Any:
        # `i < num_active` is the same for every run: the padded steps of a short
        # chunk cost nothing.
        return jax.lax.cond(i < num_active, generation, skip, carry)

    (state, halted), out = jax.lax.scan(
        step, (state, halted), jnp.arange(program.chunk_size)
    )
    return state, halted, out


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts compilations; tests read it
def run_chunk(
    program: ChunkProgram,
    strategy: AnyStrategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    run_key: PRNGKey | PRNGKeys,
    state: StrategyState,
    halted: Array,
    num_active: Array,
) -> tuple[StrategyState, Array, Any, Any]:
    """Run one chunk of generations of every run the program holds, on device.

    Returns `(state, halted, (records, best_aux, valid), aux_static)`: per
    generation (axis after the run axis, if any) the `tell` records, the
    generation-best genome's aux and whether the generation ran.
    `eqx.debug.get_num_traces(run_chunk)` counts the programs compiled.
    """
    aux_static: list[Any] = []

    def one_run(
        strategy: AnyStrategy, fitness_fn: Any, run_key: Any, state: Any, halted: Array
    ) -> Any:
        return _scan_generations(
            program,
            strategy,
            fitness_fn,
            run_key,
            state,
            halted,
            num_active,
            aux_static,
        )

    def run(run_key: Any, state: StrategyState, halted: Array) -> Any:
        if program.batch == "none":
            return one_run(strategy, fitness_fn, run_key, state, halted)
        # Runs go one after another (a scan, not a vmap): a vmapped run axis
        # would batch tell's reductions and linear algebra, whose bits then
        # differ from a run of its own.
        if program.batch == "seeds":
            return jax.lax.map(
                lambda args: one_run(strategy, fitness_fn, *args),
                (run_key, state, halted),
            )
        strategy_arrays, strategy_static = eqx.partition(strategy, eqx.is_array)
        fn_arrays, fn_static = eqx.partition(fitness_fn, eqx.is_array)

        def each(args: Any) -> Any:
            run_key, state, halted, strategy_r, fn_r = args
            return one_run(
                eqx.combine(strategy_r, strategy_static),
                eqx.combine(fn_r, fn_static),
                run_key,
                state,
                halted,
            )

        return jax.lax.map(each, (run_key, state, halted, strategy_arrays, fn_arrays))

    # With a mesh the whole chunk is one manual SPMD program: every device runs
    # ask/tell on the whole (replicated) state, the evaluation alone is split.
    state, halted, out = replicated(run, program.settings.mesh)(run_key, state, halted)
    return state, halted, out, aux_static[-1]


__all__ = ["Batch", "ChunkProgram", "generation_step", "run_chunk"]
