"""What a researcher would write by hand, for the milestones' ratio table: each
plays `evolve`'s episodes and checks its fitness against eqxevo's (see
docs/performance.md, "How the harness measures")."""

import functools
import math
from collections.abc import Callable
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src.evaluate import evaluate
from eqxevo._src.keys import generation_keys, run_keys
from eqxevo._src.rollout import lifetime_step, rollout, start_lifetime

from .common import time_call


def episode_key(eval_key: jax.Array) -> jax.Array:
    """The key of the lifetime every genome plays: `evaluate`'s shared episode."""
    return jr.fold_in(eval_key, 0)


def _genome(population: Any, i: int) -> Any:
    # evolvable (float) leaves carry the population axis; integer topology and
    # static leaves are shared by every genome
    return jax.tree.map(lambda x: x[i] if eqx.is_inexact_array(x) else x, population)


def _lifetimes(
    population: Any, env: Any, env_params: Any, key: jax.Array, num_steps: int
) -> np.ndarray:
    """What `evaluate` gives the population over `num_steps`-step lifetimes."""

    def fitness(genome: Any, k: jax.Array) -> jax.Array:
        return rollout(k, genome, env, env_params, num_steps)[0]

    return np.asarray(evaluate(key, fitness, population)[0])


def matches(values: Any, expected: Any) -> bool:
    """Equal to float32 rounding (1e-4 of the largest magnitude)."""
    values, expected = np.asarray(values), np.asarray(expected)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    return bool(np.allclose(values, expected, rtol=1e-4, atol=1e-4 * scale))


def python_loop(
    population: Any,
    env: Any,
    env_params: Any,
    key: jax.Array,
    *,
    jitted: Literal["step", "scan"],
    num_genomes: int,
    num_steps: int,
) -> dict[str, Any]:
    """A Python loop over the first genomes, around one jitted step or lifetime.

    `jitted="step"`: a Python loop over steps too, each a call of one jitted
    step (eqxevo's own rollout step): `python_step_loop`. `jitted="scan"`: one
    jitted `lax.scan` lifetime per genome (compiled once): `python_scan_loop`.
    """

    @eqx.filter_jit
    def start(genome: Any, k: jax.Array) -> Any:
        return start_lifetime(genome, env, env_params, k)

    @eqx.filter_jit
    def step(genome: Any, keys: Any, carry: Any) -> Any:
        # `rollout`'s defaults: auto-reset the environment, not the policy
        return lifetime_step(genome, env, env_params, keys, True, False, carry)[0]

    def step_by_step(genome: Any, k: jax.Array) -> jax.Array:
        carry, keys = start(genome, k)
        for _ in range(num_steps):
            carry = step(genome, keys, carry)
        return carry.total_reward

    @eqx.filter_jit
    def scanned(genome: Any, k: jax.Array) -> jax.Array:
        return rollout(k, genome, env, env_params, num_steps)[0]

    lifetime = {"step": step_by_step, "scan": scanned}[jitted]

    def run() -> list[jax.Array]:
        episode = episode_key(key)
        return [lifetime(_genome(population, i), episode) for i in range(num_genomes)]

    _, wall, _ = time_call(run, repeats=1 if jitted == "step" else 2)
    expected = _lifetimes(population, env, env_params, key, num_steps)[:num_genomes]
    return {
        "baseline": f"python_{jitted}_loop",
        "agent_steps_per_s": num_genomes * num_steps / wall,
        "measured_on": f"{num_genomes} genomes x {num_steps} steps",
        "matches_evaluate": matches(run(), expected),
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


def l0_draws(key: jax.Array, num_steps: int) -> dict[str, np.ndarray]:
    """The random draws of the L0 lifetime `rollout(key, ...)` plays.

    `rollout`'s key schedule (see `eqxevo.rollout`) and `Chemotaxis`'s draws:
    `layout` (4 uniforms: heading, distance, bearing, drift direction) and
    `noise` (`(num_steps + 1, 2)` standard normals: the sensors at reset, then
    after each step).
    """
    # `rollout.start_lifetime`'s splits (reset and policy keys, then the per-step
    # env, reset and policy roots), keeping only what the environment draws from
    init_key, run_key = jr.split(key)
    reset_key, _ = jr.split(init_key)
    env_keys, _, _ = jr.split(run_key, 3)
    # `Chemotaxis.reset`: the layout's uniforms, then the first sensor noise
    layout_key, noise_key = jr.split(reset_key)
    layout = jr.uniform(layout_key, (4,), jnp.float32)
    first = jr.normal(noise_key, (2,), jnp.float32)
    # step t's sensor noise: the env key folded with t, as `rollout`'s step does
    steps = jax.vmap(lambda t: jr.normal(jr.fold_in(env_keys, t), (2,), jnp.float32))(
        jnp.arange(num_steps)
    )
    return {
        "layout": np.asarray(layout),
        "noise": np.concatenate([np.asarray(first)[None], np.asarray(steps)]),
    }


def numpy_l0_lifetimes(
    population: Any, env_params: Any, draws: dict[str, np.ndarray]
) -> np.ndarray:
    """Total reward of every genome over one L0 lifetime, in NumPy float32.

    The same equations as `Chemotaxis` and `SparseRatePolicy` (fixed weights),
    vectorised over the population, every genome on the episode `draws`
    (`l0_draws`; T = `len(draws["noise"]) - 1` steps). Episodes do not reset
    (T <= episode length).
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

    u, noise = draws["layout"].astype(f32), draws["noise"].astype(f32)
    heading = np.full(size, 2 * math.pi * u[0] - math.pi, f32)
    distance = p["source_min_distance"] + u[1] * (
        p["source_max_distance"] - p["source_min_distance"]
    )
    bearing, drift = 2 * math.pi * u[2], 2 * math.pi * u[3]
    source = np.tile(
        distance * np.array([np.cos(bearing), np.sin(bearing)], f32), (size, 1)
    )
    velocity = np.tile(
        p["drift_speed"] * np.array([np.cos(drift), np.sin(drift)], f32), (size, 1)
    )
    position = np.zeros((size, 2), f32)

    def sense(
        position: np.ndarray, heading: np.ndarray, source: np.ndarray, t: int
    ) -> Any:
        readings = []
        for side, sign in enumerate((1.0, -1.0)):
            angle = heading + sign * p["sensor_angle"]
            point = position + p["sensor_distance"] * np.stack(
                [np.cos(angle), np.sin(angle)], axis=1
            )
            d = np.sqrt(np.sum((point - source) ** 2, axis=1))
            value = np.exp(-d / p["length_scale"])
            readings.append(
                np.log(
                    np.maximum(
                        value + p["sensor_noise"] * noise[t, side], p["detection_floor"]
                    )
                )
            )
        return np.stack(readings, axis=1).astype(f32)

    obs = sense(position, heading, source, 0)
    potential = np.zeros((size, n), f32)
    rate = np.zeros((size, n), f32)
    total = np.zeros(size, f32)
    bound = p["arena_half"]
    for t in range(len(noise) - 1):
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
        obs = sense(position, heading, source, t + 1)
    return total


def numpy_vectorised(
    population: Any,
    env: Any,
    env_params: Any,
    key: jax.Array,
    *,
    num_steps: int,
    repeats: int = 3,
) -> dict[str, Any]:
    """Agent-steps/s of `numpy_l0_lifetimes` on the whole population (median)."""
    draws = l0_draws(episode_key(key), num_steps)
    _, wall, _ = time_call(
        lambda: numpy_l0_lifetimes(population, env_params, draws), repeats
    )
    totals = numpy_l0_lifetimes(population, env_params, draws)
    expected = _lifetimes(population, env, env_params, key, num_steps)
    return {
        "baseline": "numpy_vectorised",
        "agent_steps_per_s": totals.shape[0] * num_steps / wall,
        "measured_on": f"{totals.shape[0]} genomes x {num_steps} steps",
        "mean_fitness": float(np.mean(totals)),
        "matches_evaluate": matches(totals, expected),
    }


# -- the best hand-fused JAX program --------------------------------------------------


def hand_fused_call(
    strategy: Any,
    fitness_fn: Any,
    key: jax.Array,
    *,
    genome_keys: bool = False,
) -> Callable[[int], jax.Array]:
    """`call(n)`: raw evosax ask -> vmap(lifetime) -> raw evosax tell, one jit
    over a scan of n generations; returns the best fitness of every generation
    (on device, to compare with `evolve`'s `history["best"]`).

    Uses the strategy's evosax algorithm and params directly on flat vectors,
    on `evolve`'s key schedule (`eqxevo.generation_keys`); the population's
    genomes are rebuilt from flat vectors inside the vmap (the only eqxevo piece
    used). Every genome plays the shared episode: one key for the population,
    or with `genome_keys` derived by each genome inside the vmap, as `evaluate`
    does.
    """
    algorithm, params = strategy.algorithm, strategy.params
    flat, layout = strategy.initial_flat, strategy.layout
    sign = -1.0 if strategy.maximize else 1.0

    def lifetime(x: jax.Array, k: jax.Array) -> jax.Array:
        out = fitness_fn(layout.unflatten(x), k)
        return out[0] if isinstance(out, tuple) else out

    def population_fitness(xs: jax.Array, eval_key: jax.Array) -> jax.Array:
        if genome_keys:
            # every genome folds in index 0 itself: the same shared episode, but
            # its random draws computed once per genome, as `evaluate` does
            ids = jnp.zeros((xs.shape[0],), jnp.int32)
            return jax.vmap(lambda x, i: lifetime(x, jr.fold_in(eval_key, i)))(xs, ids)
        return jax.vmap(lifetime, in_axes=(0, None))(xs, episode_key(eval_key))

    @functools.partial(jax.jit, static_argnums=1)
    def run(key: jax.Array, num_generations: int) -> Any:
        init_key, run_key = run_keys(key)
        state = algorithm.init(init_key, flat, params)

        def generation(state: Any, g: jax.Array) -> Any:
            ask_key, eval_key, tell_key = generation_keys(run_key, g)
            xs, state = algorithm.ask(ask_key, state, params)
            fitness = population_fitness(xs, eval_key)
            state, _ = algorithm.tell(tell_key, xs, sign * fitness, state, params)
            return state, jnp.max(fitness) if strategy.maximize else jnp.min(fitness)

        return jax.lax.scan(generation, state, jnp.arange(num_generations))[1]

    return lambda num_generations: run(key, num_generations)


__all__ = [
    "episode_key",
    "hand_fused_call",
    "l0_draws",
    "matches",
    "numpy_l0_lifetimes",
    "numpy_vectorised",
    "python_loop",
]
