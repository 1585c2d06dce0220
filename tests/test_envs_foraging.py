import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from reference_envs import as_numpy, float_arrays, foraging_step, wrap

from eqxevo import testing
from eqxevo.envs import Foraging, ForagingParams, ForagingState
from eqxevo.envs.foraging import homeostasis

K, M = 2, 3
ENV = Foraging(K, M)
step = eqx.filter_jit(ENV.step)
reset = eqx.filter_jit(ENV.reset)

unit = st.floats(-1.0, 1.0, width=32)
params_strategy = st.builds(
    ForagingParams,
    length_scale=st.floats(0.05, 1.0),
    sensor_noise=st.floats(0.0, 0.05),
    eat_radius=st.floats(0.02, 0.5),
    eat_rate=st.floats(0.0, 1.0),
    nutrition=st.floats(0.0, 2.0),
    regrowth_rate=st.floats(0.0, 0.1),
    metabolic_rate=st.floats(0.0, 0.05),
    setpoint=st.floats(0.1, 0.9),
    death_penalty=st.floats(0.0, 200.0),
    episode_length=st.integers(1, 50),
)


@given(
    params=params_strategy,
    position=float_arrays((2,), -1.0, 1.0),
    heading=st.floats(-3.14159, 3.14159),
    # Reserves from empty to full, with small values to exercise death.
    reserves=float_arrays((K,), 0.0, 1.0),
    patches=float_arrays((K, M, 2), -1.0, 1.0),
    amounts=float_arrays((K, M), 0.0, 1.0),
    time=st.integers(0, 60),
    action=testing.actions(2),
    key=testing.keys(),
)
def test_foraging_step_matches_numpy_reference(
    params, position, heading, reserves, patches, amounts, time, action, key
):
    state = ForagingState(
        position=jnp.asarray(position),
        heading=jnp.asarray(heading, jnp.float32),
        reserves=jnp.asarray(reserves),
        patches=jnp.asarray(patches),
        amounts=jnp.asarray(amounts),
        time=jnp.asarray(time, jnp.int32),
    )
    obs, new, reward, done, info = step(key, state, action, params)
    noise = as_numpy(ENV.sample_noise(key, params))
    r_obs, r_new, r_reward, r_done, r_info = foraging_step(
        as_numpy(state), np.asarray(action), as_numpy(params), noise
    )
    # Death is a threshold on a float32 sum; a tie within rounding may flip it.
    reserves64 = r_new["reserves"]
    if np.any(np.abs(reserves64) < 1e-6) and bool(info["died"]) != r_info["died"]:
        return
    np.testing.assert_allclose(obs, r_obs, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(new.position, r_new["position"], atol=1e-5)
    assert abs(wrap(float(new.heading) - r_new["heading"])) <= 1e-5
    np.testing.assert_allclose(new.reserves, r_new["reserves"], atol=1e-5)
    np.testing.assert_allclose(new.amounts, r_new["amounts"], atol=1e-5)
    np.testing.assert_array_equal(new.patches, patches)
    assert int(new.time) == r_new["time"] and bool(done) == r_done
    np.testing.assert_allclose(reward, r_reward, atol=1e-4, rtol=1e-5)
    for name in ("homeostasis", "intake"):
        np.testing.assert_allclose(info[name], r_info[name], atol=1e-5)
    assert bool(info["died"]) == r_info["died"]


@given(reserves=float_arrays((3,), 0.0, 1.0), setpoint=st.floats(0.05, 0.95))
def test_homeostasis_is_one_at_setpoint_and_in_unit_interval(reserves, setpoint):
    setpoint = jnp.asarray(setpoint, jnp.float32)
    h = float(homeostasis(jnp.asarray(reserves), setpoint))
    assert 0.0 <= h <= 1.0
    assert float(homeostasis(jnp.full((3,), setpoint), setpoint)) == 1.0


def test_reserves_deplete_and_starvation_ends_the_episode(key):
    # Patches out of reach: every step costs metabolic_rate, nothing is eaten.
    params = ForagingParams(metabolic_rate=0.1, initial_reserve=0.35, death_penalty=7.0)
    _, state = reset(key, params)
    state = eqx.tree_at(lambda s: s.patches, state, jnp.full((K, M, 2), 5.0))
    rewards, dones = [], []
    for t in range(4):
        _, state, reward, done, _ = step(
            jax.random.fold_in(key, t), state, jnp.zeros(2, jnp.float32), params
        )
        rewards.append(float(reward))
        dones.append(bool(done))
    np.testing.assert_allclose(state.reserves, [0.0, 0.0], atol=1e-6)
    assert dones == [False, False, False, True]
    assert rewards[-1] == -7.0 and all(0.0 <= r <= 1.0 for r in rewards[:-1])


def test_eating_depletes_a_patch_which_regrows(key):
    params = ForagingParams(eat_rate=0.5, regrowth_rate=0.1, metabolic_rate=0.0)
    _, state = reset(key, params)
    # Sit on patch (0, 0), far from the others.
    patches = jnp.full((K, M, 2), 0.9).at[0, 0].set(jnp.zeros(2))
    state = eqx.tree_at(
        lambda s: (s.patches, s.position), state, (patches, jnp.zeros(2))
    )
    still = jnp.zeros(2, jnp.float32)
    _, eaten, *_ = step(key, state, still, params)
    assert float(eaten.amounts[0, 0]) < 0.6 and float(eaten.reserves[0]) > 0.5
    assert float(eaten.reserves[1]) == pytest.approx(0.5, abs=1e-6)
    away = eqx.tree_at(lambda s: s.position, eaten, jnp.array([-0.9, -0.9]))
    _, regrown, *_ = step(key, away, still, params)
    assert float(regrown.amounts[0, 0]) > float(eaten.amounts[0, 0])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"num_resources": 1}, "num_resources"),
        ({"patches_per_resource": 0}, "patches_per_resource"),
    ],
)
def test_bad_config_raises_naming_it(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Foraging(**kwargs)


@pytest.mark.parametrize(
    "bad",
    [
        {"setpoint": 1.0},
        {"eat_rate": 1.5},
        {"eat_radius": 0.0},
        {"initial_reserve": 0.0},
    ],
)
def test_bad_params_raise_naming_the_parameter(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ForagingParams(**bad)


def test_observation_layout_is_fields_then_reserves(key):
    env = Foraging(3, 2)
    params = ForagingParams(sensor_noise=0.0, initial_reserve=0.8, setpoint=0.5)
    obs, state = env.reset(key, params)
    assert obs.shape == (9,) and env.obs_size == 9
    np.testing.assert_allclose(obs[6:], [0.3, 0.3, 0.3], atol=1e-6)
    fields = env.fields(state, params, jnp.zeros((1, 2)))
    assert fields.shape == (1, 3)
