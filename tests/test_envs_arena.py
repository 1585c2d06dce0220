"""Every arena environment's step against its NumPy reference (reference_envs.py)."""

import equinox as eqx
import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given
from reference_envs import (
    arena_states,
    assert_step_matches,
    chemotaxis_step,
    float_arrays,
    foraging_step,
    long_horizon_step,
    params_draws,
    replay,
)

from eqxevo import testing
from eqxevo._src.envs.chemotaxis import ChemotaxisState
from eqxevo._src.envs.foraging import ForagingState
from eqxevo._src.envs.long_horizon import LongHorizonState
from eqxevo.envs import Chemotaxis, Foraging, LongHorizon

K, M = 2, 3


def _never(state, expected):
    del state, expected
    return False


def _starved(state, expected):
    # Death is a threshold on a float32 sum: a reserve within rounding of empty
    # may die on one side only.
    del state
    return bool(np.any(np.abs(expected[1]["reserves"]) < 1e-6))


def _long_horizon(digestion):
    return (
        LongHorizon(M, digestion=digestion),
        long_horizon_step,
        arena_states(
            LongHorizonState,
            patches=float_arrays((2, M, 2), -1.0, 1.0),
            amounts=float_arrays((2, M), 0.0, 1.0),
            good=st.integers(0, 1),
            taste=st.just(0.0),
            time=st.integers(0, 40),
            gut=float_arrays((digestion,), -0.125, 0.125),
        ),
        _never,
        {"patches": 1e-6, "taste": 1e-4, "gut": 1e-6},
    )


# env, its reference step, its states, when `died` may differ, tolerances
CASES = {
    "chemotaxis": (
        Chemotaxis(),
        chemotaxis_step,
        arena_states(
            ChemotaxisState,
            source=float_arrays((2,), -1.0, 1.0),
            source_velocity=float_arrays((2,), -1.0, 1.0).map(lambda v: 0.05 * v),
            time=st.integers(0, 60),
        ),
        _never,
        {"reward_tol": (1e-5, 1e-4), "source_velocity": 1e-7},
    ),
    "foraging": (
        Foraging(K, M),
        foraging_step,
        arena_states(
            ForagingState,
            # Reserves from empty to full, with small values to exercise death.
            reserves=float_arrays((K,), 0.0, 1.0),
            patches=float_arrays((K, M, 2), -1.0, 1.0),
            amounts=float_arrays((K, M), 0.0, 1.0),
            time=st.integers(0, 60),
        ),
        _starved,
        {"patches": 0.0},
    ),
    # food tastes and nourishes `digestion` steps after it is eaten (or at once)
    "long_horizon": _long_horizon(0),
    "long_horizon_digesting": _long_horizon(3),
}


@eqx.filter_jit
def _step(env, key, state, action, params):
    return env.step(key, state, action, params)


@pytest.mark.parametrize("name", sorted(CASES))
@given(data=st.data(), action=testing.actions(2), key=testing.keys())
def test_step_matches_numpy_reference(name, data, action, key):
    env, reference, states, may_tie, tolerances = CASES[name]
    params = data.draw(params_draws(type(env.default_params())), label="params")
    state = data.draw(states, label="state")
    expected = replay(reference, env, key, state, action, params)
    out = _step(env, key, state, action, params)
    if "died" in expected[4] and bool(out[4]["died"]) != expected[4]["died"]:
        assert may_tie(state, expected), "died differs away from a threshold"
        return
    assert_step_matches(out, expected, **tolerances)
