"""Several lifetimes per fitness: `LifetimeFitness(..., lifetimes=E)` and
`run.lifetimes_per_fitness` (the mean over E lifetimes on `split(key, E)`)."""

import dataclasses
import functools
import tomllib
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import tree_equal

from eqxevo import LifetimeFitness, evaluate, rollout, stack_runs
from eqxevo._app.config import ConfigError, check_resumable, dumps, from_dict
from eqxevo._src.evaluate import draws_apart
from eqxevo._src.rollout import lifetime_keys
from eqxevo.experiment import build, load

STEPS = 25
POPULATION = 33


def config(**run):
    return {
        "env": {"name": "chemotaxis", "params": {"episode_length": 10}},
        "net": {"name": "sparse_rate", "options": {"num_neurons": 12, "fan_in": 3}},
        "strategy": {"name": "snes", "population_size": POPULATION},
        "run": {"lifetime": STEPS, **run},
    }


@functools.cache
def workload() -> tuple[LifetimeFitness, Any]:
    """The one-lifetime fitness of a small L0 network, episodes ending every 10
    steps (resets run), and a population of 33 genomes (two blocks of 16 and a
    padded third)."""
    built = build(from_dict(config()))
    assert isinstance(built.fitness, LifetimeFitness)
    strategy = built.strategy
    population, _ = strategy.ask(jr.key(0), strategy.init(jr.key(1)))
    return built.fitness, population


def with_lifetimes(fitness: LifetimeFitness, lifetimes: int) -> LifetimeFitness:
    return dataclasses.replace(fitness, lifetimes=lifetimes)


def genome(population, i):
    return jax.tree.map(lambda x: x[i] if eqx.is_inexact_array(x) else x, population)


def test_one_lifetime_is_one_rollout_on_the_key_itself():
    # E = 1 (the default) is today's program: one rollout on the call's key.
    fitness, population = workload()
    assert fitness.lifetimes == 1
    env, params = fitness.env, fitness.env_params
    one = genome(population, 0)

    def direct(g, k):
        return rollout(k, g, env, params, STEPS)

    key = jr.key(4)
    assert str(jax.make_jaxpr(fitness)(one, key)) == str(
        jax.make_jaxpr(direct)(one, key)
    )
    assert tree_equal(fitness(one, key), direct(one, key))
    assert lifetime_keys(key, 1) is key


def test_several_lifetimes_are_the_mean_of_single_lifetimes_on_split_keys():
    one, population = workload()
    three = with_lifetimes(one, 3)
    key = jr.key(11)
    for i in (0, 5):
        g = genome(population, i)
        got_fitness, got = eqx.filter_jit(three)(g, key)
        singles = [one(g, k) for k in jr.split(key, 3)]
        values = np.asarray([float(f) for f, _ in singles], np.float32)
        assert len(set(values.tolist())) > 1  # the lifetimes differ: a real mean
        np.testing.assert_allclose(got_fitness, np.mean(values), rtol=1e-6)
        assert got_fitness.dtype == jnp.float32
        assert set(got) == set(singles[0][1])
        for name, value in got.items():
            want = np.mean(np.asarray([s[name] for _, s in singles], np.float64))
            assert value.dtype == jnp.float32, name
            np.testing.assert_allclose(value, want, rtol=1e-6, err_msg=name)
    keys = lifetime_keys(key, 3)
    assert np.array_equal(jr.key_data(keys), jr.key_data(jr.split(key, 3)))


def test_several_lifetimes_keep_the_bits_of_every_block_size_and_prefix():
    # With shared episodes, blocks of 16 (3 of them, the last padded) and a
    # prefix of 17 genomes give the bits of the whole population.
    one, population = workload()
    two = with_lifetimes(one, 2)
    assert two.draws_apart and draws_apart(two)
    key = jr.key(7)
    whole = evaluate(key, two, population)
    assert tree_equal(evaluate(key, two, population, batch_size=1), whole)
    prefix = jax.tree.map(
        lambda x: x[:17] if eqx.is_inexact_array(x) else x, population
    )
    assert tree_equal(evaluate(key, two, prefix), jax.tree.map(lambda x: x[:17], whole))


def _conds(fitness: LifetimeFitness, population) -> int:
    jaxpr = jax.make_jaxpr(lambda p, k: evaluate(k, fitness, p))(population, jr.key(0))
    return str(jaxpr).count(" cond[")


def test_a_shared_episodes_lifetimes_are_still_drawn_once_for_the_population():
    # The E lifetimes run one after another: their draws stay conditionals (a
    # vmap over lifetimes would turn them into selects), computed once for the
    # population, and they survive optimisation.
    one, population = workload()
    two = with_lifetimes(one, 2)
    # birth's reset and initial state, a block of steps' draws
    assert _conds(two, population) == _conds(one, population) >= 3
    text = str(
        jax.jit(lambda p, k: evaluate(k, two, p)[0])
        .lower(population, jr.key(0))
        .compile()
        .as_text()
    )
    assert text.count(" conditional(") >= 3


def test_lifetimes_must_be_a_positive_int():
    one, _ = workload()
    for bad in (0, -1, True):
        with pytest.raises(
            ValueError, match=f"lifetimes must be a positive int; got {bad!r}"
        ):
            with_lifetimes(one, bad)


def test_the_config_key_builds_the_fitness_and_round_trips():
    experiment = from_dict(config(lifetimes_per_fitness=3))
    assert from_dict(tomllib.loads(dumps(experiment))) == experiment
    assert load(None, ["run.lifetimes_per_fitness=4"]).run.lifetimes_per_fitness == 4
    built = build(experiment)
    fitness, heldout = built.fitness, built.heldout_fitness
    assert isinstance(fitness, LifetimeFitness) and fitness.lifetimes == 3
    # held-out evaluation stays one lifetime per held-out episode
    assert isinstance(heldout, LifetimeFitness) and heldout.lifetimes == 1
    assert heldout.env is fitness.env
    assert built.agent_steps_per_generation == POPULATION * STEPS * 3
    default = build(from_dict(config()))
    assert default.heldout_fitness is default.fitness
    # another E is another program
    with pytest.raises(ValueError, match="programs of their own"):
        stack_runs([built.fitness, default.fitness])


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "run.lifetimes_per_fitness = 0 is out of range; it must be >= 1"),
        ("2.5", "run.lifetimes_per_fitness must be int; got 2.5"),
    ],
)
def test_the_config_key_names_itself_when_out_of_range(value, message):
    with pytest.raises(ConfigError) as info:
        load(None, [f"run.lifetimes_per_fitness={value}"])
    assert str(info.value) == message


def test_a_resumed_run_may_not_change_its_lifetimes_per_fitness():
    with pytest.raises(ConfigError, match="would change its trajectory"):
        check_resumable(["run.lifetimes_per_fitness=2"])
