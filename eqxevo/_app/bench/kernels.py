"""Figures read from the compiled program, not a clock: kernels per lifetime step,
planned bytes per genome, and what donating a chunk's state saves."""

from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo._src.bits import fast_cpu_prng
from eqxevo._src.draws import draw_block
from eqxevo._src.evaluate import EvalSettings, evaluate
from eqxevo._src.keys import run_keys
from eqxevo._src.program import ChunkProgram, run_chunk

from ..config import from_dict
from ..experiment.build import Built, build
from .hlo import loop_body_kernels
from .milestones import MILESTONES, milestone_experiment, sample_population

KERNEL_OPTIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "copy insertion region analysis": {
        "xla_cpu_copy_insertion_use_region_analysis": True
    },
    "concurrency-optimised scheduler": {
        "xla_cpu_enable_concurrency_optimized_scheduler": True
    },
}
"""XLA:CPU compile options tried per milestone (jaxlib 0.10.2 accepts these)."""

KERNEL_COLUMNS = [
    "milestone",
    "option",
    "steps_per_trip",
    "kernels_per_step",
    "top_level",
    "in_nested_loops",
    "in_branches",
]
"""The columns of the kernels table (`milestone_kernels`'s records)."""

MEMORY_COLUMNS = [
    "trace_dtype",
    "population_sizes",
    "planned_bytes",
    "bytes_per_genome",
]
"""The columns of the memory table (`memory_per_genome`'s records)."""


def _evaluation(built: Built) -> tuple[Any, tuple[Any, ...]]:
    strategy = built.strategy

    def run(pop: Any, key: jax.Array) -> jax.Array:
        return evaluate(key, built.fitness, pop, filter_spec=strategy.filter_spec)[0]

    return run, (sample_population(built), jr.key(2))


def milestone_kernels(
    name: str, *, quick: bool = False, options: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """Kernels per lifetime step of evaluating milestone `name`'s population.

    One record per entry of `KERNEL_OPTIONS` (or those named in `options`).
    """
    built = build(milestone_experiment(name, quick=quick))
    run, args = _evaluation(built)
    lowered = jax.jit(run).lower(*args)
    lifetime = built.experiment.run.lifetime
    # A shared episode runs its lifetime as a loop over blocks of steps whose
    # draws are made ahead (`draws.draw_block`): a trip of that loop is
    # `block` steps, and its kernels are counted per step.
    block = draw_block(built.env, lifetime)
    rows = []
    for option in options or tuple(KERNEL_OPTIONS):
        text = lowered.compile(compiler_options=KERNEL_OPTIONS[option]).as_text()
        counts = loop_body_kernels(text, trip_count=lifetime // block)
        rows.append(
            {
                "milestone": name,
                "option": option,
                "population_size": built.strategy.population_size,
                "steps_per_trip": block,
                "kernels_per_step": counts["total"] / block,
                "top_level": counts["top_level"] / block,
                "in_nested_loops": counts["in_nested_loops"] / block,
                "in_branches": counts["in_branches"] / block,
                "by_opcode": {k: v / block for k, v in counts["by_opcode"].items()},
            }
        )
    return rows


def unrolled_threefry_kernels(name: str, quick: bool) -> list[dict[str, Any]]:
    """`milestone_kernels` with JAX's unrolled threefry lowering on CPU.

    JAX lowers threefry on CPU to a rolled 5-trip loop (jax/_src/random/
    threefry2x32.py) to save compile time; every `fold_in`/`split` in a step
    then runs a nested loop. `eqxevo.fast_cpu_prng` swaps in the unrolled
    lowering JAX uses on other backends. It changes the process's JAX for good:
    call this in a child (`bench.spawn`).
    """
    if not fast_cpu_prng():
        raise RuntimeError("fast_cpu_prng() could not register its lowering")
    rows = milestone_kernels(name, quick=quick, options=("default",))
    return [{**r, "option": "unrolled threefry (child process)"} for r in rows]


def _l4_with_traces(trace_dtype: str, population_size: int, lifetime: int) -> Built:
    table = {k: dict(v) for k, v in MILESTONES["L4"].items()}
    options = dict(table["net"]["options"])
    options["plasticity"] = {**options["plasticity"], "trace_dtype": trace_dtype}
    table["net"] = {**table["net"], "options": options}
    table["strategy"] = {**table["strategy"], "population_size": population_size}
    table["run"] = {**table["run"], "lifetime": lifetime}
    return build(from_dict(table))


def _planned(compiled: Any) -> dict[str, int]:
    analysis = compiled.memory_analysis()
    argument = int(analysis.argument_size_in_bytes)
    output = int(analysis.output_size_in_bytes)
    temp = int(analysis.temp_size_in_bytes)
    # an aliased buffer is both an argument and an output: count it once
    alias = int(analysis.alias_size_in_bytes)
    return {
        "argument_bytes": argument,
        "output_bytes": output,
        "temp_bytes": temp,
        "alias_bytes": alias,
        "planned_bytes": argument + output + temp - alias,
    }


def memory_per_genome(
    *,
    quick: bool = False,
    trace_dtypes: tuple[str, ...] = ("float32", "bfloat16", "float16"),
    population_sizes: tuple[int, int] | None = None,
) -> list[dict[str, Any]]:
    """Planned bytes of evaluating an L4 population, per trace dtype.

    For each trace dtype, the evaluation is compiled at two population sizes
    (default 32 and 128; quick 16 and 32); `bytes_per_genome` is the slope of
    `planned_bytes` (argument + output + temporary - aliased) between them, so
    what every program holds regardless of P drops out. Lifetime does not enter
    (the rollout keeps only running sums); it is the milestone's, or 400 quick.
    """
    small, large = population_sizes or ((16, 32) if quick else (32, 128))
    lifetime = 400 if quick else MILESTONES["L4"]["run"]["lifetime"]
    rows = []
    for trace_dtype in trace_dtypes:
        planned = {}
        for p in (small, large):
            built = _l4_with_traces(trace_dtype, p, lifetime)
            run, args = _evaluation(built)
            planned[p] = _planned(jax.jit(run).lower(*args).compile())
        # what every program holds regardless of P cancels in the difference
        slope = (planned[large]["planned_bytes"] - planned[small]["planned_bytes"]) / (
            large - small
        )
        rows.append(
            {
                "milestone": "L4",
                "trace_dtype": trace_dtype,
                "population_sizes": [small, large],
                "planned_bytes": [
                    planned[small]["planned_bytes"],
                    planned[large]["planned_bytes"],
                ],
                "temp_bytes": [
                    planned[small]["temp_bytes"],
                    planned[large]["temp_bytes"],
                ],
                "bytes_per_genome": slope,
            }
        )
    return rows


def chunk_donation(
    *, quick: bool = False, population_size: int | None = None, chunk_size: int = 2
) -> dict[str, Any]:
    """Planned bytes of one L4 `evolve` chunk, its state carry donated or not.

    The chunk program takes the strategy state and returns the next one; with
    the state donated XLA may write the result into the argument's buffers.
    """
    p = population_size or (16 if quick else 128)
    built = _l4_with_traces("float32", p, 400 if quick else 20000)
    strategy = built.strategy
    state = strategy.init(jr.key(1))
    # one run, no seeds axis: `evolve`'s own run key
    _, run_key = run_keys(built.key, None, None)

    def chunk(state: Any, halted: jax.Array) -> Any:
        program = ChunkProgram(chunk_size, False, "none", EvalSettings())
        return run_chunk(
            program,
            strategy,
            built.fitness,
            run_key,
            state,
            halted,
            jnp.asarray(chunk_size, jnp.int32),
        )[:2]

    halted = jnp.zeros((), jnp.bool_)
    plain = _planned(jax.jit(chunk).lower(state, halted).compile())
    donated = _planned(
        jax.jit(chunk, donate_argnums=(0,)).lower(state, halted).compile()
    )
    state_bytes = sum(x.nbytes for x in jax.tree_util.tree_leaves(state))
    return {
        "milestone": "L4",
        "population_size": p,
        "chunk_size": chunk_size,
        "state_bytes": state_bytes,
        "plain": plain,
        "donated": donated,
        "saved_bytes": plain["planned_bytes"] - donated["planned_bytes"],
        "saved_fraction": (plain["planned_bytes"] - donated["planned_bytes"])
        / plain["planned_bytes"],
    }


__all__ = [
    "KERNEL_COLUMNS",
    "KERNEL_OPTIONS",
    "MEMORY_COLUMNS",
    "chunk_donation",
    "memory_per_genome",
    "milestone_kernels",
    "unrolled_threefry_kernels",
]
