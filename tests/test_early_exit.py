"""Early exit: a one-episode lifetime stops costing compute once its episode has
ended, with the bits of every step run."""

import functools
import importlib

import equinox as eqx
import jax
import jax.random as jr
import numpy as np
import pytest
from helpers import tree_equal

import eqxevo
from eqxevo._src.early_exit import EXIT_CHUNK
from eqxevo._src.nets.factories import mlp
from eqxevo._src.rollout import lifetime_summary, run_lifetime
from eqxevo.envs import BraxEnv, Chemotaxis

STEPS = 3 * EXIT_CHUNK + 17  # chunks and a remainder


def _population(env, size=16):
    genome = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))
    strategy = eqxevo.Strategy("SNES", genome, population_size=size)
    return strategy.ask(jr.key(0), strategy.init(jr.key(1)))[0]


def _lifetimes(env, population, exit_early, track_obs):
    def life(genome, key):
        carry, _ = run_lifetime(
            key,
            genome,
            env,
            env.default_params(),
            STEPS,
            reset_on_done=False,
            reset_policy_on_done=False,
            track_obs=track_obs,
            exit_early=exit_early,
        )
        return lifetime_summary(carry, STEPS, False), carry.t

    batched = eqx.filter_vmap(life, in_axes=(eqx.if_array(0), None))
    return eqx.filter_jit(batched)(population, jr.key(2))


@pytest.mark.parametrize(
    ("make_env", "track_obs"),
    [
        # Brax with the observation moments only: its compile is the cost, and
        # the path without moments is the chemotaxis cases' own.
        pytest.param(
            functools.partial(BraxEnv, "inverted_pendulum", backend="spring"),
            True,
            id="brax-pendulum-moments",
            marks=pytest.mark.slow,
        ),
        pytest.param(Chemotaxis, False, id="chemotaxis"),
        pytest.param(Chemotaxis, True, id="chemotaxis-moments"),
    ],
)
def test_exiting_early_keeps_the_bits_of_every_chunk_run(make_env, track_obs):
    env = make_env()
    population = _population(env)
    early = _lifetimes(env, population, True, track_obs)
    every = _lifetimes(env, population, False, track_obs)
    assert tree_equal(early, every)
    summary, t = early
    assert (np.asarray(t) == STEPS).all()  # as if every step had run
    if not isinstance(env, Chemotaxis):
        # episodes that ended at different steps within one batch
        alive = np.asarray(summary["steps_alive"])
        assert alive.min() < EXIT_CHUNK and len(set(alive.tolist())) > 1


def test_an_ended_episode_stops_costing_steps(monkeypatch):
    # Count the steps a lifetime runs (a callback in every step): a pendulum
    # that falls in its first chunk runs that chunk and the remainder, not
    # every chunk.
    rollout_module = importlib.import_module("eqxevo._src.rollout")
    real_step = rollout_module.lifetime_step
    ran = []

    def counted_step(*args, **kwargs):
        jax.debug.callback(lambda: ran.append(1))
        return real_step(*args, **kwargs)

    monkeypatch.setattr(rollout_module, "lifetime_step", counted_step)
    env = BraxEnv("inverted_pendulum", backend="spring")
    genome = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))

    def life(key, exit_early):
        carry, _ = run_lifetime(
            key,
            genome,
            env,
            env.default_params(),
            STEPS,
            False,
            False,
            exit_early=exit_early,
        )
        return carry

    early = jax.jit(functools.partial(life, exit_early=True))(jr.key(2))
    jax.effects_barrier()
    assert int(early.steps_alive) < EXIT_CHUNK  # it fell in the first chunk
    assert len(ran) == EXIT_CHUNK + STEPS % EXIT_CHUNK
    ran.clear()
    jax.jit(functools.partial(life, exit_early=False))(jr.key(2))
    jax.effects_barrier()
    assert len(ran) == STEPS
