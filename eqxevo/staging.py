"""A computation of its own inside a program, so XLA cannot fuse across it
(docs/reproducibility.md, "What changed the bits").
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from ._types import Array, PRNGKey


def stage(fn: Callable[..., Any], pred: Array) -> Callable[..., Any]:
    """`fn`, compiled as a computation of its own inside the enclosing program.

    XLA fuses freely within a computation, and on CPU its optimisation barriers
    are removed before fusion, so they cannot keep two stages apart. The branches
    of a `lax.cond` are separate computations that fusion never crosses: with a
    predicate XLA cannot evaluate (`pred` is always true at run time), `fn` runs
    as the branch, on materialised inputs, like a call of its own jitted program,
    and gives the bits that program gives (docs/reproducibility.md). The other
    branch (zeros) never runs.
    """

    def staged(*args: Any) -> Any:
        dynamic, static = eqx.partition(args, eqx.is_array)
        out_static: list[Any] = []

        def run(dynamic: Any) -> Any:
            out = fn(*eqx.combine(dynamic, static))
            out_dynamic, out_static_part = eqx.partition(out, eqx.is_array)
            out_static.append(out_static_part)
            return out_dynamic

        # The branch that never runs must return the same shapes: traced once here.
        shapes = jax.eval_shape(run, dynamic)

        def never(dynamic: Any) -> Any:
            del dynamic
            return jtu.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        out_dynamic = jax.lax.cond(pred, run, never, dynamic)
        return eqx.combine(out_dynamic, out_static[-1])

    return staged


def draws_apart_pay() -> bool:
    """Whether a lifetime's draws are computed apart (`stage`) and a shared
    episode drawn once for the population: on CPU, where a conditional is a
    cheap branch and the draws are scalar work repeated per genome (L0 1.9x
    faster). On GPU the population's draws run in parallel anyway, and drawing
    them once was slower on an H200 (docs/performance.md), so the program
    keeps per-genome draws there."""
    return jax.default_backend() == "cpu"


def true_at_run_time(key: PRNGKey) -> Array:
    """A predicate for `stage`: always true, but not something XLA can evaluate
    at compile time (it reads a word of `key`)."""
    data = jr.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    return (jnp.ravel(data)[0] | jnp.uint32(1)) != 0


__all__ = ["draws_apart_pay", "stage", "true_at_run_time"]
