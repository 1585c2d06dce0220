"""An opt-in faster lowering of JAX's threefry PRNG on CPU (`fast_cpu_prng`).

See docs/internals.md ("The fast CPU PRNG") for what it changes and guarantees.
"""

import warnings
from typing import Any

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
            import jax

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


__all__ = ["fast_cpu_prng", "fast_cpu_prng_active"]
