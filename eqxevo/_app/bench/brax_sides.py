"""Brax: eqxevo against evosax's `BraxProblem` per generation, and eqxevo's
lifetime against a raw Brax `jit(vmap(scan))` at the same batch.

The sides and what they share: docs/performance.md, "How the harness measures".
"""

import functools
import warnings
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo._src.envs.brax import BraxEnv
from eqxevo._src.evaluate import evaluate

from ..config import from_dict
from ..experiment.build import build
from .common import SIDE_COLUMNS, compare_sides, evosax_loop, time_call
from .milestones import sample_population, time_evolve

HIDDEN = 32
"""Width of both hidden layers of every side's tanh MLP."""

BRAX_COLUMNS = ["side", "env", "backend", *SIDE_COLUMNS]
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
    first, wall, _ = time_call(lambda: call(jr.key(0), population), kw["repeats"])
    return _row("eqxevo lifetimes (evaluate)", first, wall, population_size * num_steps)


def _row(
    side: str, first: float, wall: float, steps: int, generations: int = 1
) -> dict[str, Any]:
    """A side's row: compilation (the first call's excess), seconds per
    generation and agent-steps per second, from `time_call`'s first and steady
    wall times of `generations` generations of `steps` agent-steps each."""
    generation_s = wall / generations
    return {
        "side": side,
        "compile_s": max(first - wall, 0.0),
        "generation_s": generation_s,
        "agent_steps_per_s": steps / generation_s,
    }


def raw_brax(
    env: str, backend: str, population_size: int, num_steps: int, **kw: Any
) -> dict[str, Any]:
    """A hand-written `jit(vmap(scan))` of the same MLP acting in Brax: what
    eqxevo's lifetimes are measured against (no normalisation, no summaries)."""
    adapter = BraxEnv(env, backend=backend, episode_length=num_steps)
    brax_env = adapter.inner_env
    # the adapter's sizes: Brax's own `observation_size` runs a reset eagerly
    sizes = (adapter.obs_size, HIDDEN, HIDDEN, adapter.action_size)
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
        first, wall, _ = time_call(lambda: call(layers, jr.key(0)), kw["repeats"])
    return _row("raw Brax jit(vmap(scan))", first, wall, population_size * num_steps)


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
    problem = BraxProblem(
        env, policy, episode_length=num_steps, env_kwargs={"backend": backend}
    )
    key = jr.key(0)
    solution = problem.sample(key)
    strategy = Open_ES(population_size=population_size, solution=solution)
    generations = evosax_loop(strategy, problem, key, solution)
    count = kw["generations"]
    first, wall, _ = time_call(lambda: generations(count), kw["repeats"])
    steps = population_size * num_steps
    return _row("evosax BraxProblem", first, wall, steps, generations=count)


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
    sides = (
        ("eqxevo evolve", eqxevo_brax),
        ("evosax BraxProblem", evosax_brax),
        ("eqxevo lifetimes (evaluate)", eqxevo_lifetimes),
        ("raw Brax jit(vmap(scan))", raw_brax),
    )

    def measure(fn: Any) -> dict[str, Any]:
        # Brax (in evosax's problem too) warns that it is unmaintained and is
        # not written for strict dtype promotion.
        with warnings.catch_warnings(), jax.numpy_dtype_promotion("standard"):
            warnings.filterwarnings("ignore", "Brax System", UserWarning)
            return fn(env, backend, population_size, num_steps, **args)

    rows = compare_sides([(side, functools.partial(measure, fn)) for side, fn in sides])
    for row in rows:
        row.update(env=env, backend=backend, lifetime=num_steps)
        row["population_size"] = population_size
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
