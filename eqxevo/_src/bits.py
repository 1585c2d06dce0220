"""The bits seam: every place where eqxevo steers XLA so that a result does not
depend on how the work is split (docs/reproducibility.md, "What changed the
bits"), and the one patch of JAX's private API (`fast_cpu_prng`, opt-in).

- Evaluation blocks: `BLOCK_ALIGN`, `CPU_BLOCK_MAX`, `block_width`: how many
  genomes one vmapped block holds, whatever `batch_size` and the devices.
- Stages: `stage` (a computation of its own, which fusion never crosses, behind
  a `lax.cond` whose predicate `true_at_run_time` XLA cannot evaluate), and
  `draws_apart_pay` (where a lifetime's draws are staged apart).
- `fast_cpu_prng`: JAX's unrolled threefry lowering registered for CPU, through
  `jax._src` (`_threefry` looks every private name up and says when one is
  missing; `tests/test_prng.py` checks the installed JAX has them).

The JAX and equinox releases these rules were measured on are pinned in
pyproject.toml; docs/reproducibility.md says why.
"""

import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.tree_util as jtu

from ._types import Array, PRNGKey

# -- evaluation blocks ----------------------------------------------------------------

BLOCK_ALIGN = 16
"""Evaluation blocks are a multiple of this many genomes (padded with copies), so
every genome runs XLA:CPU's vectorised loop, never its scalar remainder, whatever
the batch size or device count (docs/reproducibility.md)."""


CPU_BLOCK_MAX = 128
"""On CPU, evaluation blocks hold at most this many genomes, whatever
`batch_size` asks: XLA:CPU's fusion choices depend on the size of a block's
arrays, and a wider block can change a genome's last bits (L2 blocks of 176
genomes or more differed from blocks of 16-160; docs/reproducibility.md,
mechanism 6). Other platforms evaluate the whole population at once."""


def block_width(count: int, batch_size: int | None) -> int:
    """Genomes per evaluation block: `batch_size` (or all `count`), at most
    `CPU_BLOCK_MAX` on CPU, evened out over the blocks that takes and rounded
    up to a multiple of `BLOCK_ALIGN`."""
    wanted = count if batch_size is None else min(batch_size, count)
    if jax.default_backend() == "cpu":
        wanted = min(wanted, CPU_BLOCK_MAX)
    num_blocks = -(-count // wanted)
    wanted = -(-count // num_blocks)  # 144 genomes: 2 blocks of 72, not 128 + 16
    return -(-wanted // BLOCK_ALIGN) * BLOCK_ALIGN


# -- stages ---------------------------------------------------------------------------


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


# -- the private-API patch: an unrolled threefry on CPU (opt-in) -----------------------

_warned = False  # warn about a JAX without the private API once per process


def _threefry() -> tuple[Any, Any, Any] | None:
    """JAX's lowering registry, the threefry primitive and its unrolled rule."""
    # Private API: every name is looked up defensively, so a JAX that moved one
    # gets a warning and the default lowering, never an exception.
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32
    except ImportError:
        return None
    primitive = getattr(threefry2x32, "threefry2x32_p", None)
    rule = getattr(threefry2x32, "_threefry2x32_lowering_rule", None)
    registry = getattr(mlir, "_platform_specific_lowerings", None)
    if primitive is None or rule is None or registry is None:
        return None
    if not hasattr(mlir, "register_lowering"):
        return None
    return mlir, primitive, rule


def fast_cpu_prng_active() -> bool:
    """Whether CPU programs compiled from now on get the unrolled threefry lowering."""
    found = _threefry()
    if found is None:
        return False
    mlir, primitive, rule = found
    # The registry keeps, per platform, the rule registered last for a primitive.
    entry = mlir._platform_specific_lowerings["cpu"].get(primitive)
    return getattr(entry, "rule", None) is rule


def fast_cpu_prng() -> bool:
    """Lower threefry on CPU unrolled, for programs compiled after this call.

    The same random draws (the same integer arithmetic), fewer kernels per
    lifetime step; whole runs may differ from default ones by float rounding
    (docs/internals.md, "The fast CPU PRNG"). Idempotent. Functions `jax.jit`
    compiled before the call keep the rolled lowering.

    Returns:
        True if the unrolled lowering is now registered for CPU; False if this
        JAX lacks the private API it needs (then it warns, once, and changes
        nothing).

    Example:
        >>> import eqxevo
        >>> eqxevo.fast_cpu_prng()
        True
    """
    global _warned
    found = _threefry()
    if found is None:
        if not _warned:
            _warned = True
            warnings.warn(
                "eqxevo.fast_cpu_prng: this JAX "
                f"({jax.__version__}) has no jax._src.random.threefry2x32."
                "_threefry2x32_lowering_rule or mlir.register_lowering; "
                "keeping JAX's default threefry lowering on CPU",
                RuntimeWarning,
                stacklevel=2,
            )
        return False
    if fast_cpu_prng_active():
        return True
    mlir, primitive, rule = found
    # The rule JAX uses on GPU and TPU, registered for CPU: a CPU-specific rule
    # wins over the generic one for programs lowered from now on.
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True


__all__ = [
    "BLOCK_ALIGN",
    "CPU_BLOCK_MAX",
    "block_width",
    "draws_apart_pay",
    "fast_cpu_prng",
    "fast_cpu_prng_active",
    "stage",
    "true_at_run_time",
]
