"""Small genomes and fitness functions shared by the tests."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo.genome import GenomeLayout


class Net(eqx.Module):
    """A genome with evolvable floats, a static integer array and a function."""

    weight: jax.Array
    bias: jax.Array
    edges: jax.Array  # integer: static, shared by the population
    activation: object = eqx.field(static=True)

    def __init__(self, shapes=((3, 2), (2,)), *, key):
        wkey, bkey = jr.split(key)
        self.weight = jr.normal(wkey, shapes[0])
        self.bias = jr.normal(bkey, shapes[1])
        self.edges = jnp.arange(5, dtype=jnp.int32)
        self.activation = jnp.tanh


def sphere(genome, key):
    """Sum of squares of every evolvable leaf (key unused: deterministic)."""
    del key
    leaves = jax.tree.leaves(eqx.filter(genome, eqx.is_inexact_array))
    return sum(jnp.sum(jnp.square(x)) for x in leaves)


def noisy_sphere(genome, key):
    """Sphere plus key-dependent noise, with an aux summary."""
    value = sphere(genome, None) + 0.1 * jr.normal(key, ())
    return value, {"norm": jnp.sqrt(sphere(genome, None))}


def tree_equal(a, b) -> bool:
    """Bit-identical pytrees (NaNs equal to NaNs in the same place)."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(jnp.asarray(x).dtype, jax.dtypes.prng_key):
            x, y = jr.key_data(x), jr.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"):
            return False
    return True


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
