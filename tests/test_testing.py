import random

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, settings
from reference_envs import CounterEnv, CounterParams, CounterState

from eqxevo import testing
from eqxevo.agents import BraitenbergAgent, ForagerAgent, RandomAgent, TasteLearnerAgent
from eqxevo.envs import AbstractEnv, Chemotaxis, Foraging, LongHorizon
from eqxevo.nets import (
    AbstractPolicy,
    MLPPolicy,
    RecurrentPolicy,
    sparse_lif,
    sparse_rate,
)
from eqxevo.testing import CheckFailed, check_env, check_policy

# -- deliberately broken variants of a well-behaved environment and policy ----------


COUNTER = [0]


class GlobalCounterEnv(CounterEnv):
    def step(self, key, state, action, params):
        COUNTER[0] += 1
        obs, new, reward, done, info = super().step(key, state, action, params)
        return obs + COUNTER[0], new, reward, done, info


class PythonRandomEnv(CounterEnv):
    def step(self, key, state, action, params):
        obs, new, reward, done, info = super().step(key, state, action, params)
        return obs, new, reward + random.random(), done, info


class CallbackRandomEnv(CounterEnv):
    """Impure only at run time: the program is the same, its results are not."""

    def step(self, key, state, action, params):
        obs, new, reward, done, info = super().step(key, state, action, params)
        shape = jax.ShapeDtypeStruct((), jnp.float32)
        noise = jax.pure_callback(lambda: np.float32(np.random.rand()), shape)
        return obs, new, reward + noise, done, info


class GrowingState(eqx.Module):
    time: jax.Array
    history: jax.Array


class ShapeChangingEnv(CounterEnv):
    def reset(self, key, params):
        obs, state = super().reset(key, params)
        return obs, GrowingState(state.time, jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action, params):
        history = jnp.concatenate([state.history, action])
        new = GrowingState(state.time + 1, history)
        return jnp.zeros(2), new, jnp.zeros((), jnp.float32), jnp.bool_(False), {}


class DtypeChangingEnv(CounterEnv):
    def step(self, key, state, action, params):
        obs, new, reward, done, info = super().step(key, state, action, params)
        new = CounterState(new.time.astype(jnp.float32), new.noise)
        return obs, new, reward, done, info


class PythonIntStateEnv(CounterEnv):
    def reset(self, key, params):
        obs, state = super().reset(key, params)
        return obs, CounterState(0, state.noise)


class NaNEnv(CounterEnv):
    def step(self, key, state, action, params):
        obs, new, reward, done, info = super().step(key, state, action, params)
        return jnp.log(obs - 10.0), new, reward, done, info


class PythonBranchEnv(CounterEnv):
    def step(self, key, state, action, params):
        if action[0] > 0:  # a Python branch on a traced value
            action = -action
        return super().step(key, state, action, params)


class PythonFloatParamsEnv(CounterEnv):
    def default_params(self):
        return CounterParams(3.0)  # a Python float leaf


class WrongObsEnv(CounterEnv):
    obs_size: int = eqx.field(static=True, default=3)


class GoodPolicy(AbstractPolicy):
    weight: jax.Array
    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=1)

    def __init__(self):
        self.weight = jnp.full((1, 2), 0.5, jnp.float32)

    def initial_state(self, key):
        return jnp.zeros((2,), jnp.float32)

    def __call__(self, obs, state):
        state = 0.9 * state + obs
        return jnp.tanh(self.weight @ state), state


class WrongActionPolicy(GoodPolicy):
    def __call__(self, obs, state):
        action, state = super().__call__(obs, state)
        return jnp.concatenate([action, action]), state


class OutOfRangePolicy(GoodPolicy):
    def __call__(self, obs, state):
        action, state = super().__call__(obs, state)
        return action + 2.0, state


class ImpurePolicy(GoodPolicy):
    def __call__(self, obs, state):
        action, state = super().__call__(obs, state)
        return action * random.random(), state


class GrowingPolicy(GoodPolicy):
    def __call__(self, obs, state):
        action, _ = super().__call__(obs, state[:2])
        return action, jnp.concatenate([state, obs[:1]])


class MismatchedPolicy(GoodPolicy):
    obs_size: int = eqx.field(static=True, default=5)


@pytest.mark.parametrize(
    ("subject", "words"),
    [
        (GlobalCounterEnv(), "impure"),
        (PythonRandomEnv(), "impure"),
        (CallbackRandomEnv(), "running it twice"),
        (ShapeChangingEnv(), "history changed from float32[1] to float32[2]"),
        (DtypeChangingEnv(), "time changed from int32[] to float32[]"),
        (PythonIntStateEnv(), "must be a JAX array"),
        (NaNEnv(), "non-finite"),
        (PythonBranchEnv(), "not traceable"),
        (PythonFloatParamsEnv(), "Python float"),
        (WrongObsEnv(), "shape (3,)"),
        (WrongActionPolicy(), "shape (1,)"),
        (OutOfRangePolicy(), "out of range"),
        (ImpurePolicy(), "impure"),
        (GrowingPolicy(), "lifetime state's type"),
        (MismatchedPolicy(), "obs_size is 5"),
    ],
    ids=lambda x: "" if isinstance(x, str) else type(x).__name__,
)
def test_the_kit_catches_and_explains(subject, words):
    with pytest.raises(CheckFailed) as info:
        if isinstance(subject, AbstractEnv):
            check_env(subject)
        else:
            check_policy(subject, CounterEnv())
    message = str(info.value)
    assert words in message, message
    assert isinstance(info.value, AssertionError)  # pytest reports it as a failure


def test_the_kit_passes_a_good_env_and_policy():
    check_env(CounterEnv())
    check_policy(GoodPolicy(), CounterEnv())


# -- every environment and policy eqxevo ships passes ---------------------------------

ARENA_ENVS = [Chemotaxis(), Foraging(), LongHorizon()]


@pytest.mark.parametrize("env", ARENA_ENVS, ids=lambda e: type(e).__name__)
def test_every_eqxevo_env_and_policy_passes(env, key):
    check_env(env, key=key)
    check_policy(MLPPolicy(env.obs_size, env.action_size, 8, 1, key=key), env, key=key)
    check_policy(RandomAgent(env.obs_size, env.action_size), env, key=key)
    if isinstance(env, Chemotaxis):
        check_policy(BraitenbergAgent(), env, key=key)
    if isinstance(env, Foraging):
        check_policy(ForagerAgent(env.num_resources), env, key=key)
    if isinstance(env, LongHorizon):
        check_policy(TasteLearnerAgent(), env, key=key)


NET_FACTORIES = {
    "sparse_rate": lambda o, a, k: sparse_rate(o, a, num_neurons=12, fan_in=3, key=k),
    "sparse_rate_plastic": lambda o, a, k: sparse_rate(
        o,
        a,
        num_neurons=12,
        fan_in=3,
        layout="gather",
        plasticity={"trace_dtype": "float16"},
        key=k,
    ),
    "sparse_lif_plastic": lambda o, a, k: sparse_lif(
        o, a, num_neurons=12, fan_in=3, plasticity=True, key=k
    ),
    "recurrent": lambda o, a, k: RecurrentPolicy(o, a, 8, key=k),
}


@pytest.mark.parametrize("name", NET_FACTORIES)
def test_every_eqxevo_network_passes(name, key):
    env = Chemotaxis()
    policy = NET_FACTORIES[name](env.obs_size, env.action_size, key)
    check_policy(policy, env, key=key)


# -- Hypothesis strategies -----------------------------------------------------------


@given(key=testing.keys(), size=testing.population_sizes(3, 9, even=True))
def test_strategies_draw_keys_and_even_sizes(key, size):
    assert jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
    assert size % 2 == 0 and 3 <= size <= 9


@settings(max_examples=3)  # each new shape initialises an MLP eagerly
@given(genome=testing.small_genomes(obs_size=3, action_size=2))
def test_small_genomes_are_policies_of_the_requested_sizes(genome):
    assert isinstance(genome, MLPPolicy)
    obs = jnp.ones(3, jnp.float32)
    action, _ = eqx.filter_eval_shape(genome, obs, genome.initial_state(jr.key(0)))
    assert action.shape == (2,)


@given(action=testing.actions(3))
def test_actions_are_float32_in_the_unit_box(action):
    assert action.shape == (3,) and action.dtype == jnp.float32
    assert bool(jnp.all(jnp.abs(action) <= 1.0))


def test_population_sizes_rejects_an_empty_range():
    with pytest.raises(ValueError, match="even"):
        testing.population_sizes(3, 3, even=True)
