"""The milestone workloads L0, L2 and L4, built as `eqxevo run` builds them and
timed through `eqxevo.evolve`; where an L0 step's time goes."""

import os
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src.evaluate import evaluate
from eqxevo._src.evolve import evolve
from eqxevo._src.rollout import rollout
from eqxevo._src.sharding import population_mesh

from ..config import Experiment, from_dict
from ..experiment.build import Built, build
from . import baselines, spawn
from .common import peak_memory, program_bytes, steady_times, time_call
from .hlo import loop_body_kernels

MILESTONES: dict[str, dict[str, Any]] = {
    "L0": {
        "env": {"name": "chemotaxis"},
        "net": {"name": "sparse_rate", "options": {"num_neurons": 64, "fan_in": 8}},
        "strategy": {"name": "snes", "population_size": 256},
        "run": {"lifetime": 1000},
    },
    "L2": {
        "env": {"name": "foraging"},
        "net": {"name": "sparse_rate", "options": {"num_neurons": 128, "fan_in": 8}},
        "strategy": {"name": "snes", "population_size": 256},
        "run": {"lifetime": 5000},
    },
    "L4": {
        "env": {"name": "long_horizon"},
        "net": {
            "name": "sparse_rate",
            "options": {
                "num_neurons": 128,
                "fan_in": 8,
                "plasticity": {"learning_rate": 0.01, "trace_decay": 0.9},
            },
        },
        "strategy": {"name": "snes", "population_size": 128},
        "run": {"lifetime": 20000},
    },
}
"""The workloads of ../shared/seeds/000 section 8, as experiment tables."""

TIMED_GENERATIONS: dict[str, int] = {"L0": 12, "L2": 3, "L4": 3}
"""Generations per timed chunk (full mode): a chunk of about 1 s or more on one
CPU core, so per-chunk costs weigh as in a real run (an L0 chunk of 3
generations made `evolve` 0.91x of the hand-fused program, one of 12 0.96x)."""

QUICK_SIZES: dict[str, tuple[int, int]] = {
    "L0": (32, 100),
    "L2": (32, 200),
    "L4": (16, 400),
}
"""(P, T) in quick mode (the CI smoke run)."""

BREAKDOWN_COLUMNS = [
    "variant",
    "population_size",
    "lifetime",
    "agent_steps_per_s",
    "kernels_per_step",
    "kernels_in_nested_loops",
]
"""The columns of the breakdown table (`l0_breakdown`'s records)."""


def milestone_experiment(name: str, *, quick: bool = False) -> Experiment:
    """The experiment of milestone `name` ("L0", "L2", "L4"), shrunk if `quick`."""
    if name not in MILESTONES:
        raise ValueError(
            f"milestone must be one of {', '.join(MILESTONES)} or 'all'; got {name!r}"
        )
    table = {k: dict(v) for k, v in MILESTONES[name].items()}
    if quick:
        population_size, lifetime = QUICK_SIZES[name]
        table["strategy"] = {**table["strategy"], "population_size": population_size}
        table["run"] = {**table["run"], "lifetime": lifetime}
    return from_dict(table)


def evolve_call(
    built: Built, chunk_size: int, *, mesh: Any = None, kept: list[Any] | None = None
) -> Any:
    """`call(n)`: `evolve` on `built` for n generations in chunks of
    `chunk_size` (one compiled program), its best fitness on device; a call
    of `chunk_size` generations leaves its `EvolveResult` in `kept`."""

    def call(generations: int) -> Any:
        result = evolve(
            built.key,
            built.strategy,
            built.fitness,
            num_generations=generations,
            chunk_size=chunk_size,
            mesh=mesh,
        )
        if kept is not None and generations == chunk_size:
            kept[:] = [result]
        return result.best_fitness

    return call


def time_evolve(
    built: Built,
    *,
    num_generations: int,
    repeats: int,
    mesh: Any = None,
    best_bits: bool = False,
) -> dict[str, Any]:
    """Compile time and steady per-generation time of `evolve` on `built`
    (sharded over `mesh` if given); with `best_bits`, also the timed runs' best
    fitness as hex bytes (`best_fitness_hex`; every call runs the same key).

    A generation's time is the difference between calls of `2 * num_generations`
    and `num_generations` generations (chunks of `num_generations`: one
    compiled program), so `evolve`'s fixed cost per call (checks, setup, the
    history's transfer) is `call_overhead_s`, apart.
    """
    kept: list[Any] = []
    call = evolve_call(built, num_generations, mesh=mesh, kept=kept)
    timing: dict[str, Any] = steady_times({"evolve": call}, num_generations, repeats)[
        "evolve"
    ]
    if best_bits:
        best = jax.device_get(kept[0].best_fitness)
        timing["best_fitness_hex"] = np.asarray(best).tobytes().hex()
    return timing


def sample_population(built: Built) -> Any:
    """One population as `evolve`'s first `ask` would give it (fixed keys)."""
    return built.strategy.ask(jr.key(0), built.strategy.init(jr.key(1)))[0]


def evaluation_bytes(built: Built) -> dict[str, int] | None:
    """XLA's planned memory for evaluating one generation's population."""
    strategy = built.strategy
    population = sample_population(built)
    return program_bytes(
        lambda pop, key: evaluate(
            key, built.fitness, pop, filter_spec=strategy.filter_spec
        )[0],
        population,
        jr.key(2),
    )


def time_milestone(
    name: str,
    *,
    quick: bool,
    num_generations: int,
    repeats: int,
    sharded: bool,
) -> dict[str, Any]:
    """`time_evolve` on milestone `name`, over every device if `sharded`.

    Meant for a child process that exposes the devices (`bench.spawn`).
    """
    built = build(milestone_experiment(name, quick=quick))
    mesh = None
    if sharded:
        mesh = population_mesh()
    timing = time_evolve(
        built, num_generations=num_generations, repeats=repeats, mesh=mesh
    )
    p, t = built.strategy.population_size, built.experiment.run.lifetime
    return {
        "num_devices": jax.device_count() if sharded else 1,
        **timing,
        "agent_steps_per_s": p * t / timing["generation_s"],
        "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def run_milestone(
    name: str,
    *,
    quick: bool = False,
    baselines_too: bool | None = None,
    repeats: int = 3,
    num_generations: int | None = None,
    sharded_devices: int | None = None,
) -> dict[str, Any]:
    """Time milestone `name`; returns one record.

    The record holds the workload, `compile_s`, `generation_s` (a steady
    generation's time, `time_evolve`), `call_overhead_s`, `agent_steps_per_s`
    (P T / `generation_s`), peak memory and XLA's planned bytes of one
    generation's evaluation; with `baselines_too` (L0 by default) the
    hand-written `baselines`, as ratios.

    `sharded_devices` (default: one per CPU core) > 1 adds the `sharded`
    figure, from a child process with that many devices.
    """
    experiment = milestone_experiment(name, quick=quick)
    built = build(experiment)
    p = built.strategy.population_size
    t = experiment.run.lifetime
    generations = num_generations or (2 if quick else TIMED_GENERATIONS[name])
    start = time.perf_counter()
    timing = time_evolve(built, num_generations=generations, repeats=repeats)
    record: dict[str, Any] = {
        "milestone": name,
        "quick": quick,
        "env": experiment.env.name,
        "net": experiment.net.name,
        "net_options": dict(experiment.net.options),
        "layout": getattr(getattr(built.genome, "layout", None), "name", None),
        "strategy": experiment.strategy.name,
        "population_size": p,
        "lifetime": t,
        "num_params": built.strategy.num_params,
        "generations_timed": generations,
        "repeats": repeats,
        **timing,
        "agent_steps_per_s": p * t / timing["generation_s"],
        "agent_steps_per_cpu_s": p * t / timing["generation_cpu_s"],
        **peak_memory(),
        "evaluation_program": evaluation_bytes(built),
    }
    devices = sharded_devices or os.cpu_count() or 1
    # the population must split evenly over the devices
    if devices > 1 and p % devices == 0:
        record["sharded"] = spawn.call(
            "eqxevo._app.bench.milestones:time_milestone",
            {
                "name": name,
                "quick": quick,
                "num_generations": generations,
                "repeats": repeats,
                "sharded": True,
            },
            num_devices=devices,
        ).result
    do_baselines = (name == "L0") if baselines_too is None else baselines_too
    if do_baselines:
        record["baselines"] = l0_baselines(built, record, quick=quick)
    record["wall_s"] = time.perf_counter() - start
    return record


def l0_baselines(
    built: Built, record: dict[str, Any], *, quick: bool
) -> list[dict[str, Any]]:
    """The hand-written alternatives on the same population and episodes.

    Every baseline evaluates `sample_population(built)` on the episode
    `evaluate(eval_key, ...)` gives every genome (shared episodes, as `evolve`
    evaluates) and checks its fitness against eqxevo's; the hand-fused programs
    run `evolve`'s whole schedule and check their per-generation best against
    `evolve`'s history (its first `COMPARED` generations). Ratios are
    `evolve`'s agent-steps/s over the baseline's: against the hand-fused
    programs from `evolve` timed beside them, in alternation, in wall
    (`evolve_over_baseline`) and CPU time (`evolve_over_baseline_cpu`); against
    the others from the record's figure.
    """
    strategy = built.strategy
    population = sample_population(built)
    env, params = built.env, built.env_params
    lifetime = record["lifetime"]
    eval_key = jr.key(3)
    out = [
        baselines.python_loop(
            population,
            env,
            params,
            eval_key,
            jitted="step",
            num_genomes=2,
            num_steps=min(lifetime, 20 if quick else 200),
        ),
        baselines.python_loop(
            population,
            env,
            params,
            eval_key,
            jitted="scan",
            num_genomes=4 if quick else 16,
            num_steps=lifetime,
        ),
    ]
    if built.experiment.env.name == "chemotaxis":
        out.append(
            baselines.numpy_vectorised(
                population,
                env,
                params,
                eval_key,
                num_steps=min(lifetime, 50 if quick else 200),
                repeats=record["repeats"],
            )
        )
    ours = record["agent_steps_per_s"]
    for b in out:
        b["evolve_over_baseline"] = ours / b["agent_steps_per_s"]
    # The hand-fused programs run `evolve`'s whole schedule: `evolve` is timed
    # again beside them, in alternation (`steady_times`), so the ratio compares
    # the two under the same load, in wall and in CPU time (unpinned, CPU time
    # also counts XLA:CPU's thread pool waiting: docs/performance.md).
    generations = record["generations_timed"]
    names = {False: "hand_fused", True: "hand_fused_genome_keys"}
    calls = {
        names[genome_keys]: baselines.hand_fused_call(
            strategy, built.fitness, built.key, genome_keys=genome_keys
        )
        for genome_keys in (False, True)
    }
    kept: list[Any] = []
    times = steady_times(
        {"evolve": evolve_call(built, generations, kept=kept), **calls},
        generations,
        record["repeats"],
    )
    history = kept[0].history
    steps = record["population_size"] * lifetime
    evolve_s, evolve_cpu_s = (times["evolve"][k] for k in TIMES)
    for name, call in calls.items():
        fused_s, fused_cpu_s = (times[name][k] for k in TIMES)
        out.append(
            {
                "baseline": name,
                **times[name],
                "agent_steps_per_s": steps / fused_s,
                # the programs are not bit-identical, and float32 differences
                # grow along a trajectory: the first generations are compared
                "matches_evolve": baselines.matches(
                    np.asarray(call(generations))[:COMPARED],
                    history["best"][:COMPARED],
                ),
                "evolve_generation_s": evolve_s,
                "evolve_generation_cpu_s": evolve_cpu_s,
                "evolve_over_baseline": fused_s / evolve_s,
                "evolve_over_baseline_cpu": fused_cpu_s / evolve_cpu_s,
            }
        )
    return out


COMPARED = 3
"""Generations whose best fitness a hand-fused program must match `evolve`'s
in (by L0's 12th generation the two trajectories drift apart by more than
float32 rounding)."""

TIMES = ("generation_s", "generation_cpu_s")
"""A steady generation's wall and CPU time (`steady_times`)."""


# -- where an L0 step's time goes -----------------------------------------------------


class _TrivialPolicy(eqx.Module):
    """`tanh(w * obs)`: a policy that costs almost nothing (2 in, 2 out)."""

    w: jax.Array
    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=2)

    def initial_state(self, key: jax.Array) -> jax.Array:
        del key
        return jnp.zeros(())

    def __call__(self, obs: jax.Array, state: jax.Array) -> Any:
        return jnp.tanh(self.w * obs), state

    def reinforce(self, reward: jax.Array, state: jax.Array) -> jax.Array:
        del reward
        return state


def l0_breakdown(*, quick: bool = False, repeats: int = 3) -> list[dict[str, Any]]:
    """Agent-steps/s and kernels per step of the L0 lifetime and its parts.

    The full `rollout`; the network alone (fed its own outputs); the environment
    alone (a plain scan of `step` with a trivial policy); and `rollout` with the
    trivial policy, with and without auto-reset. `kernels_per_step` counts what
    XLA:CPU runs per lifetime step (`bench.hlo.loop_body_kernels`; of those,
    `kernels_in_nested_loops` run inside the threefry loops of the step's keys).
    """
    built = build(milestone_experiment("L0", quick=quick))
    env, params = built.env, built.env_params
    p, t = built.strategy.population_size, built.experiment.run.lifetime
    population = sample_population(built)
    trivial = _TrivialPolicy(jnp.ones((p, 2)))

    def network_only(genome: Any, key: jax.Array) -> jax.Array:
        def body(carry: Any, _: None) -> Any:
            state, obs, total = carry
            action, state = genome(obs, state)
            return (state, action[:2], total + action[0]), None

        init = (genome.initial_state(key), jnp.zeros(2), jnp.zeros(()))
        return jax.lax.scan(body, init, None, length=t)[0][2]

    def env_only(genome: Any, key: jax.Array) -> jax.Array:
        obs, state = env.reset(key, params)

        def body(carry: Any, step: jax.Array) -> Any:
            state, obs, total = carry
            action = jnp.tanh(genome.w * obs)
            obs, state, reward, _, _ = env.step(
                jr.fold_in(key, step), state, action, params
            )
            return (state, obs, total + reward), None

        return jax.lax.scan(body, (state, obs, jnp.zeros(())), jnp.arange(t))[0][2]

    variants = [
        (
            "rollout, L0 network",
            population,
            lambda g, k: rollout(k, g, env, params, t)[0],
        ),
        ("network alone", population, network_only),
        ("environment alone (scan of step)", trivial, env_only),
        (
            "rollout, trivial policy, auto-reset",
            trivial,
            lambda g, k: rollout(k, g, env, params, t)[0],
        ),
        (
            "rollout, trivial policy, no reset",
            trivial,
            lambda g, k: rollout(k, g, env, params, t, reset_on_done=False)[0],
        ),
    ]
    rows = []
    for name, pop, fn in variants:
        # default arguments bind this iteration's values (a closure would see the
        # loop's last ones)
        run = eqx.filter_jit(lambda pop, key, fn=fn: evaluate(key, fn, pop)[0])
        _, wall, _ = time_call(lambda pop=pop, run=run: run(pop, jr.key(2)), repeats)
        text = (
            jax.jit(lambda pop, key, fn=fn: evaluate(key, fn, pop)[0])
            .lower(pop, jr.key(2))
            .compile()
            .as_text()
        )
        kernels = loop_body_kernels(text, trip_count=t)
        rows.append(
            {
                "variant": name,
                "population_size": p,
                "lifetime": t,
                "agent_steps_per_s": p * t / wall,
                "kernels_per_step": kernels["total"],
                "kernels_in_nested_loops": kernels["in_nested_loops"],
            }
        )
    return rows


__all__ = [
    "BREAKDOWN_COLUMNS",
    "MILESTONES",
    "QUICK_SIZES",
    "TIMED_GENERATIONS",
    "evaluation_bytes",
    "l0_baselines",
    "l0_breakdown",
    "milestone_experiment",
    "run_milestone",
    "sample_population",
    "time_evolve",
    "time_milestone",
]
