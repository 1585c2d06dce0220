"""Emitters and the MAP-Elites ask/tell against NumPy references and the
planar arm (eqxevo._src.qd.emitters, eqxevo._src.qd.map_elites)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

from eqxevo._src.qd.archive import Archive, Insertion
from eqxevo._src.qd.emitters import (
    ESEmitter,
    IsoLineEmitter,
    novelty,
    random_elites,
)
from eqxevo._src.qd.map_elites import MapElites
from eqxevo._src.qd.tasks import arm


@eqx.filter_jit
def run_arm(me, key, generations):
    def step(state, k):
        ask_key, tell_key = jr.split(k)
        population, state = me.ask(ask_key, state)
        fitness, descriptors = jax.vmap(arm)(population)
        return me.tell(tell_key, population, fitness, state, descriptors)

    state = me.init(key)
    return jax.lax.scan(step, state, jr.split(jr.fold_in(key, 1), generations))


def _filled_archive(seed, cells=(6, 6), num_params=3, count=20):
    archive = Archive.grid(cells, 0.0, 1.0)
    k1, k2, k3 = jr.split(jr.key(seed), 3)
    state, _ = archive.insert(
        archive.init(num_params),
        jr.normal(k1, (count, num_params)),
        jr.normal(k2, (count,)),
        jr.uniform(k3, (count, 2)),
    )
    return archive, state


# -- selection, variation, novelty --------------------------------------------------


def test_random_elites_are_drawn_from_filled_cells_only(seed):
    _, state = _filled_archive(seed)
    drawn = np.asarray(random_elites(jr.key(seed), state, 500))
    elites = np.asarray(state.genomes)[np.asarray(state.filled)]
    assert all((row == elites).all(-1).any() for row in drawn)
    # every elite is drawn (uniform over the filled cells, 500 draws)
    assert len({tuple(r) for r in drawn}) == len(elites)


def test_iso_line_variation_equals_the_numpy_formula(seed):
    _, state = _filled_archive(seed)
    emitter = IsoLineEmitter(64, iso_sigma=0.02, line_sigma=0.3)
    key = jr.key(seed + 1)
    children, _ = emitter.ask(key, jnp.zeros(3), state)
    k_x, k_y, k_iso, k_line = jr.split(key, 4)
    x = np.asarray(random_elites(k_x, state, 64))
    y = np.asarray(random_elites(k_y, state, 64))
    iso = np.asarray(jr.normal(k_iso, (64, 3)))
    line = np.asarray(jr.normal(k_line, (64, 1)))
    np.testing.assert_allclose(
        np.asarray(children), x + 0.02 * iso + 0.3 * line * (y - x), rtol=1e-6
    )


def test_iso_line_on_an_empty_archive_samples_around_the_genome():
    archive = Archive.grid((4,), 0.0, 1.0)
    emitter = IsoLineEmitter(1000, iso_sigma=0.1)
    initial = jnp.asarray([3.0, -1.0])
    children, _ = emitter.ask(jr.key(0), initial, archive.init(2))
    np.testing.assert_allclose(np.mean(children, 0), initial, atol=0.02)
    np.testing.assert_allclose(np.std(children, 0), [0.1, 0.1], rtol=0.1)


@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 3, 12]), st.integers(0, 20))
def test_novelty_equals_the_numpy_reference(seed, k, count):
    # one batch shape (30 candidates), `count` of them with a finite fitness:
    # 0 to 20 elites, and one compiled program per k
    archive = Archive.grid((6, 6), 0.0, 1.0)
    k1, k2, k3 = jr.split(jr.key(seed), 3)
    fitness = jnp.where(jnp.arange(30) < count, jr.normal(k2, (30,)), jnp.nan)
    state, _ = archive.insert(
        archive.init(3), jr.normal(k1, (30, 3)), fitness, jr.uniform(k3, (30, 2))
    )
    points = np.asarray(jr.uniform(jr.key(seed + 1), (9, 2)))
    got = np.asarray(novelty(jnp.asarray(points), state, k))
    elites = np.asarray(state.descriptors)[np.asarray(state.filled)]
    if not len(elites):
        assert np.isinf(got).all()
        return
    distance = np.sqrt(((points[:, None] - elites[None]) ** 2).sum(-1))
    want = np.sort(distance, -1)[:, :k].mean(-1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_novelty_against_an_empty_archive_is_infinite():
    archive = Archive.grid((4,), 0.0, 1.0)
    assert np.isinf(np.asarray(novelty(jnp.zeros((2, 1)), archive.init(1), 3))).all()


# -- the ES emitter -----------------------------------------------------------------


def test_improvement_ranking_puts_new_cells_then_improvements_then_the_rest():
    emitter = ESEmitter("CMA_ES", 6).bind(jnp.zeros(2))
    archive = Archive.grid((6,), 0.0, 1.0)
    before = archive.init(2)
    before = eqx.tree_at(
        lambda s: s.fitness, before, jnp.asarray([0.0, 0.0, 5.0, 5.0, 5.0, 5.0])
    )
    # candidate: new cell +1 | new cell +3 | improved +0.5 | improved +2 |
    # short by 1 | invalid
    info = Insertion(
        cell=jnp.asarray([0, 1, 2, 3, 4, 5]),
        added=jnp.asarray([True, True, True, True, False, False]),
        new_cell=jnp.asarray([True, True, False, False, False, False]),
        improvement=jnp.asarray([1.0, 3.0, 0.5, 2.0, -jnp.inf, -jnp.inf]),
        outside=jnp.zeros(6, bool),
        invalid=jnp.asarray([False, False, False, False, False, True]),
    )
    fitness = jnp.asarray([1.0, 3.0, 5.5, 7.0, 4.0, jnp.nan])
    score = emitter._score(fitness, jnp.zeros((6, 1)), info, before, jnp.asarray(False))
    np.testing.assert_array_equal(np.asarray(score), [4, 5, 2, 3, 1, 0])


def _ranks(values):
    return np.argsort(np.argsort(values, kind="stable"), kind="stable")


@pytest.mark.parametrize("seed", [0, 1])
def test_alternate_ranks_by_fitness_then_by_novelty_switching_at_each_restart(seed):
    # MAP-Elites-ES (Colas et al. 2020): exploit (fitness) for `restart`
    # generations from one of the 2 fittest elites, then explore (novelty) from
    # one of the 5 most novel, and so on. NumPy reference for the ranks and the
    # elites each restart may start from.
    archive, state = _filled_archive(seed, cells=(8, 8), count=60)
    emitter = ESEmitter(
        "Sep_CMA_ES", 8, ranking="alternate", restart=1, params={"std_init": 0.1}
    ).bind(jnp.zeros(3))
    es = emitter.init(jr.key(seed), jnp.zeros(3))
    fit = np.asarray(state.fitness, np.float64)
    filled = np.asarray(state.filled)
    desc = np.asarray(state.descriptors, np.float64)
    dist = np.linalg.norm(desc[:, None] - desc[None], axis=-1)
    dist[:, ~filled] = np.inf
    novel = np.sort(dist, axis=1)[:, :15].mean(1)
    fittest = set(np.argsort(np.where(filled, fit, -np.inf))[-2:])
    novelest = set(np.argsort(np.where(filled, novel, -np.inf))[-5:])
    explore = False
    for generation in range(4):
        key = jr.fold_in(jr.key(seed), generation)
        candidates, es = emitter.ask(key, es, state)
        fitness = jr.normal(jr.fold_in(key, 1), (8,))
        descriptors = jr.uniform(jr.fold_in(key, 2), (8, 2))
        after, info = archive.insert(state, candidates, -100 + fitness, descriptors)
        score = emitter._score(fitness, descriptors, info, state, es.explore)
        d = np.linalg.norm(
            np.asarray(descriptors, np.float64)[:, None] - desc[filled][None], axis=-1
        )
        want = np.sort(d, axis=1)[:, :15].mean(1) if explore else np.asarray(fitness)
        np.testing.assert_array_equal(np.asarray(score), _ranks(want))
        es = emitter.tell(
            jr.fold_in(key, 3), candidates, fitness, descriptors, info, es, state, after
        )
        explore = not explore
        assert bool(es.explore) == explore and int(es.age) == 0
        start = np.asarray(emitter._strategy.mean(es.strategy))
        genomes = np.asarray(state.genomes)
        cell = [i for i in np.flatnonzero(filled) if (genomes[i] == start).all()]
        assert cell and set(cell) <= (novelest if explore else fittest), generation


def test_inserting_the_mean_evaluates_it_first_and_inserts_nothing_else():
    # MAP-Elites-ES's offspring is the strategy's mean: candidate 0 of each
    # batch is the mean, the only candidate the archive may take; the other
    # batch_size - 1 are the strategy's population.
    archive, state = _filled_archive(0)
    emitter = ESEmitter(
        "CMA_ES", 6, insert="mean", ranking="fitness", params={"std_init": 0.1}
    ).bind(jnp.zeros(3))
    assert emitter.strategy.population_size == 5
    np.testing.assert_array_equal(emitter.insertable(), [1, 0, 0, 0, 0, 0])
    es = emitter.init(jr.key(1), jnp.zeros(3))
    candidates, es = emitter.ask(jr.key(2), es, state)
    np.testing.assert_array_equal(
        np.asarray(candidates[0]), np.asarray(emitter._strategy.mean(es.strategy))
    )
    fitness = jnp.full((6,), 100.0)  # every candidate better than every elite
    descriptors = jnp.linspace(0.05, 0.95, 12).reshape(6, 2)
    _, info = archive.insert(
        state, candidates, fitness, descriptors, jnp.asarray(emitter.insertable())
    )
    np.testing.assert_array_equal(np.asarray(info.added), [1, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match='insert="mean" needs batch_size >= 3'):
        ESEmitter("CMA_ES", 2, insert="mean")


def test_map_elites_es_adds_at_most_its_mean_each_generation():
    emitters = [
        ESEmitter(
            "Sep_CMA_ES",
            16,
            ranking="alternate",
            insert="mean",
            restart=5,
            params={"std_init": 0.05},
        )
        for _ in range(2)
    ]
    me = MapElites(ARM_INITIAL, _arm_grid(), emitters, init_scale=0.3)
    _, metrics = run_arm(me, jr.key(0), 12)
    added = np.asarray(metrics["num_added"])
    assert added[0] > 2 and (added[1:] <= 2).all() and added[1:].sum() > 0


@pytest.mark.parametrize("algorithm", ["CMA_ES", "Sep_CMA_ES", "SNES", "Open_ES"])
def test_an_es_emitter_restarts_from_an_elite_when_nothing_was_added(algorithm):
    archive, state = _filled_archive(0)
    params = None if algorithm == "Open_ES" else {"std_init": 0.1}
    emitter = ESEmitter(algorithm, 8, params=params).bind(jnp.zeros(3))
    es = emitter.init(jr.key(1), jnp.zeros(3))
    candidates, es = emitter.ask(jr.key(2), es, state)
    fitness = jnp.full((8,), -100.0)  # worse than every elite: nothing added
    descriptors = jnp.full((8, 2), 0.5)
    after, info = archive.insert(state, candidates, fitness, descriptors)
    assert not bool(jnp.any(info.added))
    told = emitter.tell(
        jr.key(3), candidates, fitness, descriptors, info, es, state, after
    )
    mean = np.asarray(emitter._strategy.mean(told.strategy))
    elites = np.asarray(after.genomes)[np.asarray(after.filled)]
    assert (mean == elites).all(-1).any()
    assert int(told.age) == 0


def test_an_es_emitter_needs_a_search_mean():
    with pytest.raises(ValueError, match="ESEmitter needs a distribution-based"):
        ESEmitter("SimpleGA", 8).bind(jnp.zeros(3))


# -- MAP-Elites on the planar arm ---------------------------------------------------

ARM_INITIAL = jnp.full((20,), 0.5)


def _arm_grid():
    return Archive.grid((32, 32), 0.0, 1.0, qd_offset=1.0)


def _map_elites():
    return MapElites(
        ARM_INITIAL, _arm_grid(), IsoLineEmitter(256, 0.005, 0.05), init_scale=0.3
    )


def _cma_me():
    emitters = [ESEmitter("CMA_ES", 64, params={"std_init": 0.05}) for _ in range(4)]
    return MapElites(ARM_INITIAL, _arm_grid(), emitters, init_scale=0.3)


def test_the_qd_score_and_coverage_never_fall_and_the_same_key_gives_the_same_bits():
    me = _map_elites()
    state, metrics = run_arm(me, jr.key(0), 40)
    again, _ = run_arm(me, jr.key(0), 40)
    for leaf, other in zip(jax.tree.leaves(state), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(other))
    for name in ("qd_score", "coverage", "max_fitness"):
        assert bool(jnp.all(jnp.diff(metrics[name]) >= 0)), name
    assert float(metrics["coverage"][-1]) > 0.3


@pytest.mark.slow
def test_cma_me_beats_map_elites_on_the_arm_as_fontaine_et_al_report():
    # QDax's budget: 20 degrees of freedom, batch 256, 200 iterations, a 32 x 32
    # grid, QD offset 1 (QDax measured coverage 72.8% and QD score 716 with its
    # MAP-Elites, one seed); two seeds each
    def final(me, seed):
        return run_arm(me, jr.key(seed), 200)[1]["qd_score"][-1]

    map_elites = [float(final(_map_elites(), s)) for s in range(2)]
    cma_me = [float(final(_cma_me(), s)) for s in range(2)]
    assert min(map_elites) > 690, map_elites
    assert min(cma_me) > max(map_elites), (cma_me, map_elites)


def test_a_first_generation_only_fills_the_archive_and_leaves_the_emitters():
    me = _cma_me()
    state = me.init(jr.key(0))
    population, asked = me.ask(jr.key(1), state)
    fitness, descriptors = jax.vmap(arm)(population)
    told, metrics = me.tell(jr.key(2), population, fitness, asked, descriptors)
    for leaf, other in zip(
        jax.tree.leaves(told.inner.emitters),
        jax.tree.leaves(state.inner.emitters),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(other))
    assert int(metrics["num_added"]) == int(jnp.sum(told.inner.archive.filled)) > 0


def test_descriptors_of_the_wrong_shape_are_one_line():
    me = _map_elites()
    state = me.init(jr.key(0))
    population, state = me.ask(jr.key(1), state)
    with pytest.raises(ValueError, match=r"descriptors have shape \[256, 3\]"):
        me.tell(jr.key(2), population, jnp.zeros(256), state, jnp.zeros((256, 3)))
