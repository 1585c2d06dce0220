import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Net, tree_equal
from hypothesis import given

from eqxevo import GenomeLayout

shapes = st.lists(
    st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple),
    min_size=1,
    max_size=3,
)
dtypes = st.sampled_from([jnp.float32, jnp.float16, jnp.bfloat16])


@given(shapes=shapes, dtype=dtypes, pop=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_flatten_unflatten_round_trips_population(shapes, dtype, pop, seed):
    genome = {
        "w": [jnp.zeros(s, dtype) for s in shapes],
        "topology": jnp.arange(4, dtype=jnp.int32),
    }
    layout = GenomeLayout.from_genome(genome)
    assert layout.num_params == sum(int(np.prod(s)) for s in shapes)
    flat = jr.normal(jr.key(seed), (pop, layout.num_params)).astype(dtype)
    population = layout.unflatten_population(flat)
    for leaf, shape in zip(population["w"], shapes, strict=True):
        assert leaf.shape == (pop, *shape)
        assert leaf.dtype == dtype
    # static leaves are shared, not batched
    assert population["topology"] is genome["topology"]
    np.testing.assert_array_equal(
        np.asarray(layout.flatten_population(population)), np.asarray(flat)
    )
    # one genome of the population equals unflatten of its row
    assert tree_equal(
        jax.tree.map(
            lambda x: x[pop - 1], eqx.filter(population, eqx.is_inexact_array)
        ),
        eqx.filter(layout.unflatten(flat[pop - 1]), eqx.is_inexact_array),
    )


def test_flat_dtype_promotes_mixed_leaves():
    layout = GenomeLayout.from_genome(
        {"a": jnp.ones(2, jnp.float16), "b": jnp.ones(3, jnp.float32)}
    )
    assert layout.dtype == jnp.float32
    out = layout.unflatten(jnp.arange(5.0, dtype=jnp.float32))
    assert out["a"].dtype == jnp.float16 and out["b"].dtype == jnp.float32


def test_genome_without_evolvable_leaves_is_rejected():
    with pytest.raises(ValueError, match="no evolvable leaves"):
        GenomeLayout.from_genome({"edges": jnp.arange(3)})


def test_integer_leaf_selected_for_evolution_is_rejected():
    with pytest.raises(ValueError, match=r"\['edges'\].*floating-point"):
        GenomeLayout.from_genome(
            {"edges": jnp.arange(3), "w": jnp.ones(2)}, filter_spec=eqx.is_array
        )


def test_user_filter_spec_freezes_a_leaf():
    net = Net(key=jr.key(0))
    spec = jax.tree.map(lambda _: False, net)
    spec = eqx.tree_at(lambda n: n.weight, spec, True)
    layout = GenomeLayout.from_genome(net, spec)
    assert layout.num_params == net.weight.size
    population = layout.unflatten_population(jnp.zeros((4, layout.num_params)))
    assert population.weight.shape == (4, 3, 2)
    assert population.bias is net.bias  # frozen and shared


def test_population_with_mismatched_axes_is_rejected():
    layout = GenomeLayout.from_genome({"a": jnp.ones(2), "b": jnp.ones(3)})
    with pytest.raises(ValueError, match="different leading axes"):
        layout.flatten_population({"a": jnp.ones((4, 2)), "b": jnp.ones((5, 3))})
    with pytest.raises(ValueError, match="population_size=4"):
        layout.flatten_population({"a": jnp.ones((5, 2)), "b": jnp.ones((5, 3))}, 4)
    with pytest.raises(ValueError, match="expected"):
        layout.flatten_population({"a": jnp.ones((4, 3)), "b": jnp.ones((4, 3))})
