import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    Net,
    Rosenbrock,
    lifetime,
    noisy_sphere,
    random_population,
    sphere,
    transcendental,
    tree_equal,
)
from hypothesis import example, given, settings
from jaxtyping import TypeCheckError

from eqxevo import GenomeLayout, Strategy, evaluate
from eqxevo._src.bits import BLOCK_ALIGN, block_width
from eqxevo._src.evaluate import genome_keys


@given(size=st.integers(1, 6), seed=st.integers(0, 1000))
def test_per_genome_episodes_equal_a_loop_with_index_keys(size, seed):
    key_pop, key_eval = jr.split(jr.key(seed))
    net = Net(key=key_pop)
    layout = GenomeLayout.from_genome(net)
    population = layout.unflatten_population(
        jr.normal(key_pop, (size, layout.num_params))
    )
    fitness, aux = evaluate(key_eval, noisy_sphere, population, episodes="per_genome")
    assert fitness.shape == (size,) and aux["norm"].shape == (size,)
    keys = genome_keys(key_eval, size)
    for i in range(size):
        genome = layout.unflatten(layout.flatten_population(population)[i])
        want, want_aux = noisy_sphere(genome, jr.fold_in(key_eval, i))
        np.testing.assert_allclose(float(fitness[i]), float(want), rtol=1e-6)
        np.testing.assert_allclose(
            float(aux["norm"][i]), float(want_aux["norm"]), rtol=1e-6
        )
        assert np.array_equal(
            jr.key_data(keys[i]), jr.key_data(jr.fold_in(key_eval, i))
        )


@given(size=st.integers(1, 6), seed=st.integers(0, 1000))
def test_shared_episodes_give_every_genome_episode_zero(size, seed):
    key_pop, key_eval = jr.split(jr.key(seed))
    layout = GenomeLayout.from_genome(Net(key=key_pop))
    flat = jr.normal(key_pop, (size, layout.num_params))
    population = layout.unflatten_population(flat)
    fitness, _ = evaluate(key_eval, noisy_sphere, population)  # shared: default
    for i in range(size):
        want, _ = noisy_sphere(layout.unflatten(flat[i]), jr.fold_in(key_eval, 0))
        np.testing.assert_allclose(float(fitness[i]), float(want), rtol=1e-6)


def noisy_lifetime(genome, key):
    """Key-dependent noise dominates: only common episodes make equal genomes equal."""
    noise = jr.normal(key, (8,))
    return jnp.sum(jnp.tanh(genome.weight[0, 0] * noise) + noise**2) + jnp.exp(
        genome.bias[0]
    )


def test_identical_genomes_get_identical_fitness_only_with_shared_episodes(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    one = jr.normal(key, (layout.num_params,))
    population = layout.unflatten_population(jnp.tile(one, (6, 1)))
    shared, _ = evaluate(key, noisy_lifetime, population)
    assert np.all(np.asarray(shared) == np.asarray(shared)[0])
    per_genome, _ = evaluate(key, noisy_lifetime, population, episodes="per_genome")
    assert len(np.unique(np.asarray(per_genome))) == 6
    # episode ids: genomes with one id share episodes, others do not
    ids = jnp.asarray([0, 0, 1, 1, 2, 2])
    grouped, _ = evaluate(key, noisy_lifetime, population, episodes=ids)
    grouped = np.asarray(grouped)
    assert grouped[0] == grouped[1] and grouped[2] == grouped[3]
    assert len(np.unique(grouped)) == 3
    np.testing.assert_array_equal(grouped[0::2], np.asarray(per_genome)[:3])


@pytest.mark.parametrize(
    "episodes", ["per_episode", 3, jnp.zeros(5, jnp.int32), jnp.zeros(4)]
)
def test_evaluate_rejects_bad_episodes(key, episodes):
    population = random_population(0, 4)
    with pytest.raises((ValueError, TypeCheckError), match="episodes"):
        evaluate(key, sphere, population, episodes=episodes)


def test_evaluate_scalar_fitness_has_no_aux(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    population = layout.unflatten_population(jnp.zeros((3, layout.num_params)))
    fitness, aux = evaluate(key, sphere, population)
    assert aux is None
    assert fitness.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(fitness), 0.0)


def test_evaluate_static_parts_are_not_batched(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    population = layout.unflatten_population(jnp.zeros((3, layout.num_params)))

    def fitness_fn(genome, key):
        assert genome.edges.shape == (5,)  # shared, unbatched
        assert genome.weight.shape == (3, 2)
        return jnp.sum(genome.edges).astype(jnp.float32)

    fitness, _ = evaluate(key, fitness_fn, population)
    np.testing.assert_array_equal(np.asarray(fitness), 10.0)


def test_evaluate_rejects_non_scalar_fitness(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    population = layout.unflatten_population(jnp.zeros((3, layout.num_params)))
    with pytest.raises(ValueError, match=r"scalar fitness.*shape \(2,\)"):
        evaluate(key, lambda g, k: jnp.zeros(2), population)
    with pytest.raises(ValueError, match="real number"):
        evaluate(key, lambda g, k: jnp.bool_(True), population)
    with pytest.raises(ValueError, match="tuple of length 3"):
        evaluate(key, lambda g, k: (1.0, 2.0, 3.0), population)


# -- micro-batching -------------------------------------------------------------------


@settings(max_examples=min(5, settings().max_examples))  # each example compiles
@given(
    size=st.integers(1, 40),
    batch_size=st.integers(1, 40),
    seed=st.integers(0, 99),
    episodes=st.sampled_from(["shared", "per_genome"]),
)
# found by Hypothesis against one unbatched key for shared episodes (2026-11-23)
@example(size=17, batch_size=1, seed=0, episodes="shared")
def test_micro_batched_evaluation_equals_unbatched(size, batch_size, seed, episodes):
    # batch_size need not divide the population: the last block is padded; blocks
    # are a multiple of BLOCK_ALIGN genomes, so every genome runs the same code.
    population = random_population(seed, size)
    key = jr.key(seed + 1)
    want = evaluate(key, lifetime, population, episodes=episodes)
    got = evaluate(key, lifetime, population, batch_size=batch_size, episodes=episodes)
    assert tree_equal(got, want)


@pytest.mark.parametrize(("size", "batch_size"), [(48, 16), (40, 8), (33, 17)])
def test_micro_batched_stranger_fitness_equals_unbatched(size, batch_size, key):
    # exp, log, sin, tanh, reductions and noise, on a genome with an int leaf.
    strategy = Strategy("CMA_ES", Rosenbrock(5), size)
    population, _ = strategy.ask(key, strategy.init(key))
    want = evaluate(key, transcendental, population)
    got = evaluate(key, transcendental, population, batch_size=batch_size)
    assert tree_equal(got, want)
    assert block_width(size, batch_size) % BLOCK_ALIGN == 0


def test_micro_batching_bounds_the_memory_of_lifetimes(key):
    # Each lifetime carries a 4096-float state: unbatched, all P = 128 states are
    # alive at once; in blocks of 16, only 16 are.
    population = random_population(0, 128)

    def big_state(genome, key):
        def step(state, _):
            return jnp.tanh(state * genome.bias[0] + genome.weight[0, 0]), None

        state, _ = jax.lax.scan(step, jr.normal(key, (4096,)), None, length=4)
        return jnp.sum(state)

    def temp_bytes(batch_size):
        compiled = (
            jax.jit(lambda p, k: evaluate(k, big_state, p, batch_size=batch_size))
            .lower(population, key)
            .compile()
        )
        analysis = compiled.memory_analysis()
        if analysis is None:
            pytest.skip("this backend reports no memory analysis")
        return analysis.temp_size_in_bytes

    unbatched, batched = temp_bytes(None), temp_bytes(16)
    assert unbatched >= 128 * 4096 * 4  # at least every state at once
    assert batched < unbatched / 4


def test_evaluate_rejects_bad_batch_size(key):
    population = random_population(0, 4)
    for bad in (0, -1, 2.0, True):
        with pytest.raises((ValueError, TypeCheckError), match="batch_size"):
            evaluate(key, sphere, population, batch_size=bad)
