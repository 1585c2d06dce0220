import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import lifetime, random_population, sphere, tree_equal
from hypothesis import given, settings

from eqxevo import MultiFidelity, combine_fidelities, evaluate
from eqxevo._src.fidelity import promote

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
    combined, aux = evaluate(key, fidelity, population, maximize=maximize)
    single, single_aux = evaluate(key, lifetime, population)
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
    again = evaluate(key, fidelity, population, maximize=maximize)
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
        key, fidelity, population, maximize=False, batch_size=batch_size
    )
    proxy, _ = evaluate(key, short_lifetime, population)
    full, _ = evaluate(key, lifetime, population)
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
        evaluate(key, fidelity, population)
    too_many = MultiFidelity(
        sphere, sphere, num_promoted=5, proxy_steps=1, full_steps=2
    )
    with pytest.raises(ValueError, match="num_promoted=5 must be at most"):
        evaluate(key, too_many, population, maximize=True)
    for field in ("num_promoted", "proxy_steps", "full_steps"):
        kwargs = {"num_promoted": 1, "proxy_steps": 1, "full_steps": 1, field: 0}
        with pytest.raises(ValueError, match=field):
            MultiFidelity(sphere, sphere, **kwargs)
    with pytest.raises(TypeError, match="proxy_fn"):  # beartype or our check
        MultiFidelity(3, sphere, num_promoted=1, proxy_steps=1, full_steps=1)
