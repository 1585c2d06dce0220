"""A generation's shared episode is drawn once for the population: `LifetimeFitness`
on an environment that draws apart (`sample_noise`) gets one unbatched key, its
draws run as computations of their own, and the bits stay those of every block
size (docs/reproducibility.md, fix 5)."""

import functools
from collections.abc import Iterator
from typing import Any

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import tree_equal
from hypothesis import example, given, settings

from eqxevo import LifetimeFitness, evaluate, record, rollout
from eqxevo._app.config import from_dict
from eqxevo._src.bits import CPU_BLOCK_MAX, block_width, draws_apart_pay
from eqxevo._src.draws import DRAW_BLOCK, draw_block
from eqxevo._src.evaluate import draws_apart
from eqxevo.experiment import build

NETS = {
    "L0": ("chemotaxis", {}),
    "L2": ("foraging", {}),
    "L4": ("long_horizon", {"plasticity": True}),
}
MAX_POPULATION = 64


@functools.cache
def workload(name: str, size: int = MAX_POPULATION) -> tuple[LifetimeFitness, object]:
    """A small milestone network, episodes ending every 10 steps (resets run),
    and a population of `size` genomes to take prefixes of."""
    env, net_options = NETS[name]
    built = build(
        from_dict(
            {
                "env": {"name": env, "params": {"episode_length": 10}},
                "net": {
                    "name": "sparse_rate",
                    "options": {"num_neurons": 16, "fan_in": 4, **net_options},
                },
                "strategy": {"name": "snes", "population_size": size},
                "run": {"lifetime": 25},
            }
        )
    )
    strategy = built.strategy
    population, _ = strategy.ask(jr.key(0), strategy.init(jr.key(1)))
    return built.fitness, population


def first(population: object, size: int) -> object:
    return jax.tree.map(
        lambda x: x[:size] if eqx.is_inexact_array(x) else x, population
    )


@pytest.mark.slow
# Each example compiles two programs. The pinned examples below cover every
# network, both episode modes, P = 17 (the size Hypothesis once found) and
# blocks of 1, 16, 24 and 32 genomes; Hypothesis adds one drawn case per run.
@settings(max_examples=min(1, settings().max_examples), deadline=None)
@given(
    name=st.sampled_from(sorted(NETS)),
    size=st.integers(1, MAX_POPULATION),
    batch_size=st.integers(1, MAX_POPULATION),
    episodes=st.sampled_from(["shared", "per_genome"]),
)
@example(name="L0", size=17, batch_size=1, episodes="shared")
@example(name="L2", size=17, batch_size=16, episodes="shared")
@example(name="L4", size=64, batch_size=24, episodes="shared")
@example(name="L4", size=33, batch_size=32, episodes="per_genome")
def test_shared_draws_give_the_bits_of_every_block_size(
    name, size, batch_size, episodes
):
    fitness_fn, population = workload(name)
    assert fitness_fn.draws_apart == draws_apart_pay()  # GPU: drawn per genome
    population = first(population, size)
    key = jr.key(7)
    want = evaluate(key, fitness_fn, population, episodes=episodes)
    got = evaluate(
        key, fitness_fn, population, batch_size=batch_size, episodes=episodes
    )
    assert tree_equal(got, want)


def test_a_wide_population_keeps_the_bits_of_narrow_blocks():
    # XLA:CPU fused an L2 block of 176 or more genomes otherwise than one of
    # 16-160 (docs/reproducibility.md, mechanism 6): blocks hold at most
    # CPU_BLOCK_MAX genomes, so 192 genomes evaluate as 2 blocks of 96.
    fitness_fn, population = workload("L2", 192)
    assert block_width(192, None) <= CPU_BLOCK_MAX
    key = jr.key(9)
    whole = evaluate(key, fitness_fn, population)
    assert tree_equal(whole, evaluate(key, fitness_fn, population, batch_size=16))


def test_a_prefix_of_the_population_keeps_its_bits():
    # Every genome's fitness is the same whether 1, 17 or 64 genomes are evaluated.
    for name in sorted(NETS):
        fitness_fn, population = workload(name)
        whole = evaluate(jr.key(3), fitness_fn, population)
        for size in (1, 17):
            part = evaluate(jr.key(3), fitness_fn, first(population, size))
            prefix = jax.tree.map(lambda x, n=size: x[:n], whole)
            assert tree_equal(part, prefix)


def _equations(jaxpr: jax.extend.core.Jaxpr) -> Iterator[Any]:
    """Every equation of `jaxpr`, those of nested jaxprs (scan, cond, ...) too."""
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple | list) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    yield from _equations(inner)


def _draw_shapes(jaxpr: jax.extend.core.Jaxpr) -> list[tuple[int, ...]]:
    """The key shapes of every random draw in `jaxpr`, nested ones included."""
    return [
        tuple(eqn.invars[0].aval.shape)
        for eqn in _equations(jaxpr)
        if eqn.primitive.name in ("random_bits", "threefry2x32")
    ]


@pytest.mark.parametrize("episodes", ["shared", "per_genome"])
def test_a_shared_episode_is_drawn_once_for_the_population(episodes):
    # No draw of the shared episode carries the population axis (48 genomes):
    # its noise is computed once; per-genome episodes draw for every genome.
    fitness_fn, population = workload("L2")
    population = first(population, 48)
    jaxpr = jax.make_jaxpr(lambda p, k: evaluate(k, fitness_fn, p, episodes=episodes))(
        population, jr.key(0)
    ).jaxpr
    shapes = _draw_shapes(jaxpr)
    batched = [s for s in shapes if 48 in s]
    if episodes == "shared":
        assert shapes and not batched
    else:
        assert batched


def test_the_draws_stay_computations_of_their_own_in_the_optimised_program():
    # XLA removes optimisation barriers on CPU but never fuses across a
    # conditional's branches: the compiled program keeps the draws' branches.
    fitness_fn, population = workload("L0")
    text = (
        jax.jit(lambda p, k: evaluate(k, fitness_fn, p)[0])
        .lower(first(population, 32), jr.key(0))
        .compile()
        .as_text()
    )
    # the reset and initial state at birth; a block of steps' noise and resets
    assert text.count(" conditional(") >= 3


@pytest.mark.parametrize("name", sorted(NETS))
def test_draws_made_ahead_for_a_block_of_steps_are_the_bits_of_each_steps_own(name):
    # `rollout(draw_ahead=True)` (what a shared episode runs) computes a block
    # of steps' noise and resets in one computation; the lifetime is that of
    # steps drawing for themselves, bit for bit, and so is a recorded one.
    fitness_fn, population = workload(name)
    genome = jax.tree.map(lambda x: x[3] if eqx.is_inexact_array(x) else x, population)
    env, params = fitness_fn.env, fitness_fn.env_params
    key = jr.key(11)
    # blocks of DRAW_BLOCK = 16 steps (T = 32, 3 resets) ...
    assert draw_block(env, 32) == DRAW_BLOCK == 16
    ahead, each = (
        rollout(key, genome, env, params, 32, draw_ahead=flag) for flag in (True, False)
    )
    assert tree_equal(ahead, each)
    assert tree_equal(record(key, genome, env, params, 32).summary, each[1])
    # ... and of 5 (T = 25), through the fitness `evaluate` uses
    assert draw_block(env, fitness_fn.num_steps) == 5
    assert tree_equal(fitness_fn.shared_episode()(genome, key), fitness_fn(genome, key))


def test_the_block_is_the_largest_divisor_of_the_lifetime_up_to_draw_block():
    from eqxevo.envs import GymnaxEnv

    env = workload("L0")[0].env
    assert [draw_block(env, t) for t in (1000, 5000, 20000, 25, 23, 1)] == [
        10,
        10,
        DRAW_BLOCK,
        5,
        1,
        1,
    ]
    pytest.importorskip("gymnax")
    assert draw_block(GymnaxEnv("CartPole-v1"), 1000) == 1  # draws inside its step


def test_an_environment_that_draws_inside_its_step_keeps_the_genome_keys():
    from eqxevo.envs import GymnaxEnv

    pytest.importorskip("gymnax")
    env = GymnaxEnv("CartPole-v1")
    fitness_fn = LifetimeFitness(env, env.default_params(), 5)
    assert not fitness_fn.draws_apart and not draws_apart(fitness_fn)
    assert not draws_apart(lambda genome, key: jnp.zeros(()))


def _primitives(jaxpr: jax.extend.core.Jaxpr) -> set[str]:
    return {eqn.primitive.name for eqn in _equations(jaxpr)}


def test_on_a_gpu_the_program_keeps_per_genome_draws(monkeypatch):
    # Drawing once was slower on an H200 (docs/performance.md): there the
    # program keeps per-genome draws, with no conditionals.
    fitness_fn, population = workload("L0")
    population = first(population, 48)

    def program() -> jax.extend.core.Jaxpr:
        jax.clear_caches()  # traces are cached per process, not per backend
        return jax.make_jaxpr(lambda p, k: evaluate(k, fitness_fn, p))(
            population, jr.key(0)
        ).jaxpr

    assert fitness_fn.draws_apart and "cond" in _primitives(program())
    try:
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        assert not fitness_fn.draws_apart
        jaxpr = program()
    finally:
        monkeypatch.undo()
        jax.clear_caches()  # no GPU-variant trace left for the next test
    assert "cond" not in _primitives(jaxpr)
    assert any(48 in shape for shape in _draw_shapes(jaxpr))


@pytest.mark.parametrize("algorithm", ["CMA_ES", "Sep_CMA_ES"])
def test_evolve_with_an_episode_drawn_once_equals_the_hand_written_loop(algorithm):
    # The README's ask/evaluate/tell loop, chunk sizes and seeds, on the fast
    # path: an L2 network (transcendentals, reductions, resets every 10 steps).
    from test_evolve import hand_written_loop

    from eqxevo import Strategy, evolve

    fitness_fn, population = workload("L2")
    genome = jax.tree.map(lambda x: x[0] if eqx.is_inexact_array(x) else x, population)
    strategy = Strategy(algorithm, genome, 16, maximize=True)
    key = jr.key(5)
    result = evolve(key, strategy, fitness_fn, num_generations=3, chunk_size=2)
    state, best = hand_written_loop(strategy, fitness_fn, key, 3)
    assert tree_equal(result.state, state)
    np.testing.assert_array_equal(result.history["best"], best)
    # several seeds in one program (chunks of 3): seed k is the loop on key k
    seeds = evolve(key, strategy, fitness_fn, num_generations=3, num_seeds=2)
    for k, seed_key in enumerate(jr.split(key, 2)):
        state, best = hand_written_loop(strategy, fitness_fn, seed_key, 3)
        assert tree_equal(jax.tree.map(lambda x, k=k: x[k], seeds.state), state)
        np.testing.assert_array_equal(seeds.history["best"][k], best)
