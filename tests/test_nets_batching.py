import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src.nets.batching import population_last

SRC = jnp.array([0, 2, 1, 3, 3], jnp.int32)
DST = jnp.array([0, 0, 1, 2, 3], jnp.int32)


def _step(index, data):
    """Written for a trailing batch axis: gather, scatter, elementwise, scalars."""
    src, dst = index
    w, x, gain = data
    current = jax.ops.segment_sum(w * x[src], dst, 4, indices_are_sorted=True)
    return jnp.tanh(gain * current), jnp.sum(current, axis=0)


def _reference(index, data):
    src, dst = index
    w, x, gain = data
    current = jnp.zeros(4).at[dst].add(w * x[src])
    return jnp.tanh(gain * current), jnp.sum(current)


def test_population_last_equals_the_plain_function_under_vmap(key):
    fn = population_last(_step)
    wkey, xkey = jr.split(key)
    w, x, gain = jr.normal(wkey, (3, 5)), jr.normal(xkey, (3, 4)), jnp.arange(3.0)
    index = (SRC, DST)
    got = jax.jit(jax.vmap(fn, in_axes=(None, 0)))(index, (w, x, gain))
    want = jax.vmap(_reference, in_axes=(None, 0))(index, (w, x, gain))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    # single genome
    one = jax.jit(fn)(index, (w[0], x[0], gain[0]))
    for a, b in zip(one, _reference(index, (w[0], x[0], gain[0])), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_population_last_handles_unbatched_data_nested_vmap_and_batched_index(key):
    fn = population_last(_step)
    w, x = jr.normal(key, (2, 3, 5)), jr.normal(jr.fold_in(key, 1), (2, 3, 4))
    index, gain = (SRC, DST), jnp.float32(0.5)
    # gain unbatched; an outer vmap (seeds) around the population vmap
    inner = jax.vmap(fn, in_axes=(None, (0, 0, None)))
    got = jax.jit(jax.vmap(inner, in_axes=(None, (0, 0, None))))(index, (w, x, gain))
    want = jax.vmap(
        jax.vmap(_reference, in_axes=(None, (0, 0, None))), in_axes=(None, (0, 0, None))
    )(index, (w, x, gain))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    # a different topology per genome falls back to the default vmap
    src = jnp.stack([SRC, SRC[::-1]])
    got = jax.jit(jax.vmap(fn, in_axes=((0, None), (0, 0, None))))(
        (src, DST), (w[:, 0], x[:, 0], gain)
    )
    want = jax.vmap(_reference, in_axes=((0, None), (0, 0, None)))(
        (src, DST), (w[:, 0], x[:, 0], gain)
    )
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
