"""The Brax adapter: the protocol, names and options, truncation, actions on the
actuators' ranges, non-finite states, and observation normalisation by default."""

import jax.random as jr
import pytest
from helpers import check_physics_step, tree_equal, whole_and_resumed

import eqxevo
from eqxevo import LifetimeFitness
from eqxevo._app import config
from eqxevo._src.registry import lookup_env
from eqxevo.envs import BraxEnv
from eqxevo.experiment import build
from eqxevo.testing import check_env

pytest.importorskip("brax", reason="the brax extra is in the dev extra")


@pytest.fixture(scope="module")
def pendulum():
    return BraxEnv("inverted_pendulum", backend="spring", episode_length=3)


def test_brax_environment_meets_the_protocol(pendulum):
    check_env(pendulum, num_steps=4)
    assert (pendulum.obs_size, pendulum.action_size) == (4, 1)


def test_episodes_truncate_and_a_non_finite_state_ends_one(pendulum):
    rewards = check_physics_step(pendulum, action_size=1, episode_length=3)
    assert rewards == [1.0, 1.0, 1.0]  # +1 per step while the pole is up


def test_actions_span_the_actuators_control_range(pendulum):
    # inverted_pendulum's actuator takes [-3, 3]; Ant's [-1, 1] (identity)
    assert pendulum.action_center == (0.0,) and pendulum.action_scale == (3.0,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "ant", "backend": "sprng"}, "did you mean 'spring'"),
        ({"name": "antt"}, "did you mean 'brax:ant'"),
        ({"name": "ant", "episode_length": 0}, "episode_length must be an int >= 1"),
        ({"name": "ant", "no_such_option": 1}, "does not take these arguments"),
    ],
)
def test_bad_input_is_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as err:
        BraxEnv(**kwargs)
    assert "\n" not in str(err.value)


def test_config_names_brax_environments_with_a_close_match():
    constructor, fixed = lookup_env("brax:hopper")
    assert constructor is BraxEnv and fixed == {"name": "hopper"}
    with pytest.raises(ValueError, match="did you mean 'brax:hopper'"):
        lookup_env("brax:hoper")


def test_brax_configs_normalise_observations_by_default():
    base = ["env.name=brax:inverted_pendulum", "env.options.backend=spring"]
    assert _fitness(build(config.load(None, base))).normalize_obs
    off = build(config.load(None, [*base, "run.normalize_obs=off"]))
    assert not _fitness(off).normalize_obs


def _fitness(built) -> LifetimeFitness:
    assert isinstance(built.fitness, LifetimeFitness)
    return built.fitness


@pytest.mark.slow
def test_the_brax_bench_times_every_side_on_the_same_task():
    # `eqxevo bench --only brax` at a toy size: all four sides run, and the two
    # ratios (evolve / BraxProblem, lifetimes / raw loop) are filled in.
    from eqxevo._app.bench.brax_sides import brax_comparison

    rows = brax_comparison(
        quick=True, repeats=1, env="inverted_pendulum", population_size=8
    )
    assert [r["side"] for r in rows] == [
        "eqxevo evolve",
        "evosax BraxProblem",
        "eqxevo lifetimes (evaluate)",
        "raw Brax jit(vmap(scan))",
    ]
    assert not [r["skipped"] for r in rows if "skipped" in r]
    assert all(r["agent_steps_per_s"] > 0 for r in rows)
    assert rows[1]["eqxevo_over_side"] > 0 and rows[3]["eqxevo_over_side"] > 0


def test_brax_runs_keep_their_bits_across_batch_sizes_and_resume():
    # docs/reproducibility.md's rows for Brax (1, 2 and 4 devices, CMA_ES:
    # test_sharding.py's "physics" scenario): micro-batches and a resumed run
    # give the bits of the whole population run at once.
    from eqxevo._src.nets.factories import mlp

    env = BraxEnv("inverted_pendulum", backend="spring", episode_length=20)
    genome = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))
    fitness = LifetimeFitness(env, env.default_params(), 30, normalize_obs=True)
    strategy = eqxevo.Strategy("Sep_CMA_ES", genome, population_size=8)
    whole, rest = whole_and_resumed(strategy, fitness, jr.key(2), 3)
    blocks = eqxevo.evolve(
        jr.key(2), strategy, fitness, num_generations=3, batch_size=4
    )
    assert tree_equal(whole.state, blocks.state)
    assert tree_equal(whole.history, blocks.history)
    assert tree_equal(whole.state, rest.state)
