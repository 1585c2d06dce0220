import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from reference_envs import float_arrays

from eqxevo._src.envs.foraging import homeostasis
from eqxevo.envs import Foraging, ForagingParams

K, M = 2, 3
ENV = Foraging(K, M)
step = eqx.filter_jit(ENV.step)
reset = eqx.filter_jit(ENV.reset)


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
