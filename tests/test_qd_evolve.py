"""MAP-Elites through the one loop: `evolve` equals the hand-written ask,
evaluate, tell loop bit for bit, over seeds, chunks, micro-batches and a resume,
and compiles once (eqxevo._src.qd.map_elites, eqxevo._src.program)."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Stranger, stranger_fitness, tree_equal

import eqxevo
from eqxevo import generation_keys
from eqxevo._src.program import run_chunk
from eqxevo._src.qd.archive import Archive
from eqxevo._src.qd.emitters import ESEmitter, IsoLineEmitter
from eqxevo._src.qd.map_elites import MapElites


def qd_fitness(genome, key):
    """`stranger_fitness` (multiply-adds, reductions, transcendentals, noise, an
    aux pytree) with a descriptor from the genome's float vector and its MLP."""
    value, aux = stranger_fitness(genome, key)
    first = genome.mlp.layers[0].weight
    descriptor = jnp.stack([jnp.tanh(jnp.mean(genome.x)), jnp.tanh(jnp.sum(first))])
    return value, {"descriptor": descriptor, **aux}


@functools.cache
def map_elites():
    emitters = [
        IsoLineEmitter(8, iso_sigma=0.05, line_sigma=0.2),
        ESEmitter("CMA_ES", 8, params={"std_init": 0.1}),
        # MAP-Elites-ES: novelty and fitness in turn, only the mean inserted
        ESEmitter(
            "Sep_CMA_ES", 8, ranking="alternate", insert="mean", restart=2, novelty_k=3
        ),
    ]
    return MapElites(
        Stranger(), Archive.grid((6, 6), -1.0, 1.0), emitters, init_scale=0.3
    )


def hand_written_loop(strategy, fitness_fn, key, num_generations):
    """The documented key schedule, one jitted public call at a time."""
    init_key, run_key = jr.split(key)
    state = strategy.init(init_key)
    history = []
    for g in range(num_generations):
        ask_key, eval_key, tell_key = generation_keys(run_key, g)
        population, state = strategy.ask(ask_key, state)
        fitness, aux = eqxevo.evaluate(
            eval_key, fitness_fn, population, filter_spec=strategy.filter_spec
        )
        state, metrics = strategy.tell(
            tell_key, population, fitness, state, aux["descriptor"]
        )
        history.append(metrics)
    return state, {k: np.asarray([m[k] for m in history]) for k in history[0]}


def test_evolve_equals_the_hand_written_loop_over_seeds_and_chunks(key):
    strategy = map_elites()
    result = eqxevo.evolve(key, strategy, qd_fitness, num_generations=5, chunk_size=2)
    state, history = hand_written_loop(strategy, qd_fitness, key, 5)
    assert tree_equal(result.state, state)
    for name in ("qd_score", "coverage", "max_fitness", "num_added", "best"):
        np.testing.assert_array_equal(result.history[name], history[name])
    assert tree_equal(result.best_genome, strategy.best(state))
    assert float(result.history["coverage"][-1]) > 0
    seeds = eqxevo.evolve(
        key, strategy, qd_fitness, num_generations=5, num_seeds=2, chunk_size=3
    )
    for k, seed_key in enumerate(jr.split(key, 2)):
        state, history = hand_written_loop(strategy, qd_fitness, seed_key, 5)
        assert tree_equal(jax.tree.map(lambda x, k=k: x[k], seeds.state), state)
        np.testing.assert_array_equal(seeds.history["qd_score"][k], history["qd_score"])


def test_the_archive_does_not_depend_on_the_evaluation_batch_or_a_resume(key):
    strategy = map_elites()
    whole = eqxevo.evolve(key, strategy, qd_fitness, num_generations=6, chunk_size=3)
    blocks = eqxevo.evolve(
        key, strategy, qd_fitness, num_generations=6, chunk_size=3, batch_size=4
    )
    first = eqxevo.evolve(key, strategy, qd_fitness, num_generations=3, chunk_size=3)
    rest = eqxevo.evolve(
        key,
        strategy,
        qd_fitness,
        num_generations=3,
        chunk_size=3,
        state=first.state,
    )
    assert tree_equal(blocks.state, whole.state)
    assert tree_equal(rest.state, whole.state)
    np.testing.assert_array_equal(
        rest.history["qd_score"], whole.history["qd_score"][3:]
    )


def test_map_elites_compiles_once_across_generations_and_calls(key):
    strategy = MapElites(Stranger(), Archive.grid((4, 4), -1.0, 1.0), IsoLineEmitter(6))
    before = eqx.debug.get_num_traces(run_chunk)
    eqxevo.evolve(key, strategy, qd_fitness, num_generations=7, chunk_size=3)
    eqxevo.evolve(
        jr.fold_in(key, 1), strategy, qd_fitness, num_generations=4, chunk_size=3
    )
    assert eqx.debug.get_num_traces(run_chunk) == before + 1


def test_the_elites_come_back_as_genomes(key):
    strategy = map_elites()
    result = eqxevo.evolve(key, strategy, qd_fitness, num_generations=3)
    genomes, fitness, filled = strategy.elites(result.state)
    assert isinstance(genomes, Stranger)
    assert genomes.x.shape == (36, 5) and fitness.shape == (36,)
    # the int leaf is static, shared by every cell
    np.testing.assert_array_equal(genomes.index, np.arange(5))
    cell = int(jnp.argmax(fitness))
    assert bool(filled[cell])
    assert float(fitness[cell]) == float(result.best_fitness)


def test_a_fitness_without_a_descriptor_is_one_line(key):
    strategy = MapElites(Stranger(), Archive.grid((4, 4), -1.0, 1.0), IsoLineEmitter(6))
    with pytest.raises(ValueError) as err:
        eqxevo.evolve(key, strategy, stranger_fitness, num_generations=1)
    assert str(err.value).startswith(
        "MAP-Elites needs a descriptor per genome: the fitness function returns "
        "(fitness, descriptor) or (fitness, {'descriptor': descriptor, ...}), "
        "or MapElites(descriptor=...) names aux entries; got aux of type dict with "
        "keys"
    )


def test_map_elites_refuses_minimising():
    with pytest.raises(ValueError, match="maximize must be True"):
        MapElites(
            Stranger(),
            Archive.grid((4, 4), -1.0, 1.0),
            IsoLineEmitter(6),
            maximize=False,
        )


def test_an_archive_too_large_for_memory_is_refused_with_its_estimate(monkeypatch):
    import eqxevo._src.qd.map_elites as map_elites_module

    monkeypatch.setattr(
        map_elites_module, "available_memory", lambda: (10**6, "this host")
    )
    genome = jnp.zeros(100)
    archive = Archive.grid((50, 50), 0.0, 1.0)  # 2500 x (100 + 2 + 1) x 4 bytes
    with pytest.raises(ValueError) as err:
        MapElites(genome, archive, IsoLineEmitter(8))
    assert str(err.value) == (
        "the archive needs about 1.03 MB (2500 cells x (100 genome values + 2 "
        "descriptor values + 1 fitness) x 4 bytes) but this host has 1 MB "
        "available: use fewer cells (a coarser grid, fewer CVT centroids) or a "
        "smaller genome"
    )
    MapElites(genome, Archive.grid((40, 40), 0.0, 1.0), IsoLineEmitter(8))


def test_a_lifetimes_summary_entries_are_the_descriptor(key):
    # L2 foraging: the lifetime's mean intake and homeostasis, from the
    # environment's info (LifetimeFitness averages it over the lifetime)
    from eqxevo._app.config import from_dict
    from eqxevo.experiment import build

    built = build(
        from_dict(
            {
                "env": {"name": "foraging"},
                "net": {"name": "mlp", "options": {"width": 8, "depth": 1}},
                "strategy": {"population_size": 8},
                "run": {"lifetime": 20},
            }
        )
    )
    names = ("mean_intake", "mean_homeostasis")
    strategy = MapElites(
        built.genome,
        Archive.grid((4, 4), [0.0, -1.0], [0.5, 1.0]),
        IsoLineEmitter(8, iso_sigma=0.1),
        descriptor=names,
    )
    result = eqxevo.evolve(key, strategy, built.fitness, num_generations=2)
    contents = result.state.inner.archive
    assert int(jnp.sum(contents.filled)) >= 1
    population, _ = strategy.ask(jr.fold_in(key, 1), strategy.init(key))
    _, aux = eqxevo.evaluate(key, built.fitness, population)
    np.testing.assert_array_equal(
        strategy.descriptors(aux), np.stack([aux[n] for n in names], -1)
    )
    other = MapElites(
        built.genome,
        Archive.grid((4, 4), 0.0, 1.0),
        IsoLineEmitter(8),
        descriptor=("mean_intake", "mean_speed"),
    )
    with pytest.raises(ValueError, match=r"descriptor names \['mean_speed'\]"):
        eqxevo.evolve(key, other, built.fitness, num_generations=1)


def test_a_descriptor_must_name_one_entry_per_dimension():
    with pytest.raises(ValueError, match="descriptor must name 2 aux entries"):
        MapElites(
            Stranger(),
            Archive.grid((4, 4), -1.0, 1.0),
            IsoLineEmitter(6),
            descriptor=("only_one",),
        )
