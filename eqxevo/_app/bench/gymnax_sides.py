"""The two sides of the gymnax suite: eqxevo's `evolve` and evosax's own route."""

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.random as jr

from eqxevo._src._types import PRNGKey
from eqxevo._src.evolve import Chunk, evolve
from eqxevo._src.registry import lookup_strategy
from eqxevo._src.sharding import population_mesh
from eqxevo._src.strategy.base import standard_promotion
from eqxevo._src.strategy.strategy import Strategy

from .gymnax_task import (
    Task,
    algorithm_overrides,
    fitness_for,
    gymnax_problem,
    initial_weights,
    mlp_from_flax,
)


@dataclasses.dataclass
class Case:
    """One seed of one side: the kept means and when each chunk finished."""

    seconds: list[float]  # wall time since the run started, per kept mean
    generations: list[int]  # generations done at each kept mean
    means: list[Any]  # MLPPolicy per kept mean
    wall_s: float
    cpu_s: float


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _finish(
    kept: list[tuple[float, int, Any]],
    mean_of: Callable[[Any], Any],
    clock: tuple[float, float],
) -> Case:
    """The `Case` of the kept `(seconds, generation, state)` triples, timed since
    `clock` (`_clock()` at the start); `mean_of(state)` is the search mean."""
    wall_s, cpu_s = time.perf_counter() - clock[0], time.process_time() - clock[1]
    return Case(
        seconds=[s for s, _, _ in kept],
        generations=[g for _, g, _ in kept],
        means=[mean_of(state) for _, _, state in kept],
        wall_s=wall_s,
        cpu_s=cpu_s,
    )


class EqxevoSide:
    """`eqxevo.evolve` on the task (one `Strategy` per seed: its starting mean).

    With `devices > 1` the population is split over that many devices
    (`population_mesh`); the results do not depend on it, only the time does.
    """

    def __init__(self, task: Task, algorithm: str, devices: int = 1):
        self.task = task
        self.algorithm = algorithm
        self.fitness = fitness_for(task)
        self.params, self.kwargs = algorithm_overrides(task, algorithm)
        self.mesh = None
        if devices > 1:
            self.mesh = population_mesh(jax.devices()[:devices])

    def strategy(self, seed: int) -> Strategy:
        """The preset's `Strategy`, starting from seed `seed`'s weights."""
        genome = mlp_from_flax(self.task, initial_weights(self.task, seed))
        return Strategy(
            self.algorithm,
            genome,
            self.task.population_size,
            maximize=True,
            params=self.params or None,
            **self.kwargs,
        )

    def compile(self) -> float:
        """Wall time of a first chunk (tracing, compilation and one chunk)."""
        start = time.perf_counter()
        # a seed no run uses: only the compiled program is kept
        result = evolve(
            jr.key(2**20),
            self.strategy(0),
            self.fitness,
            num_generations=self.task.chunk,
            chunk_size=self.task.chunk,
            mesh=self.mesh,
        )
        jax.block_until_ready(result.state)
        return time.perf_counter() - start

    def run(self, seed: int, generations: int) -> Case:
        """Seed `seed`'s search through `evolve`, the mean kept after every chunk."""
        strategy = self.strategy(seed)
        kept: list[tuple[float, int, Any]] = []

        def keep(chunk: Chunk) -> None:
            kept.append((chunk.seconds, chunk.generation, chunk.state))

        clock = _clock()
        result = evolve(
            jr.fold_in(jr.key(seed), 1),
            strategy,
            self.fitness,
            num_generations=generations,
            chunk_size=self.task.chunk,
            callback=keep,
            mesh=self.mesh,
        )
        jax.block_until_ready(result.state)
        # population-based algorithms have no mean: their best genome stands in
        return _finish(
            kept,
            strategy.mean if strategy.has_mean else strategy.best,
            clock,
        )


class EvosaxSide:
    """evosax's own route: `GymnaxProblem` and a jitted ask/eval/tell step."""

    @standard_promotion
    def __init__(self, task: Task, algorithm: str):
        self.task = task
        self.problem = gymnax_problem(task)
        resolved = lookup_strategy(algorithm)
        params, kwargs = algorithm_overrides(task, algorithm)
        solution = initial_weights(task, 0)
        self.es: Any = resolved.cls(
            population_size=task.population_size,
            solution=solution,
            **{**resolved.kwargs, **kwargs},
        )
        self.params = self.es.default_params.replace(**{**resolved.params, **params})
        es, problem, params = self.es, self.problem, self.params

        # evosax's examples' generation: ask, evaluate, tell the negated return
        # (evosax minimises), one jitted call per generation
        @jax.jit
        @standard_promotion
        def step(key: PRNGKey, state: Any, problem_state: Any) -> Any:
            key, key_ask, key_eval, key_tell = jr.split(key, 4)
            population, state = es.ask(key_ask, state, params)
            fitness, problem_state, _ = problem.eval(
                key_eval, population, problem_state
            )
            state, _ = es.tell(key_tell, population, -fitness, state, params)
            return key, state, problem_state

        self.step = step

    @standard_promotion
    def start(self, seed: int) -> tuple[Any, Any, Any]:
        """Seed `seed`'s `(key, evosax state, problem state)`: the step's carry."""
        key = jr.fold_in(jr.key(seed), 1)
        init_key, problem_key, run_key = jr.split(key, 3)
        solution = initial_weights(self.task, seed)
        state = self.es.init(init_key, solution, self.params)
        return run_key, state, self.problem.init(problem_key)

    def compile(self) -> float:
        """Wall time of a first chunk (tracing, compilation and one chunk)."""
        start = time.perf_counter()
        carry = self.start(2**20)
        for _ in range(self.task.chunk):
            carry = self.step(*carry)
        jax.block_until_ready(carry)
        return time.perf_counter() - start

    def run(self, seed: int, generations: int) -> Case:
        """Seed `seed`'s search: the step from Python, synced every chunk."""
        carry = self.start(seed)
        kept: list[tuple[float, int, Any]] = []
        clock = _clock()
        done = 0
        while done < generations:
            for _ in range(min(self.task.chunk, generations - done)):
                carry = self.step(*carry)
            done = min(done + self.task.chunk, generations)
            jax.block_until_ready(carry)
            kept.append((time.perf_counter() - clock[0], done, carry[1]))
        get_mean = standard_promotion(self.es.get_mean)
        return _finish(
            kept, lambda state: mlp_from_flax(self.task, get_mean(state)), clock
        )


def sides(task: Task, algorithm: str, *, sharded: bool = False) -> dict[str, Any]:
    """The sides to compare: eqxevo and evosax on one device each, and with
    `sharded` (and more than one device dividing P) eqxevo on every device
    (`eqxevo_sharded`)."""
    out: dict[str, Any] = {
        "eqxevo": EqxevoSide(task, algorithm),
        "evosax": EvosaxSide(task, algorithm),
    }
    count = jax.device_count()
    if sharded and count > 1 and task.population_size % count == 0:
        out["eqxevo_sharded"] = EqxevoSide(task, algorithm, devices=count)
    return out


__all__ = ["Case", "EqxevoSide", "EvosaxSide", "sides"]
