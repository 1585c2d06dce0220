import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Net, noisy_sphere, sphere, tree_equal
from hypothesis import given, settings
from jaxtyping import TypeCheckError

from eqxevo.evaluate import (
    MultiFidelity,
    combine_fidelities,
    evaluate,
    fitness_summary,
    genome_keys,
    promote,
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


# -- micro-batching -------------------------------------------------------------------


def lifetime(genome, key, steps=6):
    """A small scanned lifetime with per-step noise and an aux summary."""

    def step(carry, step_key):
        x, total = carry
        x = jnp.tanh(genome.weight.T @ x[:3] + genome.bias) + 0.1 * jr.normal(
            step_key, (2,)
        )
        x = jnp.concatenate([x, x[:1]])
        return (x, total + jnp.sum(x**2)), None

    (x, total), _ = jax.lax.scan(
        step, (jnp.ones(3), jnp.zeros(())), jr.split(key, steps)
    )
    return total / steps, {"last": x[:2]}


def random_population(seed, size):
    key = jr.key(seed)
    layout = GenomeLayout.from_genome(Net(key=key))
    return layout.unflatten_population(jr.normal(key, (size, layout.num_params)))


@settings(max_examples=min(5, settings().max_examples))  # each example compiles
@given(size=st.integers(1, 9), batch_size=st.integers(2, 10), seed=st.integers(0, 99))
def test_micro_batched_evaluation_equals_unbatched(size, batch_size, seed):
    # batch_size need not divide the population: the last block is padded.
    population = random_population(seed, size)
    key = jr.key(seed + 1)
    want = evaluate(lifetime, population, key)
    got = evaluate(lifetime, population, key, batch_size=batch_size)
    assert tree_equal(got, want)


def test_micro_batching_bounds_the_memory_of_lifetimes(key):
    # Each lifetime carries a 4096-float state: unbatched, all P = 64 states are
    # alive at once; in blocks of 8, only 8 are.
    population = random_population(0, 64)

    def big_state(genome, key):
        def step(state, _):
            return jnp.tanh(state * genome.bias[0] + genome.weight[0, 0]), None

        state, _ = jax.lax.scan(step, jr.normal(key, (4096,)), None, length=4)
        return jnp.sum(state)

    def temp_bytes(batch_size):
        compiled = (
            jax.jit(lambda p, k: evaluate(big_state, p, k, batch_size=batch_size))
            .lower(population, key)
            .compile()
        )
        analysis = compiled.memory_analysis()
        if analysis is None:
            pytest.skip("this backend reports no memory analysis")
        return analysis.temp_size_in_bytes

    unbatched, batched = temp_bytes(None), temp_bytes(8)
    assert unbatched >= 64 * 4096 * 4  # at least every state at once
    assert batched < unbatched / 4


def test_evaluate_rejects_bad_batch_size(key):
    population = random_population(0, 4)
    for bad in (0, 1, -1, 2.0, True):
        with pytest.raises((ValueError, TypeCheckError), match="batch_size"):
            evaluate(sphere, population, key, batch_size=bad)


# -- multi-fidelity -------------------------------------------------------------------


def better_first(fitness, maximize):
    """Genome indices from best to worst; ties: lower index first (stable)."""
    fitness = np.asarray(fitness)
    return np.argsort(-fitness if maximize else fitness, kind="stable")


def promote_reference(proxy, k, maximize):
    score = proxy if maximize else -proxy
    score = np.where(np.isfinite(score), score, -np.inf)
    return np.argsort(-score, kind="stable")[:k]


proxy_values = st.one_of(
    # XLA:CPU flushes subnormals to zero, so NumPy and XLA would rank them apart.
    st.floats(-1e3, 1e3, width=32, allow_subnormal=False),
    st.sampled_from([np.nan, np.inf, -np.inf]),
)


@given(data=st.data(), maximize=st.booleans())
def test_promote_takes_the_best_k_ties_to_lower_index_nonfinite_last(data, maximize):
    size = data.draw(st.integers(1, 12))
    proxy = data.draw(
        hnp.arrays(
            np.float32,
            size,
            elements=st.one_of(proxy_values, st.sampled_from([0.0, 1.0])),
        )
    )
    k = data.draw(st.integers(1, size))
    got = np.asarray(promote(jnp.asarray(proxy), k, maximize))
    np.testing.assert_array_equal(got, promote_reference(proxy, k, maximize))


def exact_values(size):
    # Multiples of 1/8: no float rounding can merge two of them after a shift,
    # so the order inside each group must be kept strictly.
    return hnp.arrays(
        np.float32, size, elements=st.integers(-8000, 8000).map(lambda i: i / 8)
    )


def check_combined(proxy, full, promoted, combined, mask, maximize, strict):
    combined, mask = np.asarray(combined), np.asarray(mask)
    up = (lambda x: x) if maximize else np.negative
    k = len(promoted)
    # exactly k promoted, and they keep their full fitness bit for bit
    assert mask.sum() == k and mask[promoted].all()
    np.testing.assert_array_equal(combined[promoted], full)
    rest = np.flatnonzero(~mask)
    # non-finite values stay non-finite (for the NaN policy downstream)
    assert (~np.isfinite(combined[rest]) == ~np.isfinite(proxy[rest])).all()
    finite = np.isfinite(combined)
    good = up(combined[promoted][finite[promoted]])
    others = up(combined[rest][finite[rest]])
    if good.size and others.size:
        assert good.min() > others.max()  # every promoted genome ranks above
    # order inside the non-promoted group is kept
    r = rest[finite[rest]]
    p, c = up(proxy[r]), up(combined[r])
    for i in range(len(r)):
        for j in range(len(r)):
            if p[i] > p[j]:
                assert c[i] > c[j] if strict else c[i] >= c[j]
            if p[i] == p[j]:
                assert c[i] == c[j]


@given(data=st.data(), maximize=st.booleans(), exact=st.booleans())
def test_combined_fitness_ranks_promoted_above_the_rest_keeping_group_order(
    data, maximize, exact
):
    size = data.draw(st.integers(1, 10))
    k = data.draw(st.integers(1, size))
    if exact:
        proxy = data.draw(exact_values(size))
        full = data.draw(exact_values(k))
    else:
        arrays = lambda n: hnp.arrays(np.float32, n, elements=proxy_values)
        proxy, full = data.draw(arrays(size)), data.draw(arrays(k))
    promoted = np.asarray(promote(jnp.asarray(proxy), k, maximize))
    combined, mask = combine_fidelities(
        jnp.asarray(proxy), jnp.asarray(full), jnp.asarray(promoted), maximize
    )
    check_combined(proxy, full, promoted, combined, mask, maximize, strict=exact)


def test_combined_fitness_keeps_proxies_that_already_rank_below():
    proxy = jnp.asarray([5.0, 1.0, 4.0, 2.0])
    promoted = jnp.asarray([0, 2])
    combined, mask = combine_fidelities(proxy, jnp.asarray([9.0, 7.0]), promoted, True)
    np.testing.assert_array_equal(np.asarray(combined), [9.0, 1.0, 7.0, 2.0])
    # a proxy above the worst full value is shifted just below it, gaps kept
    combined, _ = combine_fidelities(proxy, jnp.asarray([9.0, 1.5]), promoted, True)
    below = np.nextafter(np.float32(1.5), np.float32(-np.inf))
    np.testing.assert_array_equal(np.asarray(combined), [9.0, below - 1.0, 1.5, below])
    np.testing.assert_array_equal(np.asarray(mask), [True, False, True, False])


@settings(max_examples=min(5, settings().max_examples))  # each example compiles
@given(
    size=st.integers(1, 8),
    data=st.data(),
    seed=st.integers(0, 99),
    maximize=st.booleans(),
)
def test_multi_fidelity_with_proxy_equal_to_full_ranks_like_single_fidelity(
    size, data, seed, maximize
):
    k = data.draw(st.integers(1, size))
    population = random_population(seed, size)
    key = jr.key(seed + 1)
    fidelity = MultiFidelity(
        lifetime, lifetime, num_promoted=k, proxy_steps=6, full_steps=6
    )
    combined, aux = evaluate(fidelity, population, key, maximize=maximize)
    single, single_aux = evaluate(lifetime, population, key)
    mask = np.asarray(aux["promoted"])
    assert mask.sum() == k  # exactly k promoted
    np.testing.assert_array_equal(
        better_first(combined, maximize), better_first(single, maximize)
    )
    # the promoted are the single-fidelity top k, with their exact fitness
    top = better_first(single, maximize)[:k]
    assert set(np.flatnonzero(mask)) == set(top)
    np.testing.assert_array_equal(np.asarray(combined)[top], np.asarray(single)[top])
    np.testing.assert_array_equal(np.asarray(aux["proxy"]), np.asarray(single))
    np.testing.assert_array_equal(
        np.asarray(aux["full_aux"]["last"])[top],
        np.asarray(single_aux["last"])[top],
    )
    # deterministic
    again = evaluate(fidelity, population, key, maximize=maximize)
    assert tree_equal(again, (combined, aux))


def short_lifetime(genome, key):
    return lifetime(genome, key, steps=2)


@settings(max_examples=min(4, settings().max_examples))  # each example compiles
@given(
    size=st.integers(2, 8),
    batch_size=st.none() | st.integers(2, 4),
    seed=st.integers(0, 99),
)
def test_multi_fidelity_fully_evaluates_the_promoted_with_their_own_keys(
    size, batch_size, seed
):
    k = size // 2
    population = random_population(seed, size)
    key = jr.key(seed + 1)
    fidelity = MultiFidelity(
        short_lifetime, lifetime, num_promoted=k, proxy_steps=2, full_steps=6
    )
    combined, aux = evaluate(
        fidelity, population, key, maximize=False, batch_size=batch_size
    )
    proxy, _ = evaluate(short_lifetime, population, key)
    full, _ = evaluate(lifetime, population, key)
    promoted = promote_reference(np.asarray(proxy), k, maximize=False)
    mask = np.asarray(aux["promoted"])
    assert set(np.flatnonzero(mask)) == set(promoted)
    # genome i's full fitness is what single-fidelity evaluation gives it,
    # wherever it landed among the promoted
    np.testing.assert_array_equal(
        np.asarray(combined)[promoted], np.asarray(full)[promoted]
    )
    check_combined(
        np.asarray(proxy),
        np.asarray(full)[promoted],
        promoted,
        combined,
        mask,
        maximize=False,
        strict=False,
    )
    assert fidelity.agent_steps(size) == size * 2 + k * 6
    assert fidelity.full_agent_steps(size) == size * 6


def test_multi_fidelity_rejects_bad_configuration(key):
    population = random_population(0, 4)
    fidelity = MultiFidelity(
        sphere, sphere, num_promoted=2, proxy_steps=1, full_steps=2
    )
    with pytest.raises(ValueError, match="maximize"):
        evaluate(fidelity, population, key)
    too_many = MultiFidelity(
        sphere, sphere, num_promoted=5, proxy_steps=1, full_steps=2
    )
    with pytest.raises(ValueError, match="num_promoted=5 must be at most"):
        evaluate(too_many, population, key, maximize=True)
    for field in ("num_promoted", "proxy_steps", "full_steps"):
        kwargs = {"num_promoted": 1, "proxy_steps": 1, "full_steps": 1, field: 0}
        with pytest.raises(ValueError, match=field):
            MultiFidelity(sphere, sphere, **kwargs)
    with pytest.raises(TypeError, match="proxy_fn"):  # beartype or our check
        MultiFidelity(3, sphere, num_promoted=1, proxy_steps=1, full_steps=1)
