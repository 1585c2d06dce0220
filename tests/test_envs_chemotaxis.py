import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given
from reference_envs import as_numpy, chemotaxis_step, wrap

from eqxevo import rollout, testing
from eqxevo.envs import Chemotaxis, ChemotaxisParams, ChemotaxisState

ENV = Chemotaxis()
step = eqx.filter_jit(ENV.step)
reset = eqx.filter_jit(ENV.reset)


def close_angle(a, b, atol):
    return abs(wrap(float(a) - float(b))) <= atol


unit = st.floats(-1.0, 1.0, width=32)
params_strategy = st.builds(
    ChemotaxisParams,
    length_scale=st.floats(0.05, 2.0),
    sensor_noise=st.floats(0.0, 0.05),
    sensor_angle=st.floats(0.0, 1.5),
    sensor_distance=st.floats(0.0, 0.2),
    drift_speed=st.floats(0.0, 0.05),
    reward_length=st.floats(0.05, 1.0),
    episode_length=st.integers(1, 50),
)


@given(
    params=params_strategy,
    position=st.tuples(unit, unit),
    heading=st.floats(-3.14159, 3.14159),
    source=st.tuples(unit, unit),
    velocity=st.tuples(unit, unit),
    time=st.integers(0, 60),
    action=testing.actions(2),
    key=testing.keys(),
)
def test_chemotaxis_step_matches_numpy_reference(
    params, position, heading, source, velocity, time, action, key
):
    state = ChemotaxisState(
        position=jnp.asarray(position, jnp.float32),
        heading=jnp.asarray(heading, jnp.float32),
        source=jnp.asarray(source, jnp.float32),
        source_velocity=0.05 * jnp.asarray(velocity, jnp.float32),
        time=jnp.asarray(time, jnp.int32),
    )
    obs, new, reward, done, info = step(key, state, action, params)
    noise = as_numpy(ENV.sample_noise(key, params))
    r_obs, r_new, r_reward, r_done, r_info = chemotaxis_step(
        as_numpy(state), np.asarray(action), as_numpy(params), noise
    )
    # float32 against float64: absolute tolerance 1e-5 on positions (unit arena),
    # 1e-4 on log readings and rewards.
    np.testing.assert_allclose(obs, r_obs, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(new.position, r_new["position"], atol=1e-5)
    assert close_angle(new.heading, r_new["heading"], 1e-5)
    np.testing.assert_allclose(new.source, r_new["source"], atol=1e-5)
    np.testing.assert_allclose(new.source_velocity, r_new["source_velocity"], atol=1e-7)
    assert int(new.time) == r_new["time"] and bool(done) == r_done
    np.testing.assert_allclose(reward, r_reward, atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(info["distance"], r_info["distance"], atol=1e-5)


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
