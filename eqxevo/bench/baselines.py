"""What a researcher would write by hand, for the milestone's ratio table.

Each baseline evaluates the same population on the same lifetime as `evolve`
does, and reports agent-steps per second:

- `python_step_loop`: a Python loop over genomes and steps around one jitted
  step (the step is eqxevo's own rollout step, so the math is identical and the
  fitness is checked against `rollout`).
- `python_scan_loop`: a Python loop over genomes, one jitted `lax.scan`
  lifetime each (compiled once).
- `numpy_vectorised`: the L0 lifetime in NumPy float32, vectorised over the
  population (a `bincount` over population-global edge ids; its own noise).
- `hand_fused`: the best hand-written JAX program: raw evosax ask, `vmap` of
  the lifetime, raw evosax tell, in one `jit` over a `lax.scan` of generations,
  on flat parameter vectors (no eqxevo machinery at all).

The two Python loops are slow by design, so they time a few genomes and short
lifetimes (`num_genomes`, `num_steps`): their rate per agent-step does not
depend on P, and barely on T.
"""

import math
import time
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from ..rollout import _start, _step, rollout
from .common import time_call


def _genome(population: Any, i: int) -> Any:
    return jax.tree.map(lambda x: x[i] if eqx.is_inexact_array(x) else x, population)


def python_step_loop(
    population: Any,
    env: Any,
    env_params: Any,
    key: jax.Array,
    *,
    num_genomes: int,
    num_steps: int,
) -> dict[str, Any]:
    """A Python loop over genomes and steps around one jitted step."""

    @eqx.filter_jit
    def start(genome: Any, k: jax.Array) -> Any:
        return _start(genome, env, env_params, k)

    @eqx.filter_jit
    def step(genome: Any, keys: Any, carry: Any) -> Any:
        return _step(genome, env, env_params, keys, True, False, carry)[0]

    def run() -> list[jax.Array]:
        totals = []
        for i in range(num_genomes):
            genome = _genome(population, i)
            carry, keys = start(genome, jr.fold_in(key, i))
            for _ in range(num_steps):
                carry = step(genome, keys, carry)
            totals.append(carry.total_reward)
        return totals

    _, wall, _ = time_call(run, repeats=1)
    totals = run()
    expected = [
        rollout(jr.fold_in(key, i), _genome(population, i), env, env_params, num_steps)[
            0
        ]
        for i in range(num_genomes)
    ]
    return {
        "baseline": "python_step_loop",
        "agent_steps_per_s": num_genomes * num_steps / wall,
        "measured_on": f"{num_genomes} genomes x {num_steps} steps",
        "matches_rollout": bool(
            np.allclose(np.asarray(totals), np.asarray(expected), rtol=1e-4, atol=1e-4)
        ),
    }


def python_scan_loop(
    population: Any,
    env: Any,
    env_params: Any,
    key: jax.Array,
    *,
    num_genomes: int,
    num_steps: int,
) -> dict[str, Any]:
    """A Python loop over genomes, each running one jitted scan lifetime."""

    @eqx.filter_jit
    def lifetime(genome: Any, k: jax.Array) -> jax.Array:
        return rollout(k, genome, env, env_params, num_steps)[0]

    def run() -> list[jax.Array]:
        return [
            lifetime(_genome(population, i), jr.fold_in(key, i))
            for i in range(num_genomes)
        ]

    _, wall, _ = time_call(run, repeats=2)
    return {
        "baseline": "python_scan_loop",
        "agent_steps_per_s": num_genomes * num_steps / wall,
        "measured_on": f"{num_genomes} genomes x {num_steps} steps",
    }


# -- NumPy, vectorised over the population (L0 chemotaxis, sparse rate net) ---------


def _numpy_params(module: Any) -> dict[str, Any]:
    return {
        k: np.asarray(jax.device_get(v))
        for k, v in vars(module).items()
        if isinstance(v, jax.Array)
    }


def _edge_list(layout: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, mask) `[E]` of any layout (the genome's weights are `[E]`)."""
    if layout.name in ("gather", "pallas"):  # slot tables [K, N] (N padded)
        slot, dst = np.asarray(layout.edge_slot), np.asarray(layout.edge_dst)
        src = np.asarray(layout.src)[slot, dst]
        return src, dst, np.asarray(layout.edge_mask)
    mask = layout.edge_mask if layout.name == "dense" else layout.mask
    return np.asarray(layout.src), np.asarray(layout.dst), np.asarray(mask)


def numpy_l0_lifetimes(
    population: Any, env_params: Any, num_steps: int, seed: int = 0
) -> np.ndarray:
    """Total reward of every genome over one L0 lifetime, in NumPy float32.

    The same equations as `Chemotaxis` and `SparseRatePolicy` (fixed weights),
    vectorised over the population; episodes do not reset (T <= episode length).
    """
    f32 = np.float32
    p = {k: v.astype(f32) for k, v in _numpy_params(env_params).items()}
    src, dst, mask = _edge_list(population.layout)
    weights = np.where(mask, np.asarray(population.weights, f32), 0.0).astype(f32)
    size, n = weights.shape[0], population.neurons.bias.shape[-1]
    bias = np.asarray(population.neurons.bias, f32)
    alpha = (1.0 / np.maximum(np.asarray(population.neurons.tau, f32), 1.0)).astype(f32)
    input_weight = np.asarray(population.input_weight, f32)
    in_ids, out_ids = list(population.input_ids), list(population.output_ids)
    # population-global edge ids: one bincount propagates every genome at once
    offset = (np.arange(size) * n)[:, None]
    gdst = (dst[None] + offset).ravel()

    rng = np.random.default_rng(seed)
    u = rng.random((size, 4), dtype=f32)
    heading = (2 * math.pi * u[:, 0] - math.pi).astype(f32)
    distance = p["source_min_distance"] + u[:, 1] * (
        p["source_max_distance"] - p["source_min_distance"]
    )
    source = np.stack(
        [
            distance * np.cos(2 * math.pi * u[:, 2]),
            distance * np.sin(2 * math.pi * u[:, 2]),
        ],
        axis=1,
    ).astype(f32)
    velocity = p["drift_speed"] * np.stack(
        [np.cos(2 * math.pi * u[:, 3]), np.sin(2 * math.pi * u[:, 3])], axis=1
    ).astype(f32)
    position = np.zeros((size, 2), f32)

    def sense(position: np.ndarray, heading: np.ndarray, source: np.ndarray) -> Any:
        readings = []
        for side in (1.0, -1.0):
            angle = heading + side * p["sensor_angle"]
            point = position + p["sensor_distance"] * np.stack(
                [np.cos(angle), np.sin(angle)], axis=1
            )
            d = np.sqrt(np.sum((point - source) ** 2, axis=1))
            value = np.exp(-d / p["length_scale"])
            noise = rng.standard_normal(size, dtype=f32)
            readings.append(
                np.log(
                    np.maximum(value + p["sensor_noise"] * noise, p["detection_floor"])
                )
            )
        return np.stack(readings, axis=1).astype(f32)

    obs = sense(position, heading, source)
    potential = np.zeros((size, n), f32)
    rate = np.zeros((size, n), f32)
    total = np.zeros(size, f32)
    bound = p["arena_half"]
    for _ in range(num_steps):
        # network
        current = (
            np.bincount(
                gdst, weights=(weights * rate[:, src]).ravel(), minlength=size * n
            )
            .reshape(size, n)
            .astype(f32)
        )
        current[:, in_ids] += input_weight * obs
        potential = potential + alpha * (current + bias - potential)
        rate = np.tanh(potential)
        action = np.clip(rate[:, out_ids], -1.0, 1.0)
        # body
        left, right = action[:, 0] * p["max_speed"], action[:, 1] * p["max_speed"]
        heading = (
            np.mod(heading + (right - left) / p["axle_length"] + math.pi, 2 * math.pi)
            - math.pi
        )
        speed = 0.5 * (left + right)
        position = np.clip(
            position
            + speed[:, None] * np.stack([np.cos(heading), np.sin(heading)], axis=1),
            -bound,
            bound,
        )
        # source drift with reflection at the walls
        source = source + velocity
        above, below = source > bound, source < -bound
        source = np.where(
            above, 2 * bound - source, np.where(below, -2 * bound - source, source)
        )
        velocity = np.where(above | below, -velocity, velocity)
        d = np.sqrt(np.sum((position - source) ** 2, axis=1))
        total += np.exp(-d / p["reward_length"])
        obs = sense(position, heading, source)
    return total


def numpy_vectorised(
    population: Any, env_params: Any, *, num_steps: int
) -> dict[str, Any]:
    """Agent-steps/s of `numpy_l0_lifetimes` on the whole population."""
    start = time.perf_counter()
    totals = numpy_l0_lifetimes(population, env_params, num_steps)
    wall = time.perf_counter() - start
    return {
        "baseline": "numpy_vectorised",
        "agent_steps_per_s": totals.shape[0] * num_steps / wall,
        "measured_on": f"{totals.shape[0]} genomes x {num_steps} steps",
        "mean_fitness": float(np.mean(totals)),
    }


# -- the best hand-fused JAX program --------------------------------------------------


def hand_fused(
    strategy: Any,
    fitness_fn: Any,
    key: jax.Array,
    *,
    num_generations: int,
    repeats: int,
) -> dict[str, Any]:
    """raw evosax ask -> vmap(lifetime) -> raw evosax tell, one jit over a scan.

    Uses the strategy's evosax algorithm and params directly on flat vectors; the
    population's genomes are rebuilt from flat vectors inside the vmap (the only
    eqxevo piece used).
    """
    algorithm, params = strategy.algorithm, strategy.params
    flat, layout = strategy.initial_flat, strategy.layout
    sign = -1.0 if strategy.maximize else 1.0

    def lifetime(x: jax.Array, k: jax.Array) -> jax.Array:
        out = fitness_fn(layout.unflatten(x), k)
        return out[0] if isinstance(out, tuple) else out

    @jax.jit
    def run(key: jax.Array) -> Any:
        init_key, run_key = jr.split(key)
        state = algorithm.init(init_key, flat, params)

        def generation(state: Any, g: jax.Array) -> Any:
            ask_key, eval_key, tell_key = jr.split(jr.fold_in(run_key, g), 3)
            xs, state = algorithm.ask(ask_key, state, params)
            fitness = jax.vmap(lifetime)(xs, jr.split(eval_key, xs.shape[0]))
            state, _ = algorithm.tell(tell_key, xs, sign * fitness, state, params)
            return state, jnp.max(fitness)

        return jax.lax.scan(generation, state, jnp.arange(num_generations))

    compile_s, wall, _ = time_call(lambda: run(key)[1], repeats)
    return {
        "baseline": "hand_fused",
        "generation_s": wall / num_generations,
        "compile_s": compile_s - wall,
    }


__all__ = [
    "hand_fused",
    "numpy_l0_lifetimes",
    "numpy_vectorised",
    "python_scan_loop",
    "python_step_loop",
]
