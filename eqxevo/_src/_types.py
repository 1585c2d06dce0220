"""jaxtyping aliases shared by eqxevo's public signatures."""

from typing import Any, TypeAlias

from jaxtyping import Array, Bool, Float, Int, Key, PRNGKeyArray, PyTree, Real, UInt32

PRNGKey: TypeAlias = PRNGKeyArray
"""A JAX PRNG key: typed (`jax.random.key`) or raw uint32 (`jax.random.PRNGKey`)."""

PRNGKeys: TypeAlias = Key[Array, " n"] | UInt32[Array, "n 2"]
"""A batch of keys with one leading axis (typed or raw uint32)."""

Scalar: TypeAlias = Float[Array, ""]
IntScalar: TypeAlias = Int[Array, ""]
BoolScalar: TypeAlias = Bool[Array, ""]

Fitness: TypeAlias = Float[Array, " pop"]
"""One fitness value per genome, in the user's sign."""

RawFitness: TypeAlias = Real[Array, " pop"]
"""Fitness as a user may hand it over: any real dtype, one value per genome."""

FlatGenome: TypeAlias = Float[Array, " dim"]
FlatPopulation: TypeAlias = Float[Array, "pop dim"]

Genome: TypeAlias = Any
"""Any Equinox module (or pytree) whose evolvable leaves are floating arrays."""

Population: TypeAlias = Any
"""The genome's own type, with a leading population axis on its evolvable leaves."""

Metrics: TypeAlias = dict[str, Array]

__all__ = [
    "Array",
    "Bool",
    "BoolScalar",
    "Fitness",
    "FlatGenome",
    "FlatPopulation",
    "Float",
    "Genome",
    "Int",
    "IntScalar",
    "Metrics",
    "PRNGKey",
    "PRNGKeys",
    "Population",
    "PyTree",
    "RawFitness",
    "Scalar",
]
