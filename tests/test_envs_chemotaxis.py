import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given

from eqxevo import rollout, testing
from eqxevo.envs import Chemotaxis, ChemotaxisParams

ENV = Chemotaxis()
step = eqx.filter_jit(ENV.step)
reset = eqx.filter_jit(ENV.reset)


@given(
    key=testing.keys(),
    bounds=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)).map(sorted),
)
def test_reset_places_source_in_its_annulus_and_agent_at_centre(key, bounds):
    params = ChemotaxisParams(
        source_min_distance=bounds[0], source_max_distance=bounds[1]
    )
    obs, state = reset(key, params)
    distance = float(jnp.linalg.norm(state.source))
    assert bounds[0] - 1e-5 <= distance <= bounds[1] + 1e-5
    assert np.all(np.asarray(state.position) == 0.0) and int(state.time) == 0
    assert obs.shape == (2,) and bool(jnp.all(jnp.isfinite(obs)))


def test_same_key_gives_identical_reset_and_step(key):
    params = ENV.default_params()
    a, b = reset(key, params), reset(key, params)
    assert eqx.tree_equal(a, b)
    action = jnp.array([0.3, -0.2], jnp.float32)
    assert eqx.tree_equal(
        step(key, a[1], action, params), step(key, b[1], action, params)
    )


def test_drifting_source_stays_in_the_arena(key):
    params = ChemotaxisParams(drift_speed=0.05, episode_length=10_000)
    _, state = reset(key, params)

    def advance(state, k):
        _, state, *_ = ENV.step(k, state, jnp.zeros(2, jnp.float32), params)
        return state, state.source

    _, sources = jax.lax.scan(advance, state, jr.split(key, 200))
    assert float(jnp.max(jnp.abs(sources))) <= 1.0 + 1e-6
    steps = jnp.linalg.norm(jnp.diff(sources, axis=0), axis=-1)
    assert float(jnp.max(steps)) <= 0.05 + 1e-5  # never faster than drift_speed


@pytest.mark.parametrize(
    "bad",
    [
        {"length_scale": -1.0},
        {"length_scale": 0.0},
        {"sensor_noise": -0.1},
        {"source_min_distance": 0.95},  # > source_max_distance (0.9)
        {"source_max_distance": 2.0},  # > arena_half
        {"episode_length": 0},
        {"episode_length": 1.5},
        {"reward_length": float("nan")},
    ],
)
def test_bad_params_raise_naming_the_parameter(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        ChemotaxisParams(**bad)


def test_traced_invalid_params_fail_at_run_time_when_checks_are_on(key):
    params = eqx.tree_at(lambda p: p.length_scale, ENV.default_params(), -1.0)
    params = jax.tree.map(jnp.asarray, params)
    checked = Chemotaxis(traced_param_checks=True)
    with pytest.raises(eqx.EquinoxRuntimeError, match="length_scale must be"):
        jax.block_until_ready(eqx.filter_jit(checked.reset)(key, params))
    # eagerly (concrete params): a ValueError at once, whatever the switch
    with pytest.raises(ValueError, match="length_scale must be"):
        ENV.reset(key, params)


def test_variants_are_params_run_by_one_program(key):
    from eqxevo.agents import BraitenbergAgent

    agent = BraitenbergAgent()
    variants = [
        ChemotaxisParams(length_scale=s, drift_speed=d)
        for s, d in ((0.5, 0.0), (0.2, 0.003))
    ]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *variants)
    run = eqx.filter_jit(
        eqx.debug.assert_max_traces(
            lambda p: jax.vmap(lambda q: rollout(key, agent, ENV, q, 50)[0])(p),
            max_traces=1,
        )
    )
    both = run(stacked)
    one_by_one = [float(rollout(key, agent, ENV, v, 50)[0]) for v in variants]
    np.testing.assert_allclose(both, one_by_one, rtol=1e-5)
    run(jax.tree.map(lambda x: x[::-1], stacked))  # new values, same program
