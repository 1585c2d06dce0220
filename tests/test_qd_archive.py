"""MAP-Elites archives against a plain NumPy reference: cells, insertion (the
better elite stays, first of equals, nothing non-finite), bounds, CVT centroids
and the QD metrics (eqxevo._src.qd.archive)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from hypothesis import given, strategies as st

from eqxevo._src.qd.archive import Archive

# -- the NumPy reference ------------------------------------------------------------


def np_cells(archive, descriptors):
    lo, hi = np.asarray(archive.lower), np.asarray(archive.upper)
    d = np.clip(np.asarray(descriptors, np.float32), lo, hi)
    if archive.shape is None:
        c = np.asarray(archive.centroids)
        return np.argmin(((d[:, None, :] - c[None]) ** 2).sum(-1), axis=-1)
    n = np.asarray(archive.shape)
    index = np.clip(np.floor((d - lo) / (hi - lo) * n.astype(np.float32)), 0, n - 1)
    return np.ravel_multi_index(tuple(index.astype(np.int64).T), archive.shape)


def np_insert(archive, state, genomes, fitness, descriptors):
    """One candidate after another: strictly better replaces (so the first of
    equals stays), non-finite never enters, outside the box clipped or refused."""
    genomes_a = np.array(state.genomes)
    fitness_a = np.array(state.fitness)
    desc_a = np.array(state.descriptors)
    lo, hi = np.asarray(archive.lower), np.asarray(archive.upper)
    for g, f, d in zip(genomes, fitness, descriptors, strict=True):
        d = np.asarray(d, np.float32)
        if not (np.isfinite(f) and np.isfinite(d).all()):
            continue
        if ((d < lo) | (d > hi)).any() and archive.out_of_bounds == "refuse":
            continue
        d = np.clip(d, lo, hi)
        cell = np_cells(archive, d[None])[0]
        if f > fitness_a[cell]:
            genomes_a[cell], fitness_a[cell], desc_a[cell] = g, f, d
    return genomes_a, fitness_a, desc_a


def _assert_state(state, expected):
    for got, want in zip(
        (state.genomes, state.fitness, state.descriptors), expected, strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), want)


# -- candidates a stranger would bring ----------------------------------------------

ARCHIVES = {
    "grid 2d": lambda: Archive.grid((4, 5), 0.0, 1.0),
    "grid 3d refuse": lambda: Archive.grid(
        (2, 3, 2), [-1.0, 0.0, 0.0], [1.0, 3.0, 0.5], out_of_bounds="refuse"
    ),
    "cvt": lambda: Archive.cvt(
        12, [0.0, -2.0], [1.0, 2.0], key=jr.key(3), num_samples=600
    ),
}


@st.composite
def _batches(draw, dims):
    size = draw(st.integers(1, 40))
    # few distinct fitness values: ties within a cell are common
    values = st.sampled_from([0.0, 1.0, -2.5, 3.0, np.inf, -np.inf, np.nan])
    fitness = np.asarray(draw(st.lists(values, min_size=size, max_size=size)))
    coords = st.sampled_from([-3.0, -1.0, 0.0, 0.2, 0.5, 0.99, 1.0, 2.0, np.nan])
    flat = draw(st.lists(coords, min_size=size * dims, max_size=size * dims))
    descriptors = np.asarray(flat, np.float32).reshape(size, dims)
    descriptors += np.float32(0.001) * np.arange(size, dtype=np.float32)[:, None]
    return fitness.astype(np.float32), descriptors


@pytest.mark.parametrize("name", sorted(ARCHIVES))
@given(data=st.data())
def test_an_archive_filled_from_a_known_set_equals_the_numpy_reference(name, data):
    archive = ARCHIVES[name]()
    state = archive.init(3)
    expected = (
        np.asarray(state.genomes),
        np.asarray(state.fitness),
        np.asarray(state.descriptors),
    )
    insert = eqx.filter_jit(archive.insert)
    for _ in range(2):
        fitness, descriptors = data.draw(_batches(archive.descriptor_size))
        genomes = np.arange(fitness.size * 3, dtype=np.float32).reshape(-1, 3)
        state, _ = insert(state, genomes, fitness, descriptors)
        expected = np_insert(archive, _Wrap(*expected), genomes, fitness, descriptors)
        _assert_state(state, expected)


class _Wrap:
    def __init__(self, genomes, fitness, descriptors):
        self.genomes, self.fitness, self.descriptors = genomes, fitness, descriptors


@pytest.mark.parametrize("name", sorted(ARCHIVES))
def test_cells_equal_the_numpy_reference(name, seed):
    archive = ARCHIVES[name]()
    d = archive.descriptor_size
    rng = np.random.default_rng(seed)
    lo, hi = np.asarray(archive.lower), np.asarray(archive.upper)
    points = (lo - 0.2 + rng.random((500, d)) * (hi - lo + 0.4)).astype(np.float32)
    np.testing.assert_array_equal(
        np.asarray(eqx.filter_jit(archive.cells)(points)), np_cells(archive, points)
    )


def test_a_grid_cell_is_the_nearest_centre_inside_the_box(seed):
    grid = Archive.grid((7, 3), [0.0, -1.0], [2.0, 1.0])
    nearest = Archive(grid.centroids, grid.lower, grid.upper)
    points = jr.uniform(jr.key(seed), (1000, 2), minval=-1.0, maxval=2.0)
    np.testing.assert_array_equal(grid.cells(points), nearest.cells(points))


def test_insertion_keeps_the_better_elite():
    archive = Archive.grid((2,), 0.0, 1.0)
    state = archive.init(1)
    insert = eqx.filter_jit(archive.insert)
    d = jnp.asarray([[0.25]])
    state, info = insert(state, jnp.asarray([[1.0]]), jnp.asarray([5.0]), d)
    assert bool(info.added[0]) and bool(info.new_cell[0])
    assert float(info.improvement[0]) == 5.0
    worse = insert(state, jnp.asarray([[2.0]]), jnp.asarray([4.0]), d)
    equal = insert(state, jnp.asarray([[3.0]]), jnp.asarray([5.0]), d)
    for kept, info in (worse, equal):
        assert float(kept.genomes[0, 0]) == 1.0 and float(kept.fitness[0]) == 5.0
        assert not bool(info.added[0]) and float(info.improvement[0]) == -np.inf
    state, info = insert(state, jnp.asarray([[4.0]]), jnp.asarray([7.5]), d)
    assert float(state.genomes[0, 0]) == 4.0 and float(state.fitness[0]) == 7.5
    assert bool(info.added[0]) and not bool(info.new_cell[0])
    assert float(info.improvement[0]) == 2.5
    assert not bool(state.filled[1])


def test_in_one_batch_the_best_and_then_the_first_of_equals_wins():
    archive = Archive.grid((1,), 0.0, 1.0)
    state, info = archive.insert(
        archive.init(1),
        jnp.asarray([[0.0], [1.0], [2.0], [3.0]]),
        jnp.asarray([1.0, 9.0, 9.0, jnp.nan]),
        jnp.full((4, 1), 0.5),
    )
    assert float(state.genomes[0, 0]) == 1.0
    np.testing.assert_array_equal(info.added, [False, True, False, False])
    np.testing.assert_array_equal(info.invalid, [False, False, False, True])


def test_the_archive_does_not_depend_on_how_a_stream_is_split_into_batches(seed):
    archive = Archive.cvt(30, [0.0, 0.0], [1.0, 1.0], key=jr.key(0), num_samples=300)
    k1, k2 = jr.split(jr.key(seed))
    genomes = jr.normal(k1, (96, 4))
    # coarse fitness: many ties within a cell
    fitness = jnp.round(jnp.sum(genomes, -1))
    descriptors = jr.uniform(k2, (96, 2), minval=-0.1, maxval=1.1)
    insert = eqx.filter_jit(archive.insert)
    states = []
    for batch in (96, 32, 12, 1):
        state = archive.init(4)
        for i in range(0, 96, batch):
            s = slice(i, i + batch)
            state, _ = insert(state, genomes[s], fitness[s], descriptors[s])
        states.append(state)
    for state in states[1:]:
        _assert_state(
            state,
            (
                np.asarray(states[0].genomes),
                np.asarray(states[0].fitness),
                np.asarray(states[0].descriptors),
            ),
        )


def test_a_descriptor_outside_the_box_is_clipped_or_refused_and_counted():
    genomes = jnp.asarray([[1.0], [2.0]])
    fitness = jnp.asarray([1.0, 1.0])
    descriptors = jnp.asarray([[1.5, 0.5], [0.2, 0.2]])
    for mode, stored in (("clip", 2), ("refuse", 1)):
        archive = Archive.grid((2, 2), 0.0, 1.0, out_of_bounds=mode)
        state, info = archive.insert(archive.init(1), genomes, fitness, descriptors)
        np.testing.assert_array_equal(info.outside, [True, False])
        assert int(jnp.sum(state.filled)) == stored
    # clipped onto the box's face: cell (1, 1), descriptor (1.0, 0.5)
    np.testing.assert_array_equal(
        np.asarray(
            Archive.grid((2, 2), 0.0, 1.0)
            .insert(Archive.grid((2, 2), 0.0, 1.0).init(1), *_one(1.5, 0.5))[0]
            .descriptors[3]
        ),
        [1.0, 0.5],
    )


def _one(x, y):
    return jnp.ones((1, 1)), jnp.ones(1), jnp.asarray([[x, y]])


def test_a_descriptor_of_the_wrong_shape_is_one_line_naming_the_shapes():
    archive = Archive.grid((2, 2), 0.0, 1.0)
    with pytest.raises(ValueError) as err:
        archive.insert(archive.init(1), jnp.ones((3, 1)), jnp.ones(3), jnp.ones((3,)))
    assert str(err.value) == (
        "descriptors have shape [3]; this archive needs [3, 2] (one 2-dimensional "
        "descriptor per genome)"
    )


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Archive.grid((2, 2), [0.0], [1.0, 1.0, 1.0]),
            "lower and upper must give one bound per descriptor dimension (2); "
            "got shapes [1] and [3]",
        ),
        (
            lambda: Archive.grid((2,), 1.0, 1.0),
            "the descriptor box needs finite bounds with lower < upper in every "
            "dimension; got lower=[1.0], upper=[1.0]",
        ),
        (
            lambda: Archive.grid((2, 0), 0.0, 1.0),
            "each grid size must be a positive int; got 0",
        ),
        (
            lambda: Archive.cvt(10, [0.0], [1.0], key=jr.key(0), num_samples=5),
            "num_samples (5) must be at least num_cells (10): k-means starts from "
            "num_cells of the samples",
        ),
    ],
)
def test_a_bad_archive_is_one_line(make, message):
    with pytest.raises(ValueError) as err:
        make()
    assert str(err.value) == message


def test_cvt_centroids_are_deterministic_given_the_key():
    def make(key):
        return Archive.cvt(
            50, [0.0, -1.0, 0.0], [1.0, 1.0, 4.0], key=key, num_samples=2000
        )

    a, b, other = make(jr.key(7)), make(jr.key(7)), make(jr.key(8))
    np.testing.assert_array_equal(np.asarray(a.centroids), np.asarray(b.centroids))
    assert not np.array_equal(np.asarray(a.centroids), np.asarray(other.centroids))
    assert a.centroids.shape == (50, 3)
    assert bool(jnp.all((a.centroids >= a.lower) & (a.centroids <= a.upper)))


def test_cvt_cells_are_about_equally_likely(seed):
    # what a CVT is for: uniform descriptors fill its cells about evenly
    archive = Archive.cvt(16, [0.0, 0.0], [1.0, 1.0], key=jr.key(1), num_samples=8000)
    cells = archive.cells(jr.uniform(jr.key(seed), (32_000, 2)))
    counts = np.bincount(np.asarray(cells), minlength=16)
    assert counts.min() > 0.6 * 2000 and counts.max() < 1.4 * 2000


def test_metrics_equal_the_numpy_reference():
    archive = Archive.grid((4,), 0.0, 1.0, qd_offset=2.0)
    empty = archive.metrics(archive.init(1))
    assert float(empty["qd_score"]) == 0.0 and float(empty["coverage"]) == 0.0
    assert float(empty["max_fitness"]) == -np.inf
    state, _ = archive.insert(
        archive.init(1),
        jnp.ones((3, 1)),
        jnp.asarray([-1.5, 0.5, 3.0]),
        jnp.asarray([[0.1], [0.6], [0.9]]),
    )
    metrics = archive.metrics(state)
    assert float(metrics["qd_score"]) == (-1.5 + 2) + (0.5 + 2) + (3.0 + 2)
    assert float(metrics["coverage"]) == 0.75
    assert float(metrics["max_fitness"]) == 3.0


def test_nbytes_is_the_states_size():
    archive = Archive.grid((8, 8), 0.0, 1.0)
    state = archive.init(10)
    assert archive.nbytes(10) == sum(x.nbytes for x in jax.tree.leaves(state))


# -- QDax, the oracle ---------------------------------------------------------------


def test_insertion_equals_qdax_repertoire_on_batches_without_ties(seed):
    from qdax.core.containers.mapelites_repertoire import (
        MapElitesRepertoire,
        compute_euclidean_centroids,
    )

    centroids = compute_euclidean_centroids((8, 8), 0.0, 1.0)
    ours = Archive(centroids, 0.0, 1.0)
    keys = jr.split(jr.key(seed), 6)
    batches = [
        (
            jr.normal(keys[2 * i], (50, 3)),
            # distinct values: QDax leaves ties within a batch to the scatter
            jr.permutation(keys[2 * i + 1], 1000)[:50].astype(jnp.float32) / 7,
            jr.uniform(jr.fold_in(keys[2 * i], 1), (50, 2)),
        )
        for i in range(3)
    ]
    theirs = MapElitesRepertoire.init(*batches[0], centroids)
    state, _ = ours.insert(ours.init(3), *batches[0])
    for genomes, fitness, descriptors in batches[1:]:
        theirs = theirs.add(genomes, descriptors, fitness)
        state, _ = ours.insert(state, genomes, fitness, descriptors)
    np.testing.assert_array_equal(np.asarray(state.fitness), theirs.fitnesses.ravel())
    np.testing.assert_array_equal(np.asarray(state.genomes), theirs.genotypes)
    np.testing.assert_array_equal(np.asarray(state.descriptors), theirs.descriptors)
