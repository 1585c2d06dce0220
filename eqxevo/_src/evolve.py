"""evolve(): THE generation loop's host side: compiled chunks, seeds and runs, a
callback per chunk that can stop it (the whole path: docs/architecture.md).
"""

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu
import numpy as np

from ._checks import positive_int
from ._types import Array, Genome, PRNGKey, PRNGKeys
from .evaluate import AbstractPopulationFitness, initial_carry
from .keys import run_keys
from .options import EvolveOptions
from .program import ChunkProgram, run_chunk
from .qd.map_elites import AnyStrategy, MapElites
from .runs import batch_of, check_runs, initial_state
from .sharding import check_divisible, mesh_size, replicate
from .strategy.base import StrategyState
from .strategy.strategy import Strategy


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


Callback = Callable[[Chunk], bool | None]
"""`callback(chunk) -> bool | None`: return True to stop after this chunk."""


@dataclasses.dataclass
class _Setup:
    """What `evolve` and `compile_chunk` prepare alike: the program and its inputs."""

    program: ChunkProgram
    run_key: Any
    state: StrategyState
    halted: Array
    options: EvolveOptions


def _prepare(
    key: PRNGKey | PRNGKeys,
    strategy: AnyStrategy,
    fitness_fn: Any,
    *,
    state: StrategyState | None,
    num_seeds: int | None = None,
    runs: int | None = None,
    options: EvolveOptions | None = None,
    **changes: Any,
) -> _Setup:
    """Check `evolve`'s arguments and build the chunk program and its inputs."""
    options = EvolveOptions.of(options, changes)
    if not isinstance(strategy, Strategy | MapElites):
        raise TypeError(
            f"strategy must be an eqxevo.Strategy or eqxevo.qd.MapElites; got "
            f"{type(strategy).__name__}"
        )
    if num_seeds is not None:
        positive_int("num_seeds", num_seeds)
    if runs is not None:
        positive_int("runs", runs)
        if num_seeds is not None:
            raise ValueError(
                "num_seeds and runs cannot be combined: give each seed its own run "
                f"key instead; got num_seeds={num_seeds}, runs={runs}"
            )
        # Every array of the stacked strategy and fitness must carry the run axis:
        # caught here, not as a shape error deep inside the traced program.
        check_runs(key, strategy, fitness_fn, runs)
    mesh = options.mesh
    # Named as the user set it (`population_size`), before the settings check it
    # under evaluate's own name.
    check_divisible("population_size", strategy.population_size, mesh_size(mesh))
    settings = options.evaluation(strategy)
    settings.check(strategy.population_size)
    if isinstance(fitness_fn, AbstractPopulationFitness):
        fitness_fn.check(strategy.population_size, settings)
    elif not callable(fitness_fn):
        raise TypeError(
            "fitness_fn must be callable as fitness_fn(genome, key) or be an "
            f"eqxevo.MultiFidelity; got {type(fitness_fn).__name__}"
        )
    program = ChunkProgram(
        chunk_size=options.chunk_size,
        halt_on_nonfinite=options.on_nonfinite == "raise",
        batch=batch_of(num_seeds, runs),
        settings=settings,
    )
    count = runs if runs is not None else num_seeds
    _, run_key = run_keys(key, num_seeds, runs)
    if state is None:
        state = initial_state(key, strategy, num_seeds, runs, fitness_fn)
    batch_shape = () if count is None else (count,)
    # A state from another strategy (or another `num_seeds`) would retrace the
    # program or fail inside it; `check_state` names the difference instead.
    strategy.check_state(state, batch_shape)
    _check_carry(state, fitness_fn, batch_shape)
    halted = jnp.zeros(batch_shape, jnp.bool_)
    # With a mesh, everything the chunks carry lives whole on every device (and
    # every process): the strategy state is replicated, only evaluation splits.
    state, run_key, halted = replicate((state, run_key, halted), mesh)
    return _Setup(program, run_key, state, halted, options)


def _check_carry(state: StrategyState, fitness_fn: Any, batch_shape: Any) -> None:
    """Raise unless `state` carries what `fitness_fn` carries between generations
    (running observation moments with observation normalisation, else nothing)."""
    want = jax.eval_shape(lambda: initial_carry(fitness_fn))
    got = state.evaluation
    want_shapes = jtu.tree_map(lambda x: (*batch_shape, *x.shape), want)
    got_shapes = jtu.tree_map(lambda x: tuple(x.shape), got)
    if jtu.tree_structure(want) != jtu.tree_structure(got) or jtu.tree_leaves(
        want_shapes
    ) != jtu.tree_leaves(got_shapes):
        raise ValueError(
            "state: it does not carry what the fitness function carries between "
            f"generations (state.evaluation is {type(got).__name__}, the fitness's "
            f"initial_carry() is {type(want).__name__}): a state from a run with "
            "observation normalisation on resumes only with it on, and off only "
            "with it off"
        )


class _Host:
    """The host's side of the chunks: histories, pacing, the callback."""

    def __init__(
        self,
        strategy: AnyStrategy,
        fitness_fn: Any,
        program: ChunkProgram,
        *,
        callback: Callback | None,
        stop_generation: int,
        chunk_seconds: float | None,
    ):
        self.strategy = strategy
        # What the fitness adds to each generation's history (a MultiFidelity's
        # agent-steps): fixed numbers, known before the first chunk.
        self.extra_fields = (
            fitness_fn.history_fields(strategy.population_size)
            if isinstance(fitness_fn, AbstractPopulationFitness)
            else {}
        )
        self.batched = program.batch != "none"
        self.halt_on_nonfinite = program.halt_on_nonfinite
        self.chunk_size = program.chunk_size
        self.callback = callback
        self.stop_generation = stop_generation
        self.chunk_seconds = chunk_seconds
        self.started = time.perf_counter()
        self.chunks: list[dict[str, Any]] = []
        # With chunk_seconds, the next chunk's length follows the measured seconds
        # per generation (time between two finished chunks over its generations).
        self.planned = 1 if chunk_seconds is not None else program.chunk_size
        self.last_ready = self.started

    def next_length(self, remaining: int, align: int | None) -> int:
        """Generations the next chunk runs."""
        length = min(self.chunk_size, remaining, self.planned)
        if align is not None:
            at = self.stop_generation - remaining
            length = min(length, align - at % align)
        return length

    def _pace(self, num_active: int, ready_at: float) -> None:
        per_generation = (ready_at - self.last_ready) / num_active
        self.last_ready = ready_at
        if self.chunk_seconds is not None:
            fits = int(self.chunk_seconds / max(per_generation, 1e-9))
            self.planned = max(1, min(self.chunk_size, fits))

    def _history(self, out: Any, aux_static: Any, num_active: int) -> Any:
        record, aux, valid = jtu.tree_map(_to_host, jax.device_get(out))
        take = (
            (slice(None), slice(0, num_active))
            if self.batched
            else slice(0, num_active)
        )
        # A short chunk ran `num_active` of its `chunk_size` steps: the rest are the
        # skipped steps' zeros, dropped here.
        history = {k: np.asarray(v)[take] for k, v in record.items()}
        aux = eqx.combine(jtu.tree_map(lambda a: a[take], aux), aux_static)
        if jtu.tree_leaves(aux) or aux_static is not None:
            history["aux"] = aux
        shape = history["generation"].shape
        for name, value in self.extra_fields.items():
            history[name] = np.full(shape, value, np.int64)
        return history, np.asarray(valid)[take]

    def _raise_if_nonfinite(
        self, history: dict[str, Any], valid: np.ndarray, state: Any
    ) -> None:
        # `valid` is False for generations after a run halted (frozen copies of its
        # last good state): only the first bad generation is reported.
        bad = (history["num_nonfinite"] > 0) & valid
        if not bad.any():
            return
        where = tuple(np.argwhere(bad)[0]) if self.batched else (int(np.argmax(bad)),)
        raise NonFiniteFitnessError(
            int(history["generation"][where]),
            int(where[0]) if self.batched else None,
            int(history["num_nonfinite"][where]),
            self.strategy.population_size,
            state,
        )

    def receive(
        self,
        out: Any,
        aux_static: Any,
        num_active: int,
        state: Any,
        ready_at: float | None,
    ) -> bool:
        """Take a finished chunk; True if the callback asks to stop."""
        history, valid = self._history(out, aux_static, num_active)
        self._pace(num_active, time.perf_counter() if ready_at is None else ready_at)
        if self.halt_on_nonfinite:
            self._raise_if_nonfinite(history, valid, state)
        self.chunks.append(history)
        if self.callback is None:
            return False
        # On the host: a device computation here would queue behind the chunk
        # already running and hold the host until it ends (no overlap left).
        best_fitness = np.asarray(jax.device_get(state.best_fitness))
        chunk = Chunk(
            history=history,
            generation=int(history["generation"].max()) + 1,
            num_generations=self.stop_generation,
            state=state,
            best_fitness=np.asarray(
                -best_fitness if self.strategy.maximize else best_fitness
            ),
            seconds=self.last_ready - self.started,
        )
        # The callback decides whether to stop (a signal, a budget, a target).
        return bool(self.callback(chunk))

    def history(self) -> dict[str, Any]:
        """Every chunk's history, joined along the generation axis."""

        def join(*leaves: Any) -> Any:
            if isinstance(leaves[0], np.ndarray):
                return np.concatenate(leaves, axis=1 if self.batched else 0)
            return leaves[0]  # a static aux leaf: the same in every chunk

        return jtu.tree_map(join, *self.chunks)


def evolve(
    key: PRNGKey | PRNGKeys,
    strategy: AnyStrategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    *,
    num_generations: int,
    num_seeds: int | None = None,
    runs: int | None = None,
    callback: Callback | None = None,
    state: StrategyState | None = None,
    options: EvolveOptions | None = None,
    **changes: Any,
) -> EvolveResult:
    """Run `num_generations` generations of `strategy` on `fitness_fn`, on device.

    Arguments:
        key: the run's key (its schedule: `eqxevo._src.keys`, docs/reproducibility.md);
            R keys with `runs=R`.
        strategy: an `eqxevo.Strategy`, or an `eqxevo.qd.MapElites` (its
            fitness function returns `(fitness, descriptor)`).
        fitness_fn: `fitness_fn(genome, key) -> scalar | (scalar, aux)`, or an
            `eqxevo.MultiFidelity` (a cheap proxy for all, full evaluation for
            the best k).
        num_generations: generations to run in this call.
        num_seeds: K independent runs in one compiled program; every result gets
            a leading axis K. None for a single run.
        runs: R runs that differ only in array values, in one program: `key`
            holds R keys, and `strategy` and `fitness_fn` are R of them stacked
            by `eqxevo.stack_runs` (other params, initial genomes, environment
            variants). Run r equals `evolve(key[r], strategy_r, fitness_fn_r)`
            bit for bit; every result gets a leading axis R. Not with
            `num_seeds`.
        callback: `callback(chunk: eqxevo.Chunk) -> bool | None`, called on the
            host after each chunk (while the next one already runs) with the
            chunk's history, the generation reached, the state (for
            checkpoints) and the wall time. Return True to stop: `evolve`
            returns the state after that chunk (the chunk already running is
            waited for and dropped).
        state: continue from this state (from `EvolveResult.state`) instead of
            `strategy.init`; generation indices, and so keys, carry on. It must
            come from this strategy (and the same `num_seeds`).
        options: an `eqxevo.EvolveOptions` (chunk size, devices, micro-batches,
            episodes, non-finite policy, chunk pacing); default
            `EvolveOptions()`.
        **changes: fields of `EvolveOptions` to change in `options`, e.g.
            `chunk_size=5, mesh=eqxevo.population_mesh()`.

    Returns:
        An `EvolveResult`.

    Example:
        >>> result = eqxevo.evolve(jr.key(0), strategy, fitness_fn, num_generations=100)
        >>> result.history["best"]  # one value per generation
    """
    positive_int("num_generations", num_generations)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable; got {type(callback).__name__}")
    setup = _prepare(
        key,
        strategy,
        fitness_fn,
        state=state,
        num_seeds=num_seeds,
        runs=runs,
        options=options,
        **changes,
    )
    options = setup.options
    state, halted = setup.state, setup.halted
    start_generation = int(np.max(np.asarray(state.generation)))
    host = _Host(
        strategy,
        fitness_fn,
        setup.program,
        callback=callback,
        stop_generation=start_generation + num_generations,
        chunk_seconds=options.chunk_seconds,
    )
    pending: tuple[Any, ...] | None = None
    in_flight: Any = None
    stopped = False
    try:
        remaining = num_generations
        while remaining > 0:
            num_active = host.next_length(remaining, options.align)
            remaining -= num_active
            next_state, halted, out, aux_static = run_chunk(
                setup.program,
                strategy,
                fitness_fn,
                setup.run_key,
                state,
                halted,
                replicate(jnp.asarray(num_active, jnp.int32), options.mesh),
            )
            in_flight = next_state
            # The device now runs chunk c; meanwhile the host handles chunk c - 1.
            if pending is not None and host.receive(*pending):
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
            stopped = host.receive(*pending)
    finally:
        # Return (or raise) only once the device is idle: a chunk still running
        # when the interpreter tears JAX down can crash the process.
        jax.block_until_ready(in_flight)

    if setup.program.batch != "none":
        best_genome = strategy.layout.unflatten_population(state.best_flat)
    else:
        best_genome = strategy.layout.unflatten(state.best_flat)
    return EvolveResult(
        best_genome=best_genome,
        best_fitness=strategy.best_fitness(state),
        history=host.history(),
        state=state,
        stopped=stopped,
    )


def compile_chunk(
    key: PRNGKey | PRNGKeys,
    strategy: AnyStrategy,
    fitness_fn: Callable[..., Any] | AbstractPopulationFitness,
    *,
    state: StrategyState,
    **arguments: Any,
) -> jax.stages.Compiled:
    """Compile the chunk program `evolve(key, strategy, fitness_fn, state=state,
    **arguments)` would run, ahead of time (`arguments`: `evolve`'s `num_seeds`,
    `runs`, `options` and option changes).

    Returns the compiled program, whose `memory_analysis()` and
    `cost_analysis()` are XLA's estimates; JAX keeps the executable, so the
    `evolve` call that follows does not compile again.
    """
    setup = _prepare(key, strategy, fitness_fn, state=state, **arguments)
    lowered = run_chunk.lower(  # pyright: ignore[reportFunctionMemberAccess]
        setup.program,
        strategy,
        fitness_fn,
        setup.run_key,
        setup.state,
        setup.halted,
        replicate(jnp.asarray(1, jnp.int32), setup.program.settings.mesh),
    )
    return lowered.compile().compiled


def _is_ready(tree: Any) -> bool:
    """Whether every array of `tree` has been computed (never blocks)."""
    return all(
        getattr(leaf, "is_ready", lambda: True)()
        for leaf in jtu.tree_leaves(tree)
        if isinstance(leaf, jax.Array)
    )


def _to_host(leaf: Any) -> Any:
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jr.key_data(leaf)
    return np.asarray(leaf)


__all__ = [
    "Callback",
    "Chunk",
    "EvolveResult",
    "NonFiniteFitnessError",
    "compile_chunk",
    "evolve",
]
