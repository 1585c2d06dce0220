"""evolve(): the generation loop, on device, in compiled chunks.

One generation is `ask -> evaluate -> tell`. Generations run under `lax.scan` in
chunks of `chunk_size`; every chunk is the same compiled program (the last,
shorter chunk masks its unused steps with an unbatched `lax.cond`), so a run
compiles once whatever `num_generations` is. The host receives each chunk's
per-generation scalars once, while the next chunk already runs.

Key schedule (what a hand-written loop must do to reproduce `evolve` exactly):

    init_key, run_key = jax.random.split(key)             # one seed
    state = strategy.init(init_key)
    for g in range(num_generations):                      # g == state.generation
        gen_key = jax.random.fold_in(run_key, g)
        ask_key, eval_key, tell_key = jax.random.split(gen_key, 3)
        population, state = strategy.ask(ask_key, state)
        fitness, aux = eqxevo.evaluate(fitness_fn, population, eval_key,
                                       filter_spec=strategy.filter_spec,
                                       maximize=strategy.maximize)
        state, metrics = strategy.tell(tell_key, population, fitness, state)

With `num_seeds=K`, seed k runs the schedule above from `jax.random.split(key, K)[k]`,
so `num_seeds=K` equals K separate runs. Keys depend on the generation index
alone, so results do not depend on `chunk_size`, and a run resumed from a saved
state continues the same schedule. Per-genome keys depend on the genome index
alone (see `evaluate`), so results do not depend on `mesh` (how many devices or
processes share the population) or `batch_size` either.

With `mesh=`, each chunk runs as one program per device (`sharding.replicated`):
`ask` and `tell` run on the whole, replicated state on every device, the
evaluation is split over the population axis, and the fitness is all-gathered
before `tell` (see `eqxevo.sharding`).
"""

import math
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh

from ._types import Array, Genome, Metrics, PRNGKey, PRNGKeys
from .evaluate import MultiFidelity, best_index, check_batch_size, evaluate
from .sharding import check_divisible, mesh_size, replicate, replicated
from .strategy import Strategy, StrategyState

NonFinitePolicy = Literal["rank_worst", "raise"]


class NonFiniteFitnessError(FloatingPointError):
    """Raised by `evolve(..., on_nonfinite="raise")` at the first bad generation.

    Attributes:
        generation: index of the generation that produced non-finite fitness.
        seed: index of the seed (None for a single-seed run).
        count: how many genomes were non-finite.
        state: the strategy state before that generation's update (the last good
            one; batched over seeds when `num_seeds` was given).
    """

    def __init__(
        self,
        generation: int,
        seed: int | None,
        count: int,
        population_size: int,
        state: StrategyState,
    ):
        where = f"generation {generation}" + ("" if seed is None else f" (seed {seed})")
        super().__init__(
            f"{count} of {population_size} genomes returned non-finite fitness (NaN or "
            f"inf) at {where}. The run stopped before that generation's update; "
            "error.state holds the last good state. Pass on_nonfinite='rank_worst' to "
            "rank such genomes worst and keep going."
        )
        self.generation = generation
        self.seed = seed
        self.count = count
        self.state = state


class EvolveResult(eqx.Module):
    """What `evolve` returns.

    Attributes:
        best_genome: the best genome found (a leading axis K with `num_seeds=K`).
        best_fitness: its fitness in the user's sign (shape `()` or `(K,)`).
        history: per-generation NumPy arrays, shape `(G,)` or `(K, G)`:
            `generation`, `best`, `mean`, `std`, `min`, `max`, `num_nonfinite`,
            `best_so_far`, and `aux` (the generation-best genome's aux, if the
            fitness function returns one). With a `MultiFidelity` also
            `agent_steps` (spent per generation) and `agent_steps_full` (what a
            full evaluation of every genome would spend); the statistics are
            over the combined fitness.
        state: the final strategy state (batched over seeds with `num_seeds`).
    """

    best_genome: Genome
    best_fitness: Array
    history: dict[str, Any]
    state: StrategyState


def generation_keys(run_key: PRNGKey, generation: Array | int) -> tuple[PRNGKey, ...]:
    """`(ask_key, eval_key, tell_key)` of one generation (see the module docstring)."""
    ask_key, eval_key, tell_key = jr.split(jr.fold_in(run_key, generation), 3)
    return ask_key, eval_key, tell_key


def _barrier(tree: Any) -> Any:
    dynamic, static = eqx.partition(tree, eqx.is_array)
    return eqx.combine(jax.lax.optimization_barrier(dynamic), static)


def generation_step(
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | MultiFidelity,
    run_key: PRNGKey,
    state: StrategyState,
    *,
    mesh: Mesh | None = None,
    batch_size: int | None = None,
) -> tuple[StrategyState, Metrics, Any]:
    """One generation: ask, evaluate, tell. Returns `(state, record, best_aux)`."""
    keys = generation_keys(run_key, state.generation)
    # Barriers at the stage boundaries keep XLA from optimising across stages
    # (fusing ask's unflatten into the fitness reductions, an FMA across the
    # boundary, or sharing ask's broadcast of the mean with tell, after which
    # tell's `x / std` may or may not become `x * (1 / std)` depending on the
    # surrounding program). Every stage sees opaque inputs, as in its own jitted
    # call, so a generation is bit-for-bit the composition of the public
    # ask/evaluate/tell calls, with or without a mesh. The buffers exist anyway.
    (ask_key, eval_key, tell_key), state = _barrier((keys, state))
    population, state_asked = strategy.ask(ask_key, state)
    population, state_asked = _barrier((population, state_asked))
    fitness, aux = evaluate(
        fitness_fn,
        population,
        eval_key,
        filter_spec=strategy.filter_spec,
        maximize=strategy.maximize,
        mesh=mesh,
        batch_size=batch_size,
    )
    fitness, aux = _barrier((fitness, aux))
    new_state, metrics = strategy.tell(tell_key, population, fitness, state_asked)
    record = {"generation": state.generation, **metrics}
    best_aux = jtu.tree_map(lambda a: a[best_index(fitness, strategy.maximize)], aux)
    return new_state, record, best_aux


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts traces; tests read it
def _run_chunk(
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | MultiFidelity,
    run_key: PRNGKey | PRNGKeys,
    state: StrategyState,
    halted: Array,
    num_active: Array,
    chunk_size: int,
    halt_on_nonfinite: bool,
    batched: bool,
    mesh: Mesh | None,
    batch_size: int | None,
) -> tuple[StrategyState, Array, Any]:
    def one_seed(run_key: PRNGKey, state: StrategyState, halted: Array) -> Any:
        def generation(carry: Any) -> Any:
            state, halted = carry
            new_state, record, aux = generation_step(
                strategy, fitness_fn, run_key, state, mesh=mesh, batch_size=batch_size
            )
            if not halt_on_nonfinite:
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
            # `i < num_active` is the same for every seed, so this cond stays a real
            # branch under the seed vmap: padded steps of the last chunk cost nothing.
            return jax.lax.cond(i < num_active, generation, skip, carry)

        (state, halted), out = jax.lax.scan(
            step, (state, halted), jnp.arange(chunk_size)
        )
        return state, halted, out

    run = jax.vmap(one_seed) if batched else one_seed
    # With a mesh the whole chunk is one manual SPMD program: every device runs
    # ask/tell on the whole (replicated) state, the evaluation alone is split.
    return replicated(run, mesh)(run_key, state, halted)


@eqx.filter_jit
def _init_seeds(strategy: Strategy, keys: PRNGKeys) -> StrategyState:
    return jax.vmap(strategy.init)(keys)


def _check_positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive Python int; got {value!r}")
    return value


def evolve(
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | MultiFidelity,
    key: PRNGKey,
    *,
    num_generations: int,
    chunk_size: int = 10,
    num_seeds: int | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
    state: StrategyState | None = None,
    on_nonfinite: NonFinitePolicy = "rank_worst",
    mesh: Mesh | None = None,
    batch_size: int | None = None,
) -> EvolveResult:
    """Run `num_generations` generations of `strategy` on `fitness_fn`, on device.

    Arguments:
        strategy: an `eqxevo.Strategy`.
        fitness_fn: `fitness_fn(genome, key) -> scalar | (scalar, aux)`, or an
            `eqxevo.MultiFidelity` (a cheap proxy for all, full evaluation for
            the best k).
        key: the run's key (see the module docstring for the schedule).
        num_generations: generations to run in this call.
        chunk_size: generations per compiled chunk; the host sees results once per
            chunk. Results do not depend on it.
        num_seeds: K independent runs in one compiled program; every result gets
            a leading axis K. None for a single run.
        callback: called on the host with each chunk's history (dict of NumPy
            arrays shaped `(n,)` or `(K, n)`), e.g. for progress or logging.
        state: continue from this state (from `EvolveResult.state`) instead of
            `strategy.init`; generation indices, and so keys, carry on.
        on_nonfinite: "rank_worst" ranks genomes with NaN/inf fitness worst and
            counts them in `history["num_nonfinite"]`; "raise" stops at the first
            such generation with `NonFiniteFitnessError` naming it.
        mesh: split each generation's evaluation over the devices of this mesh
            (`eqxevo.population_mesh()`, or `eqxevo.initialize_distributed(...)`
            for several processes); `ask`/`tell` and the state stay replicated.
            `population_size` (and a `MultiFidelity`'s `num_promoted`) must be a
            multiple of the number of devices. Results do not depend on it.
        batch_size: evaluate this many genomes at a time (per device) to bound
            the lifetimes' memory; see `evaluate`. Results do not depend on it.

    Returns:
        An `EvolveResult`.

    Example:
        >>> result = eqxevo.evolve(strategy, fitness_fn, jr.key(0), num_generations=100)
        >>> result.history["best"]  # one value per generation
    """
    _check_positive_int("num_generations", num_generations)
    _check_positive_int("chunk_size", chunk_size)
    if num_seeds is not None:
        _check_positive_int("num_seeds", num_seeds)
    if on_nonfinite not in ("rank_worst", "raise"):
        raise ValueError(
            f"on_nonfinite must be 'rank_worst' or 'raise'; got {on_nonfinite!r}"
        )
    check_batch_size(batch_size)
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh must be a jax.sharding.Mesh (eqxevo.population_mesh()) or None; "
            f"got {type(mesh).__name__}"
        )
    check_divisible("population_size", strategy.population_size, mesh_size(mesh))
    if isinstance(fitness_fn, MultiFidelity):
        fitness_fn.check(strategy.population_size, mesh)
    batched = num_seeds is not None
    if batched:
        seed_keys = jr.split(key, num_seeds)
        init_keys, run_key = jax.vmap(lambda k: tuple(jr.split(k)))(seed_keys)
        if state is None:
            state = _init_seeds(strategy, init_keys)
        halted = jnp.zeros((num_seeds,), jnp.bool_)
    else:
        init_key, run_key = jr.split(key)
        if state is None:
            state = eqx.filter_jit(strategy.init)(init_key)
        halted = jnp.zeros((), jnp.bool_)
    # With a mesh, everything the chunks carry lives whole on every device (and
    # every process): the strategy state is replicated, only evaluation splits.
    state, run_key, halted = replicate((state, run_key, halted), mesh)
    chunk_size = min(chunk_size, num_generations)
    num_chunks = math.ceil(num_generations / chunk_size)

    chunks: list[dict[str, Any]] = []

    def receive(out: Any, num_active: int, state_now: StrategyState) -> None:
        record, aux, valid = jax.device_get(out)
        take = (slice(None), slice(0, num_active)) if batched else slice(0, num_active)
        history = {k: np.asarray(v)[take] for k, v in record.items()}
        if aux is not None:
            history["aux"] = jtu.tree_map(lambda a: np.asarray(a)[take], aux)
        valid = np.asarray(valid)[take]
        if isinstance(fitness_fn, MultiFidelity):
            size = strategy.population_size
            shape = history["generation"].shape
            history["agent_steps"] = np.full(
                shape, fitness_fn.agent_steps(size), np.int64
            )
            history["agent_steps_full"] = np.full(
                shape, fitness_fn.full_agent_steps(size), np.int64
            )
        if on_nonfinite == "raise":
            bad = (history["num_nonfinite"] > 0) & valid
            if bad.any():
                seed, step = np.argwhere(bad)[0] if batched else (None, np.argmax(bad))
                generation = history["generation"][(seed, step) if batched else step]
                count = history["num_nonfinite"][(seed, step) if batched else step]
                raise NonFiniteFitnessError(
                    int(generation),
                    None if seed is None else int(seed),
                    int(count),
                    strategy.population_size,
                    state_now,
                )
        chunks.append(history)
        if callback is not None:
            callback(history)

    pending = None
    for c in range(num_chunks):
        num_active = min(chunk_size, num_generations - c * chunk_size)
        state, halted, out = _run_chunk(
            strategy,
            fitness_fn,
            run_key,
            state,
            halted,
            replicate(jnp.asarray(num_active, jnp.int32), mesh),
            chunk_size,
            on_nonfinite == "raise",
            batched,
            mesh,
            batch_size,
        )
        # The device now runs chunk c; meanwhile the host handles chunk c - 1.
        if pending is not None:
            receive(*pending, state)
        pending = (out, num_active)
    assert pending is not None
    receive(*pending, state)

    axis = 1 if batched else 0
    history = jtu.tree_map(lambda *xs: np.concatenate(xs, axis=axis), *chunks)
    if batched:
        best_genome = strategy.layout.unflatten_population(state.best_flat)
    else:
        best_genome = strategy.layout.unflatten(state.best_flat)
    return EvolveResult(
        best_genome=best_genome,
        best_fitness=strategy.best_fitness(state),
        history=history,
        state=state,
    )
