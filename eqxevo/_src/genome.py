"""Genomes: a module split into evolvable and shared parts; flat vectors <-> modules.

See docs/internals.md ("Genomes", "Per-leaf search scales").
"""

import math
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from ._checks import did_you_mean, dotted_keys, positive_number
from ._types import Array, FlatGenome, FlatPopulation, Float, Genome, Population


def _describe(leaf: Any) -> str:
    if isinstance(leaf, jax.Array | np.ndarray):
        return f"{leaf.dtype}{list(leaf.shape)}"
    return type(leaf).__name__


def leaf_path(path: tuple[Any, ...]) -> str:
    """A leaf's dotted path (`rule.learning_rate`, `weights.0`): attribute
    names, dict keys and sequence indices of a `jax.tree_util` key path."""
    parts = []
    for entry in path:
        for attr in ("name", "key", "idx"):  # GetAttrKey, DictKey, SequenceKey
            if hasattr(entry, attr):
                parts.append(str(getattr(entry, attr)))
                break
        else:
            parts.append(str(entry))
    return ".".join(parts)


def _covers(key: str, path: str) -> bool:
    return path == key or path.startswith(key + ".")


def leaf_scale_vector(
    paths: list[str],
    sizes: list[int],
    dtype: Any,
    leaf_scales: Mapping[str, Any] | None,
) -> Float[Array, " D"] | None:
    """The flat vector of per-leaf search scales (1 where no key covers a
    leaf; the longest key covering it otherwise); None for no scales.

    Raises:
        ValueError: a key covers no evolvable leaf, or a scale is not a finite
            number > 0.
        TypeError: `leaf_scales` is not a mapping of leaf paths to numbers.
    """
    if leaf_scales is None:
        return None
    if not isinstance(leaf_scales, Mapping):
        raise TypeError(
            "leaf_scales: expected a mapping of leaf paths to scales, e.g. "
            f'{{"rule.learning_rate": 0.01}}; got {type(leaf_scales).__name__}'
        )
    for key in leaf_scales:
        if not isinstance(key, str):
            raise TypeError(f"leaf_scales: keys are leaf paths (str); got {key!r}")
    table = dotted_keys(leaf_scales)
    if not table:
        return None
    for key, value in table.items():
        positive_number(f"leaf_scales[{key!r}]", value)
        if not any(_covers(key, path) for path in paths):
            raise ValueError(
                f"leaf_scales: {key!r} is neither an evolvable leaf of the genome "
                f"nor a prefix of one{did_you_mean(key, paths, quote=True)}; its "
                f"evolvable leaves: {', '.join(paths)}"
            )
    values = []
    for path, size in zip(paths, sizes, strict=True):
        keys = [k for k in table if _covers(k, path)]
        scale = float(table[max(keys, key=len)]) if keys else 1.0
        values.append(np.full((size,), scale, np.dtype(dtype)))
    return jnp.asarray(np.concatenate(values))


class GenomeLayout(eqx.Module):
    """Where each evolvable leaf of a genome lives in the flat parameter vector.

    Build with `GenomeLayout.from_genome(genome, filter_spec)`.

    With `scales` (`leaf_scales` of `from_genome`), the flat vector is the
    genome's search coordinates: each evolvable value divided by its leaf's
    scale (`flatten`), and multiplied back (`unflatten`). A search that steps
    every coordinate alike then steps each leaf by its own scale. Without,
    the flat vector is the values themselves (no arithmetic at all).

    Attributes:
        static: the genome with every evolvable leaf replaced by `None`; shared by
            the whole population.
        filter_spec: the filter that selected the evolvable leaves.
        shapes, dtypes: per evolvable leaf, in `jax.tree_util` order.
        num_params: length D of the flat vector.
        dtype: dtype of the flat vector: the leaves' dtype, or float32 (float64)
            when they differ.
        scales: the per-coordinate scale `(D,)`, or None (the default: none).
    """

    static: Any
    filter_spec: Any = eqx.field(static=True)
    treedef: Any = eqx.field(static=True)
    shapes: tuple[tuple[int, ...], ...] = eqx.field(static=True)
    dtypes: tuple[Any, ...] = eqx.field(static=True)
    num_params: int = eqx.field(static=True)
    dtype: Any = eqx.field(static=True)
    scales: Float[Array, " D"] | None = None

    @classmethod
    def from_genome(
        cls,
        genome: Genome,
        filter_spec: Any = eqx.is_inexact_array,
        leaf_scales: Mapping[str, Any] | None = None,
    ) -> "GenomeLayout":
        """Record the evolvable layout of `genome`.

        Arguments:
            genome: any Equinox module (or pytree).
            filter_spec: selects the evolvable leaves.
            leaf_scales: per-leaf search scales, keyed by a leaf's dotted path
                (`leaf_path`: `"rule.learning_rate"`, `"weights.0"`) or a prefix
                of paths (`"rule"`: every leaf under it); the longest key
                covering a leaf wins, leaves no key covers get 1. Nested tables
                are read as dotted keys. None or empty: no scales.

        Raises:
            ValueError: no leaf of `genome` is selected by `filter_spec`, a
                selected leaf is not a floating-point array, or a
                `leaf_scales` key covers no evolvable leaf or its scale is not
                a finite number > 0.
        """
        # Only the evolvable half is kept as shapes and dtypes; the static half
        # (topology, functions, configuration) is kept as it is.
        evolvable, static = eqx.partition(genome, filter_spec)
        leaves_with_path, treedef = jtu.tree_flatten_with_path(evolvable)
        if not leaves_with_path:
            raise ValueError(
                f"genome: a {type(genome).__name__} with no evolvable leaves under "
                f"filter_spec={getattr(filter_spec, '__name__', filter_spec)!r}. "
                "Evolvable leaves are floating-point arrays selected by the filter "
                "spec (default eqx.is_inexact_array); give the genome at least one, "
                "or pass a filter_spec that selects some."
            )
        for path, leaf in leaves_with_path:
            ok = isinstance(leaf, jax.Array | np.ndarray) and jnp.issubdtype(
                leaf.dtype, jnp.floating
            )
            if not ok:
                raise ValueError(
                    f"genome: leaf {jtu.keystr(path)} is selected for evolution but is "
                    f"{_describe(leaf)}; evolvable leaves must be floating-point "
                    "arrays. Exclude it with filter_spec (integer arrays such as "
                    "edge lists stay static and shared)."
                )
        leaves = [leaf for _, leaf in leaves_with_path]
        shapes = tuple(tuple(int(d) for d in leaf.shape) for leaf in leaves)
        dtypes = tuple(jnp.dtype(leaf.dtype) for leaf in leaves)
        # One leaf dtype stays as it is; mixed dtypes meet at float32 (float64 if
        # any leaf is). Explicit, so strict dtype promotion never trips here.
        if len(set(dtypes)) == 1:
            dtype = dtypes[0]
        elif any(d == jnp.float64 for d in dtypes):
            dtype = jnp.dtype(jnp.float64)
        else:
            dtype = jnp.dtype(jnp.float32)
        paths = [leaf_path(path) for path, _ in leaves_with_path]
        sizes = [math.prod(s) for s in shapes]
        return cls(
            static=static,
            filter_spec=filter_spec,
            treedef=treedef,
            shapes=shapes,
            dtypes=dtypes,
            num_params=sum(sizes),
            dtype=dtype,
            scales=leaf_scale_vector(paths, sizes, dtype, leaf_scales),
        )

    # -- single genomes ---------------------------------------------------------

    def flatten(self, genome: Genome) -> FlatGenome:
        """The evolvable leaves of one genome as a flat vector of length D."""
        leaves = self._evolvable_leaves(genome, batch_ndim=0)
        flat = jnp.concatenate([jnp.ravel(x).astype(self.dtype) for x in leaves])
        return flat if self.scales is None else flat / self.scales

    def unflatten(self, flat: FlatGenome) -> Genome:
        """One genome from a flat vector of length D (static parts shared)."""
        return self._build(flat, batch_shape=())

    # -- populations ------------------------------------------------------------

    def flatten_population(
        self, population: Population, population_size: int | None = None
    ) -> FlatPopulation:
        """The evolvable leaves of a population as a `[P, D]` array.

        Raises:
            ValueError: the population's structure differs from the genome's, or
                its evolvable leaves do not share one leading axis (of size
                `population_size` when given).
        """
        leaves = self._evolvable_leaves(population, batch_ndim=1)
        sizes = {x.shape[0] for x in leaves}
        if len(sizes) != 1:
            raise ValueError(
                "population: evolvable leaves have different leading axes "
                f"{sorted(sizes)}; every evolvable leaf needs the same population axis."
            )
        (size,) = sizes
        if population_size is not None and size != population_size:
            raise ValueError(
                f"population: has {size} genomes but the strategy was built with "
                f"population_size={population_size}; tell() needs the population "
                "that ask() returned (same size, same order)."
            )
        flat = jnp.concatenate(
            [jnp.reshape(x, (size, -1)).astype(self.dtype) for x in leaves], axis=1
        )
        return flat if self.scales is None else flat / self.scales

    def unflatten_population(self, flat: FlatPopulation) -> Population:
        """A population module from a `[P, D]` array; static parts are not copied."""
        return self._build(flat, batch_shape=flat.shape[:-1])

    # -- internals --------------------------------------------------------------

    def _build(self, flat: Array, batch_shape: tuple[int, ...]) -> Any:
        # Leaves are consecutive slices of the flat vector, in tree order; any
        # leading batch axes (the population) pass through every slice.
        if self.scales is not None:
            flat = flat * self.scales
        leaves = []
        offset = 0
        for shape, dtype in zip(self.shapes, self.dtypes, strict=True):
            size = math.prod(shape)
            chunk = flat[..., offset : offset + size]
            leaves.append(jnp.reshape(chunk, (*batch_shape, *shape)).astype(dtype))
            offset += size
        evolvable = jtu.tree_unflatten(self.treedef, leaves)
        # The static parts are the one shared copy, whatever the batch shape.
        return eqx.combine(evolvable, self.static)

    def _evolvable_leaves(self, tree: Any, batch_ndim: int) -> list[Array]:
        what = "population" if batch_ndim else "genome"
        evolvable = eqx.filter(tree, self.filter_spec)
        leaves, treedef = jtu.tree_flatten(evolvable)
        if treedef != self.treedef:
            raise ValueError(
                f"{what}: its structure differs from the genome the strategy was "
                f"built with.\n  expected: {self.treedef}\n  received: {treedef}"
            )
        for leaf, shape in zip(leaves, self.shapes, strict=True):
            ndim_ok = leaf.ndim == len(shape) + batch_ndim
            if not ndim_ok or tuple(leaf.shape[batch_ndim:]) != shape:
                expected = ("P", *shape) if batch_ndim else shape
                raise ValueError(
                    f"{what}: an evolvable leaf has shape {tuple(leaf.shape)}, "
                    "expected "
                    f"{expected}."
                )
        return leaves
