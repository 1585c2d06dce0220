import math

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_nets as ref
from hypothesis import given

from eqxevo._src.nets.neurons import lif_step, rate_step
from eqxevo.nets import LIFNeurons, RateNeurons

N = 16
TOL = {"rtol": 1e-5, "atol": 1e-5}  # one float32 step of O(1) values
arrays = st.integers(0, 2**16).map(lambda s: np.random.default_rng(s))


def _draw(rng):
    potential = rng.normal(size=N).astype(np.float32)
    current = (2 * rng.normal(size=N)).astype(np.float32)
    bias = rng.normal(size=N).astype(np.float32)
    tau = rng.uniform(0.1, 30.0, size=N).astype(np.float32)
    return potential, current, bias, tau


_rate = jax.jit(rate_step, static_argnums=4)
_lif = jax.jit(lif_step, static_argnums=(5, 6, 7, 8))


@given(rng=arrays, dt=st.sampled_from([0.1, 1.0]))
def test_rate_step_equals_the_numpy_reference(rng, dt):
    potential, current, bias, tau = _draw(rng)
    got = _rate(*map(jnp.asarray, (potential, current, bias, tau)), dt)
    want = ref.rate_step(potential, current, bias, tau, dt)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, **TOL)


@given(rng=arrays, dt=st.sampled_from([0.5, 1.0]), steps=st.integers(0, 3))
def test_lif_step_equals_the_numpy_reference(rng, dt, steps):
    potential, current, bias, tau = _draw(rng)
    refractory = rng.integers(0, 3, size=N).astype(np.int32)
    args = (potential, refractory, current, bias, tau)
    got = _lif(*map(jnp.asarray, args), dt, 1.0, 0.0, steps)
    want = ref.lif_step(*args, dt, 1.0, 0.0, steps)
    np.testing.assert_allclose(np.asarray(got[0]), want[0], **TOL)
    np.testing.assert_array_equal(np.asarray(got[1]), want[1])
    np.testing.assert_array_equal(np.asarray(got[2]), want[2])


def test_lif_refractory_period_clamps_then_counts_down():
    neurons = LIFNeurons(1, tau=5.0, dt=0.5, refractory_period=1.5)
    assert neurons.refractory_steps == 3
    v, c = jnp.zeros(1), jnp.zeros(1, jnp.int32)
    step = eqx.filter_jit(neurons.step)
    spikes, counters = [], []
    for _ in range(12):
        v, c, s = step(v, c, jnp.full(1, 20.0))  # strong drive: fires when it can
        spikes.append(float(s[0]))
        counters.append(int(c[0]))
    # fire, stay clamped for three steps, fire again as soon as allowed
    assert spikes[:9] == [1, 0, 0, 0, 1, 0, 0, 0, 1]
    assert counters[:5] == [3, 2, 1, 0, 3]


def test_lif_membrane_decays_exactly_with_configurable_dt():
    for dt in (0.1, 1.0):
        neurons = LIFNeurons(1, tau=10.0, dt=dt, threshold=100.0)
        v = jnp.ones(1)
        v, _, s = neurons.step(v, jnp.zeros(1, jnp.int32), jnp.zeros(1))
        assert float(s[0]) == 0.0
        np.testing.assert_allclose(float(v[0]), math.exp(-dt / 10.0), rtol=1e-6)


def test_rate_units_are_leaky_integrators_and_evolvable():
    neurons = RateNeurons(3, tau=4.0, dt=1.0)
    v, r = neurons.step(jnp.zeros(3), jnp.ones(3))
    np.testing.assert_allclose(np.asarray(v), 0.25)
    np.testing.assert_allclose(np.asarray(r), np.tanh(0.25), rtol=1e-6)
    assert neurons.bias.dtype == jnp.float32 and neurons.tau.shape == (3,)


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: RateNeurons(0), "num_neurons must be a positive int"),
        (lambda: RateNeurons(3, dt=0.0), "dt must be a finite number > 0"),
        (lambda: RateNeurons(3, tau=-1.0), "tau must be a finite number > 0"),
        (
            lambda: LIFNeurons(3, refractory_period=-1.0),
            "refractory_period must be >= 0",
        ),
        (
            lambda: LIFNeurons(3, threshold=0.0, reset=0.5),
            "reset must be below threshold",
        ),
    ],
)
def test_bad_neuron_config_raises_a_clear_error(build, match):
    with pytest.raises(ValueError, match=match):
        build()
