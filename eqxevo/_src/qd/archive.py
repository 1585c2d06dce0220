"""MAP-Elites archives: a fixed set of cells over a box of descriptor space, each
cell holding its best genome so far (its elite), on device.

Two tessellations: a regular grid, and a centroidal Voronoi tessellation (CVT)
whose centroids come from k-means over uniform samples of the box (scipy's
`kmeans2`, seeded from the key, so the same key gives the same centroids). The
archive's arrays have fixed shapes (cells x genome size), so insertion compiles
once; genomes are the flat vectors of `GenomeLayout`, fitness is maximised and
an empty cell holds -inf. docs/qd.md, "Archives".
"""

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from .._checks import one_of, positive_int
from .._types import PRNGKey, Scalar

OutOfBounds = Literal["clip", "refuse"]
"""What insertion does with a descriptor outside the archive's box: clip it onto
the box's nearest face and insert it, or refuse the candidate. Either way it is
counted (`Insertion.outside`)."""

Bounds = Any
"""A bound of the descriptor box: one number for every dimension, or a sequence
(or array) of one per dimension."""

OUT_OF_BOUNDS: tuple[OutOfBounds, ...] = ("clip", "refuse")

CVT_SAMPLES = 50_000
"""Uniform samples of the box that k-means clusters into a CVT's centroids
(QDax's default)."""

CVT_ITERATIONS = 30
"""Lloyd iterations of the CVT's k-means."""


class ArchiveState(eqx.Module):
    """The archive's contents: one elite per cell.

    Attributes:
        genomes: each cell's elite as a flat genome (zeros where empty).
        fitness: each cell's elite's fitness, maximised; -inf where empty.
        descriptors: each cell's elite's descriptor (zeros where empty).
    """

    genomes: Float[Array, "cells dim"]
    fitness: Float[Array, " cells"]
    descriptors: Float[Array, "cells d"]

    @property
    def filled(self) -> Bool[Array, " cells"]:
        """Which cells hold an elite."""
        return self.fitness > -jnp.inf


class Insertion(eqx.Module):
    """What one batch's insertion did, candidate by candidate.

    Attributes:
        cell: the cell each candidate's descriptor falls in (after clipping).
        added: it became its cell's elite.
        new_cell: it became the elite of a cell that was empty.
        improvement: by how much it beat its cell's elite before the batch (its
            own fitness in an empty cell; -inf when it was not added). CMA-ME's
            improvement ranking reads it.
        outside: its descriptor was outside the box (clipped or refused).
        invalid: its fitness or descriptor was not finite (never inserted).
    """

    cell: Int[Array, " batch"]
    added: Bool[Array, " batch"]
    new_cell: Bool[Array, " batch"]
    improvement: Float[Array, " batch"]
    outside: Bool[Array, " batch"]
    invalid: Bool[Array, " batch"]


def _box(
    lower: Bounds, upper: Bounds, dims: int | None
) -> tuple[np.ndarray, np.ndarray]:
    lo = np.atleast_1d(np.asarray(lower, np.float64))
    hi = np.atleast_1d(np.asarray(upper, np.float64))
    given = f"got shapes {list(lo.shape)} and {list(hi.shape)}"
    if dims is not None:
        lo = np.broadcast_to(lo, (dims,)) if lo.size == 1 else lo
        hi = np.broadcast_to(hi, (dims,)) if hi.size == 1 else hi
    if lo.ndim != 1 or lo.shape != hi.shape or (dims and lo.shape != (dims,)):
        raise ValueError(
            f"lower and upper must give one bound per descriptor dimension"
            f"{f' ({dims})' if dims else ''}; {given}"
        )
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()):
        raise ValueError(
            f"the descriptor box needs finite bounds with lower < upper in every "
            f"dimension; got lower={lo.tolist()}, upper={hi.tolist()}"
        )
    return lo, hi


class Archive(eqx.Module):
    """The cells of a box in descriptor space, each holding one elite.

    `Archive.grid` and `Archive.cvt` build the usual two; `Archive(centroids,
    lower, upper)` takes centroids of your own (a descriptor's cell is its
    nearest centroid). `init` makes the empty state and `insert` adds a batch
    of candidates to it.

    Arguments:
        centroids: each cell's centre (grid) or centroid; cells x d.
        lower: the box's lower corner (one bound, or one per dimension).
        upper: the box's upper corner.
        shape: the grid's cells per dimension (cells found by flooring, the
            centroids must be the grid's centres); None: the nearest centroid.
        out_of_bounds: "clip" or "refuse" (`OutOfBounds`).
        qd_offset: added to each elite's fitness in the QD score (minus a lower
            bound of the fitness makes the score grow with every filled cell).
    """

    centroids: Float[Array, "cells d"]
    lower: Float[Array, " d"]
    upper: Float[Array, " d"]
    shape: tuple[int, ...] | None = eqx.field(static=True)
    out_of_bounds: OutOfBounds = eqx.field(static=True)
    qd_offset: float = eqx.field(static=True)

    def __init__(
        self,
        centroids: Any,
        lower: Bounds,
        upper: Bounds,
        *,
        shape: tuple[int, ...] | None = None,
        out_of_bounds: OutOfBounds = "clip",
        qd_offset: float = 0.0,
    ):
        centroids = np.asarray(centroids, np.float64)
        if centroids.ndim != 2 or centroids.shape[0] < 1 or centroids.shape[1] < 1:
            raise ValueError(
                f"centroids must be cells x d with at least one of each; got shape "
                f"{list(centroids.shape)}"
            )
        lo, hi = _box(lower, upper, centroids.shape[1])
        if shape is not None and math.prod(shape) != centroids.shape[0]:
            raise ValueError(
                f"a grid of shape {list(shape)} has {math.prod(shape)} cells; got "
                f"{centroids.shape[0]} centroids"
            )
        one_of("out_of_bounds", out_of_bounds, OUT_OF_BOUNDS)
        if not isinstance(qd_offset, int | float) or not math.isfinite(qd_offset):
            raise ValueError(f"qd_offset must be a finite number; got {qd_offset!r}")
        self.centroids = jnp.asarray(centroids, jnp.float32)
        self.lower = jnp.asarray(lo, jnp.float32)
        self.upper = jnp.asarray(hi, jnp.float32)
        self.shape = shape
        self.out_of_bounds = out_of_bounds
        self.qd_offset = float(qd_offset)

    @classmethod
    def grid(
        cls,
        shape: Sequence[int],
        lower: Bounds,
        upper: Bounds,
        *,
        out_of_bounds: OutOfBounds = "clip",
        qd_offset: float = 0.0,
    ) -> "Archive":
        """A regular grid: `shape[i]` equal cells along descriptor dimension i,
        numbered in row-major order.

        Example:
            >>> archive = Archive.grid((32, 32), 0.0, 1.0)   # 1024 cells
        """
        shape = tuple(positive_int("each grid size", n) for n in shape)
        if not shape:
            raise ValueError("shape must name at least one dimension; got ()")
        lo, hi = _box(lower, upper, len(shape))
        axes = [
            lo[i] + (np.arange(n) + 0.5) * (hi[i] - lo[i]) / n
            for i, n in enumerate(shape)
        ]
        mesh = np.meshgrid(*axes, indexing="ij")
        centroids = np.stack([m.reshape(-1) for m in mesh], axis=-1)
        return cls(
            centroids,
            lo,
            hi,
            shape=shape,
            out_of_bounds=out_of_bounds,
            qd_offset=qd_offset,
        )

    @classmethod
    def cvt(
        cls,
        num_cells: int,
        lower: Bounds,
        upper: Bounds,
        *,
        key: PRNGKey,
        num_samples: int = CVT_SAMPLES,
        iterations: int = CVT_ITERATIONS,
        out_of_bounds: OutOfBounds = "clip",
        qd_offset: float = 0.0,
    ) -> "Archive":
        """A centroidal Voronoi tessellation of the box: `num_cells` centroids
        from k-means (scipy's `kmeans2`, `iterations` Lloyd steps from
        `num_cells` of the samples) over `num_samples` uniform samples of the
        box. The same key gives the same centroids.

        Example:
            >>> archive = Archive.cvt(1024, [0.0, 0.0], [1.0, 1.0], key=jr.key(0))
        """
        from scipy.cluster.vq import kmeans2

        num_cells = positive_int("num_cells", num_cells)
        num_samples = positive_int("num_samples", num_samples)
        iterations = positive_int("iterations", iterations)
        lo, hi = _box(lower, upper, None)
        if num_samples < num_cells:
            raise ValueError(
                f"num_samples ({num_samples}) must be at least num_cells "
                f"({num_cells}): k-means starts from num_cells of the samples"
            )
        sample_key, start_key = jr.split(key)
        unit = np.asarray(
            jr.uniform(sample_key, (num_samples, lo.size), jnp.float32), np.float64
        )
        samples = lo + unit * (hi - lo)
        seed = np.asarray(jr.key_data(start_key), np.uint32).reshape(-1)
        with warnings.catch_warnings():
            # A cluster left empty keeps its starting point: still a centroid.
            warnings.filterwarnings("ignore", "One of the clusters is empty")
            centroids, _ = kmeans2(
                samples,
                num_cells,
                iter=iterations,
                minit="points",
                rng=np.random.default_rng(seed),
            )
        return cls(centroids, lo, hi, out_of_bounds=out_of_bounds, qd_offset=qd_offset)

    # -- sizes ----------------------------------------------------------------------

    @property
    def num_cells(self) -> int:
        return self.centroids.shape[0]

    @property
    def descriptor_size(self) -> int:
        return self.centroids.shape[1]

    def nbytes(self, num_params: int, dtype: jnp.dtype = jnp.float32) -> int:
        """Bytes of a state for genomes of `num_params` values (what `init` makes)."""
        item = jnp.dtype(dtype).itemsize
        return self.num_cells * (num_params + 1 + self.descriptor_size) * item

    # -- contents -------------------------------------------------------------------

    def init(self, num_params: int, dtype: jnp.dtype = jnp.float32) -> ArchiveState:
        """The empty archive for flat genomes of `num_params` values."""
        num_params = positive_int("num_params", num_params)
        cells, d = self.num_cells, self.descriptor_size
        return ArchiveState(
            genomes=jnp.zeros((cells, num_params), dtype),
            fitness=jnp.full((cells,), -jnp.inf, dtype),
            descriptors=jnp.zeros((cells, d), self.centroids.dtype),
        )

    def check_descriptors(self, descriptors: Array, batch: int) -> None:
        """Raise, naming both shapes, unless `descriptors` is batch x d."""
        want = (batch, self.descriptor_size)
        if tuple(descriptors.shape) != want:
            raise ValueError(
                f"descriptors have shape {list(descriptors.shape)}; this archive "
                f"needs {list(want)} (one {self.descriptor_size}-dimensional "
                f"descriptor per genome)"
            )

    def cells(self, descriptors: Float[Array, "batch d"]) -> Int[Array, " batch"]:
        """The cell each descriptor falls in (a descriptor outside the box: the
        cell of its nearest point on the box)."""
        d = jnp.clip(descriptors.astype(self.lower.dtype), self.lower, self.upper)
        if self.shape is None:
            distance = jnp.sum(jnp.square(d[:, None, :] - self.centroids[None]), -1)
            return jnp.argmin(distance, axis=-1).astype(jnp.int32)
        n = jnp.asarray(self.shape, jnp.int32)
        scaled = (d - self.lower) / (self.upper - self.lower) * n.astype(d.dtype)
        index = jnp.clip(jnp.floor(scaled).astype(jnp.int32), 0, n - 1)
        strides = np.cumprod((1, *self.shape[:0:-1]))[::-1].astype(np.int32)
        return jnp.sum(index * jnp.asarray(strides), axis=-1)

    def insert(
        self,
        state: ArchiveState,
        genomes: Float[Array, "batch dim"],
        fitness: Float[Array, " batch"],
        descriptors: Array,
        insertable: Bool[Array, " batch"] | None = None,
    ) -> tuple[ArchiveState, Insertion]:
        """Add a batch of candidates (fitness maximised).

        A candidate becomes its cell's elite when it is the best of the batch in
        that cell (the first of equals) and strictly better than the elite
        there. A non-finite fitness or descriptor is never inserted; a
        descriptor outside the box is clipped onto it or refused
        (`out_of_bounds`); nor is a candidate that `insertable` leaves out (an
        evolution strategy's samples, where only its mean is inserted). Either
        way, `Insertion` says what happened.
        """
        batch = genomes.shape[0]
        self.check_descriptors(descriptors, batch)
        descriptors = descriptors.astype(self.lower.dtype)
        invalid = ~jnp.isfinite(fitness) | ~jnp.all(jnp.isfinite(descriptors), -1)
        outside = ~invalid & jnp.any(
            (descriptors < self.lower) | (descriptors > self.upper), -1
        )
        refused = invalid | (outside if self.out_of_bounds == "refuse" else False)
        if insertable is not None:
            refused = refused | ~insertable
        clipped = jnp.clip(descriptors, self.lower, self.upper)
        cell = self.cells(jnp.where(invalid[:, None], self.lower, clipped))
        value = jnp.where(refused, -jnp.inf, fitness.astype(state.fitness.dtype))
        cells = self.num_cells
        best = jax.ops.segment_max(value, cell, num_segments=cells)
        order = jnp.arange(batch, dtype=jnp.int32)
        contender = ~refused & (value == best[cell])
        first = jax.ops.segment_min(
            jnp.where(contender, order, batch), cell, num_segments=cells
        )
        before = state.fitness[cell]
        added = contender & (order == first[cell]) & (value > before)
        target = jnp.where(added, cell, cells)  # out of range: dropped
        new = ArchiveState(
            genomes=state.genomes.at[target].set(
                genomes.astype(state.genomes.dtype), mode="drop"
            ),
            fitness=state.fitness.at[target].set(value, mode="drop"),
            descriptors=state.descriptors.at[target].set(clipped, mode="drop"),
        )
        empty_before = before == -jnp.inf
        improvement = jnp.where(
            added, jnp.where(empty_before, value, value - before), -jnp.inf
        )
        info = Insertion(
            cell=cell,
            added=added,
            new_cell=added & empty_before,
            improvement=improvement,
            outside=outside,
            invalid=invalid,
        )
        return new, info

    # -- read-outs ------------------------------------------------------------------

    def metrics(self, state: ArchiveState) -> dict[str, Scalar]:
        """QD score (the filled cells' fitness plus `qd_offset` each), coverage
        (the fraction of cells filled) and the best fitness (-inf when empty)."""
        filled = state.filled
        count = jnp.sum(filled)
        score = jnp.sum(jnp.where(filled, state.fitness, 0)) + (
            self.qd_offset * count.astype(state.fitness.dtype)
        )
        return {
            "qd_score": score,
            "coverage": count.astype(state.fitness.dtype) / self.num_cells,
            "max_fitness": jnp.max(state.fitness),
        }


__all__ = [
    "CVT_ITERATIONS",
    "CVT_SAMPLES",
    "OUT_OF_BOUNDS",
    "Archive",
    "ArchiveState",
    "Insertion",
    "OutOfBounds",
]
