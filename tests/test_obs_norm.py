"""Observation normalisation: the moments against NumPy, the agent that carries
them, and runs that carry them through evolve, checkpoints and held-out
evaluation."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import (
    final_state,
    small_experiment as small,
    tree_equal,
    whole_and_resumed,
)
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import eqxevo
from eqxevo import LifetimeFitness, experiment, rollout
from eqxevo._src.nets.factories import mlp
from eqxevo._src.obs_norm import (
    CLIP,
    EPS,
    NormalizedPolicy,
    ObsMoments,
    RunningObs,
    merge_stacked,
)
from eqxevo.envs import Chemotaxis
from eqxevo.experiment import eval_run
from eqxevo.nets import AbstractPolicy

finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


def _welford(rows: np.ndarray, weights: np.ndarray | None = None) -> ObsMoments:
    moments = ObsMoments.zeros(rows.shape[1])
    weights = np.ones(len(rows)) if weights is None else weights
    for row, w in zip(rows, weights, strict=True):
        moments = moments.add(jnp.asarray(row, jnp.float32), jnp.float32(w))
    return moments


def _np_moments(rows: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    rows = rows.astype(np.float64)
    return len(rows), rows.mean(axis=0), ((rows - rows.mean(axis=0)) ** 2).sum(0)


@settings(max_examples=30, deadline=None)
@given(
    hnp.arrays(
        np.float32, st.tuples(st.integers(1, 12), st.integers(1, 4)), elements=finite
    )
)
def test_welford_moments_equal_numpy(rows):
    count, mean, m2 = _np_moments(rows)
    got = _welford(rows)
    scale = 1.0 + np.abs(rows).max()
    assert float(got.count) == count
    np.testing.assert_allclose(got.mean, mean, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(got.m2, m2, rtol=1e-4, atol=1e-4 * scale**2 * count)


@settings(max_examples=30, deadline=None)
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(2, 12), st.just(3)), elements=finite),
    st.integers(1, 11),
)
def test_merged_moments_equal_the_moments_of_the_whole(rows, cut):
    cut = min(cut, len(rows) - 1)
    count, mean, m2 = _np_moments(rows)
    a, b = _welford(rows[:cut]), _welford(rows[cut:])
    scale = 1.0 + np.abs(rows).max()
    for got in (
        a.merge(b),
        merge_stacked(jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b)),
    ):
        assert float(got.count) == count
        np.testing.assert_allclose(got.mean, mean, rtol=1e-5, atol=1e-5 * scale)
        np.testing.assert_allclose(got.m2, m2, rtol=1e-4, atol=1e-4 * scale**2 * count)


def test_zero_weight_steps_change_nothing_and_non_finite_groups_are_left_out():
    rows = np.array([[1.0, 2.0], [3.0, -1.0], [5.0, 0.5]], np.float32)
    weighted = _welford(rows, np.array([1.0, 0.0, 1.0]))
    plain = _welford(rows[[0, 2]])
    assert tree_equal(weighted, plain)
    broken = ObsMoments(
        jnp.float32(3.0), jnp.array([jnp.nan, 0.0]), jnp.array([1.0, 1.0])
    )
    stacked = jax.tree.map(lambda x, y: jnp.stack([x, y]), plain, broken)
    assert tree_equal(
        merge_stacked(stacked), merge_stacked(jax.tree.map(lambda x: x[None], plain))
    )


def test_normalize_is_identity_before_any_observation_and_clips():
    obs = jnp.array([0.3, -0.5, 50.0], jnp.float32)
    empty = ObsMoments.zeros(3)
    assert tree_equal(empty.normalize(obs), obs)
    seen = ObsMoments(jnp.float32(4), jnp.zeros(3), jnp.full(3, 4 * 0.01))
    out = np.asarray(seen.normalize(obs))
    np.testing.assert_allclose(
        out[:2], np.asarray(obs[:2]) / np.sqrt(0.01 + EPS), rtol=1e-6
    )
    assert out[2] == CLIP


def test_rollout_tracks_the_moments_of_what_the_policy_saw():
    env = Chemotaxis()
    params = env.default_params()
    policy = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))
    _, summary = rollout(jr.key(1), policy, env, params, 30, track_obs=True)
    trajectory = eqxevo.record(jr.key(1), policy, env, params, 30)
    count, mean, m2 = _np_moments(np.asarray(trajectory.observations))
    moments = summary["obs_moments"]
    assert float(moments.count) == count
    np.testing.assert_allclose(moments.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(moments.m2, m2, rtol=1e-4, atol=1e-6)


def test_normalized_policy_acts_on_normalized_observations():
    env = Chemotaxis()
    policy = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))
    moments = ObsMoments(jnp.float32(10), jnp.full(2, 0.5), jnp.full(2, 2.5))
    agent = NormalizedPolicy(policy, moments)
    obs = jnp.array([1.0, -1.0])
    state = agent.initial_state(jr.key(0))
    assert agent.obs_size == env.obs_size and agent.action_size == env.action_size
    assert tree_equal(agent(obs, state), policy(moments.normalize(obs), state))


def _setup(normalize: bool = True):
    env = Chemotaxis()
    genome = mlp(env.obs_size, env.action_size, width=8, depth=1, key=jr.key(0))
    fitness = LifetimeFitness(env, env.default_params(), 40, normalize_obs=normalize)
    return genome, fitness


def test_evolve_carries_the_moments_and_resumes_bit_identical():
    # SNES on an MLP genome, stopped after two generations of four; CMA_ES,
    # Sep_CMA_ES and PGPE resume with the moments in the test below (a genome
    # holding an eqx.nn.MLP and an int leaf: one program per algorithm).
    genome, fitness = _setup()
    strategy = eqxevo.Strategy("SNES", genome, population_size=8)
    whole, rest = whole_and_resumed(strategy, fitness, jr.key(3), 4, first=2)
    assert tree_equal(whole.state, rest.state)
    carry = whole.state.evaluation
    assert isinstance(carry, RunningObs)
    assert float(carry.moments.count) == 4 * 8 * 40  # generations x P x T
    # the histories hold scalars only: the moments stay in the state
    assert not any("obs_moments" in k for k in whole.history)


class PermutedPolicy(AbstractPolicy):
    """A stranger's genome: an eqx.nn.MLP with a float gain and an integer leaf
    (a permutation of the observation, gathered each step; shared by the
    population, never evolved)."""

    mlp: eqx.nn.MLP
    gain: jax.Array
    order: jax.Array
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(self, obs_size, action_size, key):
        self.mlp = eqx.nn.MLP(obs_size, action_size, 8, 1, jnp.tanh, key=key)
        self.gain = jnp.ones(action_size)
        self.order = jnp.arange(obs_size, dtype=jnp.int32)[::-1]
        self.obs_size, self.action_size = obs_size, action_size

    def initial_state(self, key):
        del key
        return jnp.zeros(())

    def __call__(self, obs, state):
        return jnp.tanh(self.gain * self.mlp(obs[self.order])), state


@pytest.mark.parametrize("algorithm", ["CMA_ES", "Sep_CMA_ES", "PGPE"])
def test_genomes_with_int_leaves_carry_the_moments_and_resume_bit_identical(
    algorithm,
):
    env = Chemotaxis()
    genome = PermutedPolicy(env.obs_size, env.action_size, jr.key(0))
    fitness = LifetimeFitness(env, env.default_params(), 40, normalize_obs=True)
    strategy = eqxevo.Strategy(algorithm, genome, population_size=8)
    whole, rest = whole_and_resumed(strategy, fitness, jr.key(3), 3)
    assert tree_equal(whole.state, rest.state)
    assert isinstance(whole.state.evaluation, RunningObs)
    assert float(whole.state.evaluation.moments.count) == 3 * 8 * 40
    assert not any("obs_moments" in k for k in whole.history)
    best = strategy.best(whole.state)
    assert best.order.dtype == jnp.int32 and tree_equal(best.order, genome.order)
    # the agent saved with its moments acts on normalised, then permuted, input
    agent = NormalizedPolicy(best, whole.state.evaluation.best)
    obs = jnp.array([3.0, -2.0])
    state = agent.initial_state(jr.key(0))
    normalized = whole.state.evaluation.best.normalize(obs)
    assert tree_equal(agent(obs, state), best(normalized, state))


def test_generation_acts_on_the_moments_before_it():
    # Generation 0 sees raw observations (no moments yet): its fitness equals
    # that of a run without normalisation; generation 1 then differs.
    genome, on = _setup(True)
    _, off = _setup(False)
    strategy = eqxevo.Strategy("SNES", genome, population_size=8)
    a = eqxevo.evolve(jr.key(5), strategy, on, num_generations=2)
    b = eqxevo.evolve(jr.key(5), strategy, off, num_generations=2)
    assert a.history["mean"][0] == b.history["mean"][0]
    assert a.history["mean"][1] != b.history["mean"][1]


def test_a_state_without_the_moments_is_refused_in_one_line():
    genome, on = _setup(True)
    _, off = _setup(False)
    strategy = eqxevo.Strategy("SNES", genome, population_size=8)
    plain = eqxevo.evolve(jr.key(5), strategy, off, num_generations=1)
    with pytest.raises(ValueError, match="observation normalisation on resumes"):
        eqxevo.evolve(jr.key(5), strategy, on, num_generations=1, state=plain.state)


def test_seeds_each_carry_their_own_moments():
    genome, fitness = _setup()
    strategy = eqxevo.Strategy("SNES", genome, population_size=8)
    both = eqxevo.evolve(jr.key(7), strategy, fitness, num_generations=2, num_seeds=2)
    counts = np.asarray(both.state.evaluation.moments.count)
    assert counts.shape == (2,) and (counts == 2 * 8 * 40).all()
    assert not np.array_equal(*np.asarray(both.state.evaluation.moments.mean))


def test_run_saves_the_agent_with_its_moments_and_resumes_bit_identical(tmp_path):
    # A run with normalisation on: checkpoints carry the moments (resume equals
    # the uninterrupted run), the saved best genome is the agent with the
    # moments it was scored with, and `eqxevo eval` reproduces the run's own
    # held-out figure.
    on = ("run.normalize_obs=on",)
    full, part = tmp_path / "full", tmp_path / "part"
    summary = experiment.run_experiment(small(*on), full, quiet=True)
    experiment.run_experiment(small(*on, "run.generations=4"), part, quiet=True)
    experiment.resume_run(part, ("run.generations=6",), quiet=True)
    assert (part / "metrics.jsonl").read_text() == (full / "metrics.jsonl").read_text()
    built = experiment.build(small(*on))
    like = built.initial_state()
    g_full, s_full = final_state(full, like)
    g_part, s_part = final_state(part, like)
    assert g_full == g_part == 6 and tree_equal(s_full, s_part)
    assert float(s_full.evaluation.moments.count) > 0

    _, agent = experiment.load_genome(full)
    assert isinstance(agent, NormalizedPolicy)
    assert tree_equal(agent.moments, s_full.evaluation.best)
    assert tree_equal(
        eqx.filter(agent.policy, eqx.is_array),
        eqx.filter(built.strategy.best(s_full), eqx.is_array),
    )
    evaluation, _, _ = eval_run(full, with_references=False)
    assert evaluation.result.mean == summary["heldout"]["best"]["mean"]
    assert 'normalize_obs = "on"' in (full / "config.toml").read_text()
    # without normalisation the saved genome is the bare genome
    assert not isinstance(experiment.build(small()).agent, NormalizedPolicy)


def test_auto_normalises_what_the_environment_asks_for():
    assert _fitness(experiment.build(small())).normalize_obs is False
    assert _fitness(experiment.build(small("run.normalize_obs=on"))).normalize_obs


def _fitness(built) -> LifetimeFitness:
    assert isinstance(built.fitness, LifetimeFitness)
    return built.fitness
