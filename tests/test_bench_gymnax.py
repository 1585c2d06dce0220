"""The gymnax suite of the benchmark: equal policies, held-out scoring, statistics.

No timing is asserted; these check that both sides of the comparison run the
same search and that the figures are computed as documented.
"""

import math
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

pytest.importorskip("gymnax")
pytest.importorskip("scipy")

from eqxevo import rollout
from eqxevo._app.bench import (
    gymnax_sides as sides,
    gymnax_suite as suite,
    gymnax_task as gt,
)

TINY = {
    "Pendulum-v1": gt.Task("Pendulum-v1", 4, 1, False, 4, 1, 2, -250.0, 1, steps=50),
    "Acrobot-v1": gt.Task("Acrobot-v1", 4, 1, True, 4, 1, 2, -100.0, 1, steps=50),
}


@pytest.mark.parametrize("name", sorted(gt.TASKS))
def test_flax_and_equinox_policies_take_the_same_action(name, key):
    """evosax's flax policy and eqxevo's MLPPolicy behind GymnaxEnv are one
    function of the raw observation, from the same weights."""
    task = gt.TASKS[name]
    env = gt.make_env(task)
    weights = gt.initial_weights(task, 3)
    flax_policy = gt.flax_policy(task)
    mlp = gt.mlp_from_flax(task, weights)
    space = env.gymnax_env.observation_space(env.gymnax_env.default_params)
    low = np.maximum(np.asarray(space.low, np.float32), -5.0)
    high = np.minimum(np.asarray(space.high, np.float32), 5.0)
    raw = jr.uniform(key, (64, env.obs_size), minval=low, maxval=high)

    def evosax_action(obs):
        return flax_policy.apply(weights, obs, None)

    def eqxevo_action(obs):
        return env.to_gymnax_action(mlp(env.to_observation(obs), None)[0])

    # compiled, as both run in their loops
    ours = jax.jit(jax.vmap(eqxevo_action))(raw)
    theirs = jax.jit(jax.vmap(evosax_action))(raw)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    if env.discrete:
        # a different action on a near-tie of two outputs would be legitimate;
        # none of 64 random observations should produce one
        np.testing.assert_array_equal(ours, theirs)
        assert len(np.unique(np.asarray(ours))) > 1  # not a constant policy
    else:
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_both_sides_start_from_the_same_mean():
    task = TINY["Pendulum-v1"]
    eqx_side = sides.EqxevoSide(task, "snes")
    evosax_side = sides.EvosaxSide(task, "snes")
    strategy = eqx_side.strategy(7)
    ours = strategy.mean(strategy.init(jr.key(0)))
    _, state, _ = evosax_side.start(7)
    theirs = gt.mlp_from_flax(task, evosax_side.es.get_mean(state))
    for a, b in zip(
        jax.tree.leaves(eqx.filter(ours, eqx.is_array)),
        jax.tree.leaves(eqx.filter(theirs, eqx.is_array)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)
    # and another seed starts elsewhere
    other = eqx_side.strategy(8)
    assert not np.array_equal(other.initial_flat, strategy.initial_flat)


def test_heldout_return_is_the_mean_over_the_heldout_episodes(key):
    task = TINY["Pendulum-v1"]
    env = gt.make_env(task)
    params = env.default_params()
    steps = gt.episode_length(task)
    genomes = [gt.mlp_from_flax(task, gt.initial_weights(task, s)) for s in (0, 1)]
    got = gt.heldout_returns(task, genomes)
    keys = gt.heldout_keys()
    assert keys.shape == (gt.HELDOUT_EPISODES,) and gt.HELDOUT_EPISODES >= 32
    for genome, value in zip(genomes, got, strict=True):
        returns = [
            rollout(jr.split(k, 1)[0], genome, env, params, steps, reset_on_done=False)[
                0
            ]
            for k in keys
        ]
        np.testing.assert_allclose(value, np.mean(returns), rtol=1e-5)
    assert got[0] != got[1]


def test_heldout_keys_differ_from_every_seed_training_key():
    heldout = {tuple(np.asarray(jr.key_data(k)).tolist()) for k in gt.heldout_keys()}
    for seed in range(8):
        for k in (
            jr.key(seed),
            jr.fold_in(jr.key(seed), 0),
            jr.fold_in(jr.key(seed), 1),
        ):
            assert tuple(np.asarray(jr.key_data(k)).tolist()) not in heldout


def test_mann_whitney_separates_two_clear_groups_and_not_equal_ones():
    low, high = [1.0, 2.0, 3.0, 4.0, 5.0], [11.0, 12.0, 13.0, 14.0, 15.0]
    # five against five, fully separated: the exact two-sided p is 2 / C(10, 5)
    assert suite.mann_whitney(low, high) == pytest.approx(2 / 252)
    assert suite.mann_whitney([3.0] * 5, [3.0] * 5) == 1.0
    assert suite.mann_whitney(low, [2.5, 3.5, 1.5, 4.5, 5.5]) > 0.5


def test_time_to_target_is_the_first_kept_mean_at_or_above_it():
    run = sides.Case(
        seconds=[1.0, 2.0, 3.0, 4.0],
        generations=[10, 20, 30, 40],
        means=[None] * 4,
        wall_s=4.0,
        cpu_s=4.0,
    )
    assert suite.time_to_target(run, [-900.0, -240.0, -300.0, -200.0], -250.0) == 2.0
    assert suite.time_to_target(run, [-900.0, -250.0, -300.0, -200.0], -250.0) == 2.0
    assert (
        suite.time_to_target(run, [-900.0, -800.0, -700.0, -600.0], -250.0) == math.inf
    )


@pytest.mark.slow
def test_a_comparison_writes_a_complete_record():
    logged = []
    record = suite.compare(TINY["Acrobot-v1"], "snes", 2, log=logged.append)
    for side in ("eqxevo", "evosax"):
        assert len(record[f"{side}_returns"]) == 2
        assert (
            record[f"{side}_q25"] <= record[f"{side}_median"] <= record[f"{side}_q75"]
        )
        assert len(record[f"{side}_curve"]) == 2  # chunk 1, 2 generations
        assert record[f"{side}_reached"] in (0, 1, 2)
        assert record[f"{side}_generation_s"] > 0
        assert all(-50.0 <= r <= 0.0 for r in record[f"{side}_returns"])
    assert 0.0 <= record["p_value"] <= 1.0
    assert "Acrobot-v1 snes" in logged[0]
    table = suite.markdown([record])
    assert table.count("\n") == 3 and "| Acrobot-v1 | snes |" in table


def test_unknown_suite_envs_are_named():
    with pytest.raises(ValueError, match="MountainCar-v0"):
        suite.gymnax_comparison(envs=["MountainCar-v0"])


def test_the_suite_is_a_bench_part():
    from eqxevo._app.bench.cli import bench
    from eqxevo._app.bench.parts import PARTS, QUICK_PARTS

    assert "gymnax" in PARTS and "gymnax" in QUICK_PARTS
    context = bench.make_context("bench", ["--only", "gymnax"])
    assert context.params["only"] == ("gymnax",)


def test_the_suite_runs_as_a_module_and_names_an_unknown_task():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "eqxevo._app.bench.gymnax_suite",
            "--quick",
            "--env",
            "No",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        f"Error: envs: ['No'] are not in the suite; it has {list(gt.QUICK_TASKS)}"
    )
    assert done.stdout == ""


def test_the_suite_command_checks_its_counts_before_starting_jax():
    from click.testing import CliRunner

    result = CliRunner().invoke(suite.main, ["--seeds", "0"])
    assert result.exit_code == 1
    assert result.output == "Error: --seeds must be a positive int; got 0\n"


def test_episodes_fitness_averages_whole_episodes(key):
    task = TINY["Pendulum-v1"]
    fitness = gt.fitness_for(task, episodes=3)
    genome = gt.mlp_from_flax(task, gt.initial_weights(task, 0))
    got = eqx.filter_jit(fitness)(genome, key)
    env, params = fitness.env, fitness.env_params
    expected = jnp.mean(
        jnp.stack(
            [
                rollout(k, genome, env, params, 50, reset_on_done=False)[0]
                for k in jr.split(key, 3)
            ]
        )
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5)
