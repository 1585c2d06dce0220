"""evolve(): THE generation loop, on device, in compiled chunks.

One generation is `ask -> evaluate -> tell`. Generations run under `lax.scan` in
chunks of `chunk_size`; every chunk is the same compiled program (a shorter
chunk masks its unused steps with an unbatched `lax.cond`), so a run compiles
once whatever `num_generations` is, and a resumed run reuses the program. The
host receives each chunk's per-generation scalars once, while the next chunk
already runs, through `callback`, which can also stop the loop.

Everything that runs generations goes through here: the Python API, `eqxevo
run`/`resume`, the benchmark harness and studies.

Key schedule (what a hand-written loop must do to reproduce `evolve` exactly):

    init_key, run_key = jax.random.split(key)             # one seed
    state = strategy.init(init_key)
    for g in range(num_generations):                      # g == state.generation
        ask_key, eval_key, tell_key = eqxevo.generation_keys(run_key, g)
        population, state = strategy.ask(ask_key, state)
        fitness, aux = eqxevo.evaluate(eval_key, fitness_fn, population,
                                       filter_spec=strategy.filter_spec,
                                       maximize=strategy.maximize)
        state, metrics = strategy.tell(tell_key, population, fitness, state)

With `num_seeds=K`, seed k runs the schedule above from `jax.random.split(key,
K)[k]`. Keys depend on the generation index alone, so results do not depend on
`chunk_size`, and a run resumed from a saved state continues the same schedule.

Bits. Each stage (ask, evaluate, tell) is compiled inside the chunk as its own
computation (`_stage`), so XLA cannot fuse across stage boundaries (recompute
ask's sampling inside the fitness, contract a multiply in one stage with an add
in the next): a generation is the composition of the separately compiled
public calls, and `evolve` equals the hand-written loop above bit for bit. The
K seeds of `num_seeds=K` run one after another inside one program (not
vmapped), so each seed computes exactly what a run of its own computes. What
holds across devices and batch sizes is written in docs/reproducibility.md.
"""

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np
from jax.sharding import Mesh

from ._deprecated import key_first
from ._types import Array, Genome, Metrics, PRNGKey, PRNGKeys
from .evaluate import (
    AbstractPopulationFitness,
    check_batch_size,
    episode_ids,
    evaluate,
)
from .fidelity import MultiFidelity
from .fitness import best_index
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
        best_fitness: its fitness in the user's sign (shape `()` or `(K,)`). This
            is a *training* statistic: the best single evaluation seen, on the
            episodes selection used (see docs/reproducibility.md and held-out
            evaluation in `eqxevo.experiment`).
        history: per-generation NumPy arrays, shape `(G,)` or `(K, G)`:
            `generation`, `best`, `mean`, `std`, `min`, `max`, `num_nonfinite`,
            `best_so_far`, and `aux` (the generation-best genome's aux, if the
            fitness function returns one). With a `MultiFidelity` also
            `agent_steps` (spent per generation) and `agent_steps_full` (what a
            full evaluation of every genome would spend); the statistics are
            over the combined fitness.
        state: the final strategy state (batched over seeds with `num_seeds`).
        stopped: True when the callback stopped the loop early.
    """

    best_genome: Genome
    best_fitness: Array
    history: dict[str, Any]
    state: StrategyState
    stopped: bool = eqx.field(static=True, default=False)


@dataclasses.dataclass(frozen=True)
class Chunk:
    """What `evolve`'s callback receives after each chunk of generations.

    Attributes:
        history: this chunk's per-generation NumPy arrays, shaped `(n,)` or
            `(K, n)` (the same fields as `EvolveResult.history`).
        generation: generations completed after this chunk (`state.generation`).
        num_generations: the generation this `evolve` call stops at.
        state: the strategy state after this chunk (for checkpoints); batched
            over seeds with `num_seeds`.
        best_fitness: best fitness so far in the user's sign, `()` or `(K,)`.
        seconds: wall time from the `evolve` call until this chunk's results
            were ready (compilation included).
    """

    history: dict[str, Any]
    generation: int
    num_generations: int
    state: StrategyState
    best_fitness: np.ndarray
    seconds: float

    def __getitem__(self, name: str) -> Any:
        warnings.warn(
            "evolve's callback now receives an eqxevo.Chunk; read chunk.history"
            f"[{name!r}] instead of chunk[{name!r}]",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.history[name]


Callback = Callable[[Chunk], bool | None]
"""`callback(chunk) -> bool | None`: return True to stop after this chunk."""


def generation_keys(run_key: PRNGKey, generation: Array | int) -> tuple[PRNGKey, ...]:
    """`(ask_key, eval_key, tell_key)` of one generation (see the module docstring)."""
    ask_key, eval_key, tell_key = jr.split(jr.fold_in(run_key, generation), 3)
    return ask_key, eval_key, tell_key


def _stage(fn: Callable[..., Any], pred: Array) -> Callable[..., Any]:
    """`fn`, compiled as a computation of its own inside the enclosing program.

    XLA fuses freely within a computation, and its optimisation barriers are
    removed before fusion on CPU, so they cannot keep two stages apart. The
    branches of a `lax.cond` are separate computations that fusion never
    crosses: with a predicate XLA cannot evaluate (`pred` is always true at
    run time), `fn` runs as the branch, on materialised inputs, like a call of
    its own jitted program. The other branch (zeros) never runs.
    """

    def staged(*args: Any) -> Any:
        dynamic, static = eqx.partition(args, eqx.is_array)
        out_static: list[Any] = []

        def run(dynamic: Any) -> Any:
            out = fn(*eqx.combine(dynamic, static))
            out_dynamic, out_static_part = eqx.partition(out, eqx.is_array)
            out_static.append(out_static_part)
            return out_dynamic

        shapes = jax.eval_shape(run, dynamic)

        def never(dynamic: Any) -> Any:
            del dynamic
            return jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        out_dynamic = jax.lax.cond(pred, run, never, dynamic)
        return eqx.combine(out_dynamic, out_static[-1])

    return staged


def generation_step(
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    run_key: PRNGKey,
    state: StrategyState,
    *,
    mesh: Mesh | None = None,
    batch_size: int | None = None,
    episodes: Any = "shared",
) -> tuple[StrategyState, Metrics, Any]:
    """One generation: ask, evaluate, tell. Returns `(state, record, best_aux)`.

    `record` holds the generation index and `tell`'s metrics; `best_aux` is the
    array part of the generation-best genome's aux (its other leaves are static
    and returned as they are).
    """
    ask_key, eval_key, tell_key = generation_keys(run_key, state.generation)
    always = state.generation >= 0

    def evaluate_stage(key: PRNGKey, population: Any) -> Any:
        return evaluate(
            key,
            fitness_fn,
            population,
            filter_spec=strategy.filter_spec,
            maximize=strategy.maximize,
            mesh=mesh,
            batch_size=batch_size,
            episodes=episodes,
        )

    population, state_asked = _stage(strategy.ask, always)(ask_key, state)
    fitness, aux = _stage(evaluate_stage, always)(eval_key, population)
    new_state, metrics = _stage(strategy.tell, always)(
        tell_key, population, fitness, state_asked
    )
    record = {"generation": state.generation, **metrics}
    best = best_index(fitness, strategy.maximize)
    best_aux = jtu.tree_map(lambda a: a[best] if eqx.is_array(a) else a, aux)
    return new_state, record, best_aux


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=None)  # counts traces; tests read it
def _run_chunk(
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    run_key: PRNGKey | PRNGKeys,
    state: StrategyState,
    halted: Array,
    num_active: Array,
    chunk_size: int,
    halt_on_nonfinite: bool,
    batch: Literal["none", "seeds", "runs"],
    mesh: Mesh | None,
    batch_size: int | None,
    episodes: Any,
) -> tuple[StrategyState, Array, Any, Any]:
    aux_static: list[Any] = []

    def one_run(
        strategy: Strategy,
        fitness_fn: Any,
        run_key: PRNGKey,
        state: StrategyState,
        halted: Array,
    ) -> Any:
        def generation(carry: Any) -> Any:
            state, halted = carry
            new_state, record, aux = generation_step(
                strategy,
                fitness_fn,
                run_key,
                state,
                mesh=mesh,
                batch_size=batch_size,
                episodes=episodes,
            )
            aux, static = eqx.partition(aux, eqx.is_array)
            aux_static.append(static)
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
            # `i < num_active` is the same for every run: the padded steps of a
            # short chunk cost nothing.
            return jax.lax.cond(i < num_active, generation, skip, carry)

        (state, halted), out = jax.lax.scan(
            step, (state, halted), jnp.arange(chunk_size)
        )
        return state, halted, out

    def run(run_key: Any, state: StrategyState, halted: Array) -> Any:
        if batch == "none":
            return one_run(strategy, fitness_fn, run_key, state, halted)
        # Runs go one after another (a scan, not a vmap): a vmapped run axis
        # would batch tell's reductions and linear algebra, whose bits then
        # differ from a run of its own.
        if batch == "seeds":
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
    state, halted, out = replicated(run, mesh)(run_key, state, halted)
    return state, halted, out, aux_static[-1]


@eqx.filter_jit
def _init_seeds(strategy: Strategy, keys: PRNGKeys) -> StrategyState:
    return jax.lax.map(strategy.init, keys)


@eqx.filter_jit
def _init_runs(strategy: Strategy, keys: PRNGKeys) -> StrategyState:
    arrays, static = eqx.partition(strategy, eqx.is_array)
    return jax.lax.map(
        lambda args: eqx.combine(args[1], static).init(args[0]), (keys, arrays)
    )


def run_keys(
    key: PRNGKey | PRNGKeys, num_seeds: int | None = None, runs: int | None = None
) -> tuple[Any, Any]:
    """`(init_key, run_key)` of a run (each with a leading axis K for K seeds or
    R for R runs)."""
    if runs is not None:
        return jax.vmap(lambda k: tuple(jr.split(k)))(key)
    if num_seeds is None:
        init_key, run_key = jr.split(key)
        return init_key, run_key
    seed_keys = jr.split(key, num_seeds)
    return jax.vmap(lambda k: tuple(jr.split(k)))(seed_keys)


def initial_state(
    key: PRNGKey | PRNGKeys,
    strategy: Strategy,
    num_seeds: int | None = None,
    runs: int | None = None,
) -> StrategyState:
    """The state `evolve(key, strategy, ..., num_seeds=..., runs=...)` starts from."""
    init_key, _ = run_keys(key, num_seeds, runs)
    if runs is not None:
        return _init_runs(strategy, init_key)
    if num_seeds is None:
        return strategy.init(init_key)
    return _init_seeds(strategy, init_key)


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
    stacked = jtu.tree_map(lambda *xs: jnp.stack(xs), *[arrays for arrays, _ in parts])
    return eqx.combine(stacked, static0)


def _check_runs(key: Any, strategy: Strategy, fitness_fn: Any, runs: int) -> None:
    """Raise a clear error unless `key`, `strategy`, `fitness_fn` carry R runs."""
    key_shape = tuple(jnp.shape(jr.key_data(key))) if _is_typed_key(key) else None
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


def _is_typed_key(key: Any) -> bool:
    return isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)


def _check_positive_int(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive Python int; got {value!r}")
    return value


def _is_ready(tree: Any) -> bool:
    """Whether every array of `tree` has been computed (never blocks)."""
    return all(
        getattr(leaf, "is_ready", lambda: True)()
        for leaf in jtu.tree_leaves(tree)
        if isinstance(leaf, jax.Array)
    )


def _host(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jr.key_data(leaf)
    return np.asarray(leaf)


@key_first(old_position=2)
def evolve(
    key: PRNGKey | PRNGKeys,
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    *,
    num_generations: int,
    chunk_size: int = 10,
    num_seeds: int | None = None,
    callback: Callback | None = None,
    state: StrategyState | None = None,
    on_nonfinite: NonFinitePolicy = "rank_worst",
    mesh: Mesh | None = None,
    batch_size: int | None = None,
    episodes: Any = "shared",
    runs: int | None = None,
    chunk_seconds: float | None = None,
    align: int | None = None,
) -> EvolveResult:
    """Run `num_generations` generations of `strategy` on `fitness_fn`, on device.

    Arguments:
        key: the run's key (see the module docstring for the schedule); R keys
            with `runs=R`.
        strategy: an `eqxevo.Strategy`.
        fitness_fn: `fitness_fn(genome, key) -> scalar | (scalar, aux)`, or an
            `eqxevo.MultiFidelity` (a cheap proxy for all, full evaluation for
            the best k).
        num_generations: generations to run in this call.
        chunk_size: generations per compiled chunk; the host sees results once per
            chunk. Results do not depend on it, and neither does the compiled
            program's count (a short last chunk reuses it).
        num_seeds: K independent runs in one compiled program; every result gets
            a leading axis K. None for a single run.
        callback: `callback(chunk: eqxevo.Chunk) -> bool | None`, called on the
            host after each chunk (while the next one already runs) with the
            chunk's history, the generation reached, the state (for
            checkpoints) and the wall time. Return True to stop: `evolve`
            returns the state after that chunk (the chunk already running is
            waited for and dropped).
        state: continue from this state (from `EvolveResult.state`) instead of
            `strategy.init`; generation indices, and so keys, carry on. It must
            come from this strategy (and the same `num_seeds`).
        on_nonfinite: "rank_worst" ranks genomes with NaN/inf fitness worst and
            counts them in `history["num_nonfinite"]`; "raise" stops at the first
            such generation with `NonFiniteFitnessError` naming it.
        mesh: split each generation's evaluation over the devices of this mesh
            (`eqxevo.population_mesh()`, or `eqxevo.initialize_distributed(...)`
            for several processes); `ask`/`tell` and the state stay replicated.
            `population_size` (and a `MultiFidelity`'s `num_promoted`) must be a
            multiple of the number of devices.
        batch_size: evaluate this many genomes at a time (per device) to bound
            the lifetimes' memory; see `evaluate`.
        episodes: `"shared"` (default: every genome of a generation plays the
            same episodes), `"per_genome"` (genome i its own, mirrored pairs
            sharing; `strategy.episode_ids`) or an integer array of P episode
            ids; see `evaluate`.
        runs: R runs that differ only in array values, in one program: `key`
            holds R keys, and `strategy` and `fitness_fn` are R of them stacked
            by `eqxevo.stack_runs` (other params, initial genomes, environment
            variants). Run r equals `evolve(key[r], strategy_r, fitness_fn_r)`
            bit for bit; every result gets a leading axis R. Not with
            `num_seeds`.
        chunk_seconds: aim for chunks of about this many seconds: the first two
            chunks run one generation each, later ones as many generations (at
            most `chunk_size`) as the measured time per generation fits in
            `chunk_seconds`. The host then hears from a long run every few
            seconds. The chunk length is a traced value: nothing recompiles, and
            results do not depend on it. None (default): `chunk_size` always.
        align: chunks also end at every multiple of `align` generations
            (counted from generation 0, so a resumed run ends chunks at the same
            generations), so the callback sees the state there: host work that
            must happen at fixed generations (`eqxevo run`'s held-out
            evaluations every `run.eval_every`) hangs on it. The chunk length is
            traced: nothing recompiles, and results do not depend on it.

    Returns:
        An `EvolveResult`.

    Example:
        >>> result = eqxevo.evolve(jr.key(0), strategy, fitness_fn, num_generations=100)
        >>> result.history["best"]  # one value per generation
    """
    if not isinstance(strategy, Strategy):
        raise TypeError(
            f"strategy must be an eqxevo.Strategy; got {type(strategy).__name__}"
        )
    _check_positive_int("num_generations", num_generations)
    _check_positive_int("chunk_size", chunk_size)
    if num_seeds is not None:
        _check_positive_int("num_seeds", num_seeds)
    if runs is not None:
        _check_positive_int("runs", runs)
        if num_seeds is not None:
            raise ValueError(
                "num_seeds and runs cannot be combined: give each seed its own run "
                f"key instead; got num_seeds={num_seeds}, runs={runs}"
            )
        _check_runs(key, strategy, fitness_fn, runs)
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
    if chunk_seconds is not None and not (
        isinstance(chunk_seconds, int | float)
        and not isinstance(chunk_seconds, bool)
        and math.isfinite(chunk_seconds)
        and chunk_seconds > 0
    ):
        raise ValueError(
            f"chunk_seconds must be a finite number > 0 or None; got {chunk_seconds!r}"
        )
    if align is not None:
        _check_positive_int("align", align)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable; got {type(callback).__name__}")
    check_divisible("population_size", strategy.population_size, mesh_size(mesh))
    if isinstance(fitness_fn, AbstractPopulationFitness):
        fitness_fn.check(strategy.population_size, mesh)
    elif not callable(fitness_fn):
        raise TypeError(
            "fitness_fn must be callable as fitness_fn(genome, key) or be an "
            f"eqxevo.MultiFidelity; got {type(fitness_fn).__name__}"
        )
    if isinstance(episodes, str) and episodes == "per_genome":
        episodes = strategy.episode_ids
    episode_ids(episodes, strategy.population_size)  # checks it
    count = runs if runs is not None else num_seeds
    batched = count is not None
    batch = "runs" if runs is not None else "seeds" if batched else "none"
    _, run_key = run_keys(key, num_seeds, runs)
    if state is None:
        state = initial_state(key, strategy, num_seeds, runs)
    halted = jnp.zeros(() if count is None else (count,), jnp.bool_)
    strategy.check_state(state, () if count is None else (count,))
    # With a mesh, everything the chunks carry lives whole on every device (and
    # every process): the strategy state is replicated, only evaluation splits.
    state, run_key, halted = replicate((state, run_key, halted), mesh)
    start_generation = int(np.max(np.asarray(state.generation)))
    stop_generation = start_generation + num_generations
    started = time.perf_counter()
    fidelity = fitness_fn if isinstance(fitness_fn, MultiFidelity) else None

    chunks: list[dict[str, Any]] = []
    # With chunk_seconds, the next chunk's length follows the measured seconds
    # per generation (time between two finished chunks over its generations).
    pace = {"planned": 1 if chunk_seconds is not None else chunk_size, "at": started}

    def plan(num_active: int, now: float) -> None:
        per_generation = (now - pace["at"]) / num_active
        pace["at"] = now
        if chunk_seconds is not None:
            fits = int(chunk_seconds / max(per_generation, 1e-9))
            pace["planned"] = max(1, min(chunk_size, fits))

    def receive(
        out: Any,
        aux_static: Any,
        num_active: int,
        state_now: Any,
        ready_at: float | None,
    ) -> bool:
        """Hand a finished chunk to the host; True if the callback asks to stop."""
        record, aux, valid = jtu.tree_map(_host, jax.device_get(out))
        if ready_at is None:
            ready_at = time.perf_counter()
        plan(num_active, ready_at)
        take = (slice(None), slice(0, num_active)) if batched else slice(0, num_active)
        history = {k: np.asarray(v)[take] for k, v in record.items()}
        aux = eqx.combine(jtu.tree_map(lambda a: a[take], aux), aux_static)
        if jtu.tree_leaves(aux) or aux_static is not None:
            history["aux"] = aux
        valid = np.asarray(valid)[take]
        if fidelity is not None:
            size = strategy.population_size
            shape = history["generation"].shape
            history["agent_steps"] = np.full(
                shape, fidelity.agent_steps(size), np.int64
            )
            history["agent_steps_full"] = np.full(
                shape, fidelity.full_agent_steps(size), np.int64
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
        if callback is None:
            return False
        reached = int(history["generation"].max()) + 1
        # On the host: a device computation here would queue behind the chunk
        # already running and hold the host until it ends (no overlap left).
        best_fitness = np.asarray(jax.device_get(state_now.best_fitness))
        chunk = Chunk(
            history=history,
            generation=reached,
            num_generations=stop_generation,
            state=state_now,
            best_fitness=np.asarray(
                -best_fitness if strategy.maximize else best_fitness
            ),
            seconds=ready_at - started,
        )
        return bool(callback(chunk))

    pending: tuple[Any, ...] | None = None
    in_flight: Any = None
    stopped = False
    try:
        remaining = num_generations
        while remaining > 0:
            num_active = min(chunk_size, remaining, int(pace["planned"]))
            if align is not None:
                at = stop_generation - remaining
                num_active = min(num_active, align - at % align)
            remaining -= num_active
            next_state, halted, out, aux_static = _run_chunk(
                strategy,
                fitness_fn,
                run_key,
                state,
                halted,
                replicate(jnp.asarray(num_active, jnp.int32), mesh),
                chunk_size,
                on_nonfinite == "raise",
                batch,
                mesh,
                batch_size,
                episodes,
            )
            in_flight = next_state
            # The device now runs chunk c; meanwhile the host handles chunk c - 1.
            if pending is not None and receive(*pending):
                stopped = True
                break
            state = next_state
            # XLA:CPU runs a program holding a `lax.cond` (every chunk does)
            # within the dispatch: its results are then ready already, and
            # that is when the chunk ended (for timing and chunk_seconds).
            ready_at = time.perf_counter() if _is_ready(state) else None
            pending = (out, aux_static, num_active, state, ready_at)
        if not stopped:
            assert pending is not None
            stopped = receive(*pending)
    finally:
        # Return (or raise) only once the device is idle: a chunk still running
        # when the interpreter tears JAX down can crash the process.
        jax.block_until_ready(in_flight)

    axis = 1 if batched else 0
    history = _concatenate(chunks, axis)
    if batched:
        best_genome = strategy.layout.unflatten_population(state.best_flat)
    else:
        best_genome = strategy.layout.unflatten(state.best_flat)
    return EvolveResult(
        best_genome=best_genome,
        best_fitness=strategy.best_fitness(state),
        history=history,
        state=state,
        stopped=stopped,
    )


def compile_chunk(
    key: PRNGKey,
    strategy: Strategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    *,
    state: StrategyState,
    chunk_size: int = 10,
    num_seeds: int | None = None,
    on_nonfinite: NonFinitePolicy = "rank_worst",
    mesh: Mesh | None = None,
    batch_size: int | None = None,
    episodes: Any = "shared",
) -> jax.stages.Compiled:
    """Compile the chunk program `evolve` would run, ahead of time.

    Takes `evolve`'s arguments (and the state it will start from) and returns
    the compiled program, whose `memory_analysis()` and `cost_analysis()` are
    XLA's estimates. JAX keeps the executable, so the `evolve` call that
    follows with the same arguments does not compile again.
    """
    if isinstance(episodes, str) and episodes == "per_genome":
        episodes = strategy.episode_ids
    _, run_key = run_keys(key, num_seeds, None)
    halted = jnp.zeros(() if num_seeds is None else (num_seeds,), jnp.bool_)
    state, run_key, halted = replicate((state, run_key, halted), mesh)
    lowered = _run_chunk.lower(  # pyright: ignore[reportFunctionMemberAccess]
        strategy,
        fitness_fn,
        run_key,
        state,
        halted,
        replicate(jnp.asarray(1, jnp.int32), mesh),
        chunk_size,
        on_nonfinite == "raise",
        "seeds" if num_seeds is not None else "none",
        mesh,
        batch_size,
        episodes,
    )
    return lowered.compile().compiled


def _concatenate(chunks: list[dict[str, Any]], axis: int) -> dict[str, Any]:
    def join(*leaves: Any) -> Any:
        if isinstance(leaves[0], np.ndarray):
            return np.concatenate(leaves, axis=axis)
        return leaves[0]  # a static aux leaf: the same in every chunk

    return jtu.tree_map(join, *chunks)


__all__ = [
    "Callback",
    "Chunk",
    "EvolveResult",
    "NonFiniteFitnessError",
    "compile_chunk",
    "evolve",
    "generation_keys",
    "generation_step",
    "initial_state",
    "run_keys",
    "stack_runs",
]
