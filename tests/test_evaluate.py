import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Net, noisy_sphere, sphere
from hypothesis import given
from jaxtyping import TypeCheckError

from eqxevo.evaluate import (
    evaluate,
    fitness_summary,
    genome_keys,
    rank_nonfinite_worst,
)
from eqxevo.genome import GenomeLayout

# -- NumPy references ----------------------------------------------------------------


def rank_nonfinite_worst_reference(fitness, reference=None):
    pool = fitness if reference is None else np.concatenate([fitness, reference])
    finite = pool[np.isfinite(pool)]
    if finite.size:
        replacement = finite.max() + (finite.max() - finite.min()) + 1.0
    else:
        replacement = 0.0
    bad = ~np.isfinite(fitness)
    return np.where(bad, np.float32(replacement), fitness), bad


def fitness_summary_reference(fitness, maximize):
    finite = fitness[np.isfinite(fitness)]
    if finite.size == 0:
        lo = hi = mean = std = np.nan
    else:
        lo, hi, mean, std = finite.min(), finite.max(), finite.mean(), finite.std()
    return {
        "best": hi if maximize else lo,
        "mean": mean,
        "std": std,
        "min": lo,
        "max": hi,
        "num_nonfinite": int((~np.isfinite(fitness)).sum()),
    }


fitness_arrays = hnp.arrays(
    np.float32,
    st.integers(1, 12),
    elements=st.one_of(
        st.floats(-1e3, 1e3, width=32),
        st.sampled_from([np.nan, np.inf, -np.inf]),
    ),
)


@given(fitness=fitness_arrays, reference=st.none() | fitness_arrays)
def test_rank_nonfinite_worst_matches_numpy_reference(fitness, reference):
    clean, bad = rank_nonfinite_worst(
        jnp.asarray(fitness), None if reference is None else jnp.asarray(reference)
    )
    want_clean, want_bad = rank_nonfinite_worst_reference(fitness, reference)
    np.testing.assert_array_equal(np.asarray(bad), want_bad)
    np.testing.assert_allclose(np.asarray(clean), want_clean, rtol=1e-6)
    clean = np.asarray(clean)
    assert np.isfinite(clean).all()
    finite_pool = np.concatenate([fitness, reference if reference is not None else []])
    finite_pool = finite_pool[np.isfinite(finite_pool)]
    if want_bad.any() and finite_pool.size:
        # every failed genome ranks strictly worse than every finite value
        assert clean[want_bad].min() > finite_pool.max()
    # finite values are untouched, so their order is kept
    np.testing.assert_array_equal(clean[~want_bad], fitness[~want_bad])


@given(fitness=fitness_arrays, maximize=st.booleans())
def test_fitness_summary_matches_numpy_reference(fitness, maximize):
    got = fitness_summary(jnp.asarray(fitness), ~jnp.isfinite(fitness), maximize)
    want = fitness_summary_reference(fitness, maximize)
    assert int(got["num_nonfinite"]) == want["num_nonfinite"]
    for name in ("best", "mean", "std", "min", "max"):
        np.testing.assert_allclose(
            float(got[name]), want[name], rtol=1e-5, atol=1e-3, err_msg=name
        )


@given(size=st.integers(1, 6), seed=st.integers(0, 1000))
def test_evaluate_equals_per_genome_loop_with_index_keys(size, seed):
    key_pop, key_eval = jr.split(jr.key(seed))
    net = Net(key=key_pop)
    layout = GenomeLayout.from_genome(net)
    population = layout.unflatten_population(
        jr.normal(key_pop, (size, layout.num_params))
    )
    fitness, aux = evaluate(noisy_sphere, population, key_eval)
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


def test_evaluate_scalar_fitness_has_no_aux(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    population = layout.unflatten_population(jnp.zeros((3, layout.num_params)))
    fitness, aux = evaluate(sphere, population, key)
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

    fitness, _ = evaluate(fitness_fn, population, key)
    np.testing.assert_array_equal(np.asarray(fitness), 10.0)


def test_evaluate_rejects_non_scalar_fitness(key):
    layout = GenomeLayout.from_genome(Net(key=key))
    population = layout.unflatten_population(jnp.zeros((3, layout.num_params)))
    with pytest.raises(ValueError, match=r"scalar fitness.*shape \(2,\)"):
        evaluate(lambda g, k: jnp.zeros(2), population, key)
    with pytest.raises(ValueError, match="real number"):
        evaluate(lambda g, k: jnp.bool_(True), population, key)
    with pytest.raises(ValueError, match="tuple of length 3"):
        evaluate(lambda g, k: (1.0, 2.0, 3.0), population, key)


def test_type_checking_is_on_in_the_test_suite():
    # jaxtyping's import hook with beartype checks shapes of eqxevo functions.
    with pytest.raises(TypeCheckError):
        rank_nonfinite_worst(jnp.zeros((2, 2)))
