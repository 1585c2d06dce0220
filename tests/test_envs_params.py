"""The params base: declared fields, one set of checks at construction and reset."""

import math

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given

from eqxevo._app.config import ConfigError, from_dict
from eqxevo._app.experiment.build import lookup, make_env
from eqxevo._src.envs.params import Spec
from eqxevo.envs import (
    Chemotaxis,
    ChemotaxisParams,
    Foraging,
    ForagingParams,
    LongHorizon,
    LongHorizonParams,
)

ENVS = {
    "chemotaxis": (Chemotaxis, ChemotaxisParams),
    "foraging": (Foraging, ForagingParams),
    "long_horizon": (LongHorizon, LongHorizonParams),
}
FIELDS = [
    (env_name, name) for env_name, (_, cls) in ENVS.items() for name in cls.specs()
]


@eqx.filter_jit
def jit_reset(env, key, params):
    return env.reset(key, params)


def outside(spec: Spec) -> float:
    """A value just outside the field's range (or a non-finite one if unbounded)."""
    if spec.low is not None:
        return spec.low - (0 if spec.low_open else 1)
    if spec.high is not None:
        return spec.high + (0 if spec.high_open else 1)
    return math.inf


@pytest.mark.parametrize("env_name", ENVS)
def test_every_field_is_a_typed_scalar_with_its_declared_default(env_name):
    env_cls, cls = ENVS[env_name]
    params = env_cls().default_params()
    assert type(params) is cls
    for name, spec in cls.specs().items():
        value = getattr(params, name)
        assert value.shape == () and not value.weak_type
        assert value.dtype == (jnp.int32 if spec.integer else jnp.float32)
        assert float(value) == pytest.approx(spec.default, rel=1e-6)


def test_shared_fields_are_declared_once_in_the_bases():
    body = ChemotaxisParams.specs()
    feeding = ForagingParams.specs()
    assert list(body)[:8] == list(feeding)[:8] == list(LongHorizonParams.specs())[:8]
    assert body["length_scale"].default == 0.5  # L0's gradient
    assert feeding["length_scale"].default == 0.3  # a subclass may re-declare it
    assert feeding["nutrition"] is LongHorizonParams.specs()["nutrition"]


@pytest.mark.parametrize(("env_name", "name"), FIELDS)
def test_an_out_of_range_field_is_refused_at_construction_and_at_reset(env_name, name):
    env_cls, cls = ENVS[env_name]
    spec = cls.specs()[name]
    bad = outside(spec)
    message = f"{cls.__name__}: {name} must be"
    with pytest.raises(ValueError, match=message) as construction:
        cls(**{name: bad})
    assert str(bad) in str(construction.value)
    # eqx.tree_at skips construction; an eager reset checks again, alike.
    env, key = env_cls(), jr.key(0)
    edited = eqx.tree_at(
        lambda p: getattr(p, name),
        env.default_params(),
        jnp.asarray(bad, spec.dtype),
    )
    with pytest.raises(ValueError, match=message):
        env.reset(key, edited)


@pytest.mark.parametrize("env_name", ENVS)
def test_traced_checks_name_the_field_and_are_off_by_default(env_name):
    env_cls, cls = ENVS[env_name]
    checked, unchecked, key = env_cls(traced_param_checks=True), env_cls(), jr.key(0)
    params = checked.default_params()
    jax.block_until_ready(jit_reset(checked, key, params))  # valid params pass
    for name, spec in cls.specs().items():
        bad = outside(spec)
        if not math.isfinite(bad):
            continue  # unbounded (checked for finiteness: see the Hypothesis test)
        edited = eqx.tree_at(
            lambda p, name=name: getattr(p, name), params, jnp.asarray(bad, spec.dtype)
        )
        with pytest.raises(eqx.EquinoxRuntimeError, match=f"{cls.__name__}: {name} "):
            jax.block_until_ready(jit_reset(checked, key, edited))
        jax.block_until_ready(jit_reset(unchecked, key, edited))  # no check compiled


def test_switching_checks_on_recompiles_instead_of_reusing_the_unchecked_program():
    # Regression: the switch was a global flag, read while tracing and absent from
    # the jit cache key, so the program compiled first kept its setting.
    key = jr.key(0)
    params = eqx.tree_at(
        lambda p: p.length_scale, ChemotaxisParams(), jnp.asarray(-1.0)
    )
    traced = eqx.debug.assert_max_traces(Chemotaxis.reset, max_traces=2)
    reset = eqx.filter_jit(traced)
    jax.block_until_ready(reset(Chemotaxis(), key, params))
    with pytest.raises(eqx.EquinoxRuntimeError, match="length_scale"):
        jax.block_until_ready(reset(Chemotaxis(traced_param_checks=True), key, params))
    jax.block_until_ready(reset(Chemotaxis(), key, params))  # and back, cached
    assert eqx.debug.get_num_traces(traced) == 2


def test_programs_without_checks_hold_no_host_callback():
    # A host callback keeps a program out of the persistent compilation cache.
    key, params = jr.key(0), ChemotaxisParams()

    def hlo(env):
        return jax.jit(env.reset).lower(key, params).as_text()

    assert "callback" not in hlo(Chemotaxis())
    assert "callback" in hlo(Chemotaxis(traced_param_checks=True))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"episode_length": 1.5}, "episode_length must be a whole number in"),
        ({"episode_length": True}, "episode_length must be a number"),
        ({"length_scale": "far"}, "length_scale must be a number"),
        ({"length_scale": [0.1, 0.2]}, "length_scale must be a scalar"),
        ({"lenght_scale": 0.3}, "no parameter 'lenght_scale'"),
        (
            {"source_min_distance": 0.95},
            "source_min_distance must be <= source_max_distance; got "
            "source_min_distance=0.95, source_max_distance=0.9",
        ),
    ],
)
def test_bad_values_raise_saying_what_is_allowed(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        ChemotaxisParams(**bad)


def test_params_build_under_vmap_as_a_batch_of_variants():
    scales = jnp.asarray([0.1, 0.2, 0.4], jnp.float32)
    batch = jax.vmap(lambda s: ChemotaxisParams(length_scale=s))(scales)
    np.testing.assert_array_equal(batch.length_scale, scales)
    assert batch.episode_length.shape == (3,)
    with pytest.raises(ValueError, match="episode_length must be a whole number"):
        jax.vmap(lambda t: ChemotaxisParams(episode_length=t))(scales)


def _env_from(table):
    experiment = from_dict(table)
    return make_env(experiment, lookup(experiment))


def test_toml_overrides_keep_their_keys_and_get_the_same_checks():
    table = {"env": {"name": "foraging", "params": {"setpoint": 0.4}}}
    env, params = _env_from(table)
    assert isinstance(env, Foraging) and float(params.setpoint) == pytest.approx(0.4)
    table["env"]["params"] = {"setpoint": 1.0}
    with pytest.raises(ConfigError, match=r"setpoint must be finite and in \(0.0"):
        _env_from(table)
    table["env"] = {"name": "chemotaxis", "options": {"traced_param_checks": True}}
    env, _ = _env_from(table)
    assert env == Chemotaxis(traced_param_checks=True)


@given(
    env_name=st.sampled_from(sorted(ENVS)),
    data=st.data(),
    value=st.one_of(
        st.floats(-2.0, 2.0),
        st.sampled_from([0.0, 1.0, -math.pi, math.pi, math.nan, math.inf, 1e9]),
    ),
)
def test_construction_and_reset_checks_agree(env_name, data, value):
    env_cls, cls = ENVS[env_name]
    name = data.draw(st.sampled_from(sorted(cls.specs())))
    spec = cls.specs()[name]
    if spec.integer:
        value = data.draw(st.integers(-3, 3))
    try:
        cls(**{name: value})
        refused = False
    except ValueError:
        refused = True
    params = cls()
    edited = eqx.tree_at(
        lambda p: getattr(p, name), params, jnp.asarray(value, spec.dtype)
    )
    key = jr.key(0)
    try:
        env_cls().reset(key, edited)
        eager_refused = False
    except ValueError:
        eager_refused = True
    try:
        jax.block_until_ready(jit_reset(env_cls(traced_param_checks=True), key, edited))
        traced_refused = False
    except eqx.EquinoxRuntimeError:
        traced_refused = True
    assert refused == eager_refused == traced_refused
