"""Brax: eqxevo against evosax's `BraxProblem` per generation, and eqxevo's
lifetime against a raw Brax `jit(vmap(scan))` at the same batch.

The sides and what they share: docs/performance.md, "How the harness measures".
"""

import time
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from ..config import from_dict
from ..envs.brax import BraxEnv
from ..evaluate import evaluate
from ..experiment import build
from .milestones import sample_population, time_evolve

HIDDEN = 32
"""Width of both hidden layers of every side's tanh MLP."""

BRAX_COLUMNS = [
    "side",
    "env",
    "backend",
    "population_size",
    "lifetime",
    "agent_steps_per_s",
    "compile_s",
    "eqxevo_over_side",
    "skipped",
]
"""The columns of the Brax table (`brax_comparison`'s records)."""


def _experiment(env: str, backend: str, population_size: int, num_steps: int) -> Any:
    return from_dict(
        {
            "env": {
                "name": f"brax:{env}",
                "options": {"backend": backend, "episode_length": num_steps},
            },
            "net": {"name": "mlp", "options": {"width": HIDDEN, "depth": 2}},
            "strategy": {"name": "open_es", "population_size": population_size},
            # one episode per lifetime, as BraxProblem evaluates
            "run": {"lifetime": num_steps, "reset_on_done": False},
        }
    )


def _median_time(fn: Any, repeats: int) -> tuple[float, float]:
    """`(first call's seconds, median of `repeats` later calls)`."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - start
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        walls.append(time.perf_counter() - start)
    return first, sorted(walls)[len(walls) // 2]


def eqxevo_brax(
    env: str, backend: str, population_size: int, num_steps: int, **kw: Any
) -> dict[str, Any]:
    """`evolve` on Brax, per generation (ask, the lifetimes with observation
    normalisation, tell)."""
    built = build(_experiment(env, backend, population_size, num_steps))
    timing = time_evolve(
        built, num_generations=kw["generations"], repeats=kw["repeats"]
    )
    return {
        "side": "eqxevo evolve",
        **timing,
        "agent_steps_per_s": population_size * num_steps / timing["generation_s"],
    }


def eqxevo_lifetimes(
    env: str, backend: str, population_size: int, num_steps: int, **kw: Any
) -> dict[str, Any]:
    """eqxevo's lifetimes of one population (`evaluate`), without ask and tell."""
    built = build(_experiment(env, backend, population_size, num_steps))
    population = sample_population(built)
    call = eqx.filter_jit(lambda key, pop: evaluate(key, built.fitness, pop)[0])
    first, wall = _median_time(lambda: call(jr.key(0), population), kw["repeats"])
    return {
        "side": "eqxevo lifetimes (evaluate)",
        "compile_s": max(first - wall, 0.0),
        "generation_s": wall,
        "agent_steps_per_s": population_size * num_steps / wall,
    }


def raw_brax(
    env: str, backend: str, population_size: int, num_steps: int, **kw: Any
) -> dict[str, Any]:
    """A hand-written `jit(vmap(scan))` of the same MLP acting in Brax: what
    eqxevo's lifetimes are measured against (no normalisation, no summaries)."""
    brax_env = BraxEnv(env, backend=backend, episode_length=num_steps).brax_env
    sizes = (brax_env.observation_size, HIDDEN, HIDDEN, brax_env.action_size)
    keys = jr.split(jr.key(1), len(sizes) - 1)
    layers = [
        (
            jr.normal(k, (population_size, n_in, n_out)) / jnp.sqrt(n_in),
            jnp.zeros((population_size, n_out)),
        )
        for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:], strict=True)
    ]

    def act(params: Any, obs: jax.Array) -> jax.Array:
        x = obs
        for w, b in params:
            x = jnp.tanh(x @ w + b)
        return x

    def lifetime(params: Any, key: jax.Array) -> jax.Array:
        def step(carry: Any, _: Any) -> Any:
            state, total, alive = carry
            state = brax_env.step(state, act(params, state.obs))
            total = total + alive * state.reward
            return (state, total, alive * (1.0 - state.done)), None

        first = brax_env.reset(key)
        (_, total, _), _ = jax.lax.scan(
            step, (first, jnp.float32(0.0), jnp.float32(1.0)), length=num_steps
        )
        return total

    with jax.numpy_dtype_promotion("standard"):
        call = jax.jit(jax.vmap(lifetime, in_axes=(0, None)))
        first, wall = _median_time(lambda: call(layers, jr.key(0)), kw["repeats"])
    return {
        "side": "raw Brax jit(vmap(scan))",
        "compile_s": max(first - wall, 0.0),
        "generation_s": wall,
        "agent_steps_per_s": population_size * num_steps / wall,
    }


def evosax_brax(
    env: str, backend: str, population_size: int, num_steps: int, **kw: Any
) -> dict[str, Any]:
    """evosax's `BraxProblem` with its observation normalisation and Open-ES,
    per generation, as its own examples run it."""
    from evosax.algorithms import Open_ES
    from evosax.problems import BraxProblem
    from evosax.problems.networks import MLP, tanh_output_fn

    brax_env = BraxEnv(env, backend=backend, episode_length=num_steps)
    policy = MLP(
        layer_sizes=(HIDDEN, HIDDEN, brax_env.action_size), output_fn=tanh_output_fn
    )
    with jax.numpy_dtype_promotion("standard"):
        problem = BraxProblem(
            env, policy, episode_length=num_steps, env_kwargs={"backend": backend}
        )
        key = jr.key(0)
        solution = problem.sample(key)
        strategy = Open_ES(population_size=population_size, solution=solution)
        params = strategy.default_params
        state = strategy.init(key, jax.tree.map(jnp.zeros_like, solution), params)
        problem_state = problem.init(key)
        ask, tell = jax.jit(strategy.ask), jax.jit(strategy.tell)

        def generations(count: int) -> Any:
            nonlocal state, problem_state
            k = key
            for _ in range(count):
                k, ask_key, eval_key, tell_key = jr.split(k, 4)
                population, state = ask(ask_key, state, params)
                fitness, problem_state, _ = problem.eval(
                    eval_key, population, problem_state
                )
                state, _ = tell(tell_key, population, -fitness, state, params)
            return state

        first, wall = _median_time(
            lambda: generations(kw["generations"]), kw["repeats"]
        )
    generation_s = wall / kw["generations"]
    return {
        "side": "evosax BraxProblem",
        "compile_s": max(first - wall, 0.0),
        "generation_s": generation_s,
        "agent_steps_per_s": population_size * num_steps / generation_s,
    }


def brax_comparison(
    *,
    quick: bool = False,
    repeats: int = 3,
    env: str = "ant",
    backend: str = "spring",
    population_size: int | None = None,
) -> list[dict[str, Any]]:
    """Every side on one Brax task; `eqxevo_over_side` is eqxevo's speed-up:
    `evolve` against `BraxProblem` per generation, eqxevo's lifetimes against
    the raw loop."""
    population_size = population_size or (16 if quick else 256)
    num_steps = 20 if quick else 1000
    args = {"generations": 2 if quick else 3, "repeats": repeats}
    rows: list[dict[str, Any]] = []
    for side, fn in (
        ("eqxevo evolve", eqxevo_brax),
        ("evosax BraxProblem", evosax_brax),
        ("eqxevo lifetimes (evaluate)", eqxevo_lifetimes),
        ("raw Brax jit(vmap(scan))", raw_brax),
    ):
        row: dict[str, Any]
        try:
            # Brax (in evosax's problem too) warns that it is unmaintained and is
            # not written for strict dtype promotion.
            with warnings.catch_warnings(), jax.numpy_dtype_promotion("standard"):
                warnings.filterwarnings("ignore", "Brax System", UserWarning)
                row = fn(env, backend, population_size, num_steps, **args)
        except ImportError as err:
            row = {"side": side, "skipped": f"cannot import: {err}"}
        except Exception as err:  # report it, time the others
            row = {"side": side, "skipped": f"failed: {type(err).__name__}: {err}"}
        row.update(
            env=env,
            backend=backend,
            population_size=population_size,
            lifetime=num_steps,
        )
        rows.append(row)
    for ours, theirs in ((rows[0], rows[1]), (rows[2], rows[3])):
        if ours.get("agent_steps_per_s") and theirs.get("agent_steps_per_s"):
            theirs["eqxevo_over_side"] = (
                ours["agent_steps_per_s"] / theirs["agent_steps_per_s"]
            )
    return rows


__all__ = [
    "BRAX_COLUMNS",
    "brax_comparison",
    "eqxevo_brax",
    "eqxevo_lifetimes",
    "evosax_brax",
    "raw_brax",
]
