import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Rosenbrock, transcendental

import eqxevo
from eqxevo import generation_keys
from eqxevo._src.evaluate import EvalSettings
from eqxevo._src.heldout import (
    heldout_evaluate,
    heldout_fitness,
    heldout_key,
    heldout_keys,
    summarize,
)
from eqxevo._src.keys import run_keys, seed_keys


def test_summary_matches_a_students_t_reference_on_fixed_data():
    values = np.asarray([1.0, 2.0, 4.0, 3.5, 2.5, 3.0, 1.5, 2.0, 5.0, 0.5])
    got = summarize(values)
    mean = values.mean()
    half = 2.2621571627409915 * values.std(ddof=1) / np.sqrt(values.size)  # t(0.975, 9)
    assert got.mean == pytest.approx(mean, rel=1e-9)
    assert got.ci_low == pytest.approx(mean - half, rel=1e-9)
    assert got.ci_high == pytest.approx(mean + half, rel=1e-9)
    assert got.num_episodes == 10 and got.num_nonfinite == 0
    # non-finite episodes are counted and left out; one episode has no spread
    with_nan = summarize(np.append(values, np.nan))
    assert with_nan.mean == got.mean and with_nan.num_nonfinite == 1
    single = summarize([3.0])
    assert (single.mean, single.ci_low, single.ci_high) == (3.0, 3.0, 3.0)
    assert np.isnan(summarize([np.nan]).mean)
    assert "95% CI, 10 episodes" in str(got)


def test_heldout_fitness_is_one_lifetime_per_episode_key(key):
    genome = Rosenbrock(5)
    values = heldout_fitness(key, transcendental, genome, 20)
    for e in (0, 7, 19):
        want, _ = transcendental(genome, jr.fold_in(key, e))  # eager, unbatched
        np.testing.assert_allclose(values[e], float(want), rtol=1e-6)
    again = heldout_fitness(
        key, transcendental, genome, 20, settings=EvalSettings(batch_size=16)
    )
    np.testing.assert_array_equal(again, values)  # same bits in blocks
    result = heldout_evaluate(key, transcendental, genome, 20)
    assert result.mean == pytest.approx(float(np.mean(values.astype(np.float64))))
    with pytest.raises(ValueError, match="num_episodes"):
        heldout_fitness(key, transcendental, genome, 0)


def _key_bytes(keys):
    data = np.asarray(jr.key_data(keys)).reshape(-1, 2)
    return {row.tobytes() for row in data}


def test_heldout_stream_is_disjoint_from_every_key_selection_uses():
    # Everything evolve derives from a seed: the genome, init and run keys,
    # every generation's ask/evaluate/tell keys, and every genome's episode key
    # (shared: id 0; per-genome: ids 0..P-1), for 50 generations of P = 64;
    # against 256 held-out episodes of the same seed.
    seed, generations, population = 3, 50, 64
    genome_key, root = seed_keys(seed)
    init_key, run_key = run_keys(root)
    used = _key_bytes(jnp.stack([jr.key(seed), genome_key, root, init_key, run_key]))
    ids = jnp.arange(population)
    for g in range(generations):
        ask, evaluate_key, tell = generation_keys(run_key, g)
        used |= _key_bytes(jnp.stack([ask, evaluate_key, tell]))
        used |= _key_bytes(jax.vmap(jr.fold_in, (None, 0))(evaluate_key, ids))
    held = heldout_key(root)
    episodes = jax.vmap(jr.fold_in, (None, 0))(held, jnp.arange(256))
    assert not used & _key_bytes(episodes)
    assert not used & _key_bytes(held[None])


def test_heldout_evaluation_of_an_evolved_mean(key):
    strategy = eqxevo.Strategy("SNES", Rosenbrock(5), 16, maximize=True)
    result = eqxevo.evolve(key, strategy, transcendental, num_generations=3)
    mean = strategy.mean(result.state)
    held = heldout_evaluate(heldout_key(key), transcendental, mean, 32)
    assert held.ci_low <= held.mean <= held.ci_high
    assert held.num_episodes == 32


def test_a_runs_heldout_keys_are_disjoint_from_its_selection_keys_per_seed():
    # `eqxevo run` with num_seeds=2: each seed's held-out lifetimes against every
    # key the run derives (the genome's key, each seed's init/run keys, the
    # generation keys and every genome's episode key).
    from eqxevo import experiment
    from eqxevo._app import config

    exp = config.load(None, ["run.num_seeds=2", "strategy.population_size=16"])
    built = experiment.build(exp)
    genome_key, evolve_key = jr.split(jr.key(exp.run.seed))
    used = _key_bytes(jnp.stack([genome_key, evolve_key]))
    ids = jnp.arange(16)
    init_keys, run_keys_ = run_keys(built.key, 2)
    used |= _key_bytes(init_keys) | _key_bytes(run_keys_)
    for seed in (0, 1):
        for g in range(20):
            ask, evaluate_key, tell = generation_keys(run_keys_[seed], g)
            used |= _key_bytes(jnp.stack([ask, evaluate_key, tell]))
            used |= _key_bytes(jax.vmap(jr.fold_in, (None, 0))(evaluate_key, ids))
    held = heldout_keys(built.key, 2)
    episodes = [jax.vmap(jr.fold_in, (None, 0))(k, jnp.arange(64)) for k in held]
    assert not used & (_key_bytes(episodes[0]) | _key_bytes(episodes[1]))
    assert not _key_bytes(episodes[0]) & _key_bytes(episodes[1])  # seeds differ
    # `--seed S` with S the run's own seed is the run's stream
    again = heldout_keys(seed_keys(exp.run.seed)[1], 2)
    assert _key_bytes(jnp.stack(again)) == _key_bytes(jnp.stack(held))
