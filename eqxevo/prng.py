"""An opt-in faster lowering of JAX's threefry PRNG on CPU.

On XLA:CPU, JAX lowers the `threefry2x32` primitive (behind every
`jax.random.split`, `fold_in` and draw) to a rolled 5-trip `while` loop
(`_threefry2x32_cpu_lowering_rule` in jax/_src/random/threefry2x32.py), which
keeps compilation short. Inside a lifetime step every key operation then
becomes a nested loop whose state XLA copies on every trip: the L0 milestone's
step runs 585 kernels, 510 of them in such loops (`eqxevo bench kernels`).

`fast_cpu_prng()` registers, for CPU, the unrolled lowering JAX itself uses on
other backends: the same 20 rounds of the same uint32 additions, rotations and
xors, written out. The random draws are the same bits, and so are L0 runs
(tests/test_prng.py, two processes); the lifetime step fuses into far fewer
kernels (L0: 25) and compiles in about the same time (docs/performance.md).
Whole runs are *not* guaranteed bit for bit: XLA compiles the program around
the keys differently and may round float arithmetic elsewhere by an ulp (a
transcendental fitness and L4 did), so nothing in eqxevo calls it by default,
`eqxevo run`, `resume` and `study run` included.

It changes JAX for the whole process and only for programs compiled after the
call: a function `jax.jit` already compiled keeps its executable (JAX's caches
are keyed on the function and its arguments, not on the lowering rules), so
call it first thing. Importing eqxevo never calls it.

It touches JAX's private API (`jax._src`); on a JAX without it, it warns once
and changes nothing.
"""

import warnings
from typing import Any

_warned = False


def _threefry() -> tuple[Any, Any, Any] | None:
    """JAX's lowering registry, the threefry primitive and its unrolled rule."""
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
    entry = mlir._platform_specific_lowerings["cpu"].get(primitive)
    return getattr(entry, "rule", None) is rule


def fast_cpu_prng() -> bool:
    """Lower threefry on CPU unrolled, for programs compiled after this call.

    The same random draws (the same integer arithmetic), fewer kernels per
    lifetime step; whole runs may differ from default ones by float rounding
    (see `eqxevo.prng`). Idempotent. Functions `jax.jit` compiled before the
    call keep the rolled lowering.

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
    mlir.register_lowering(primitive, rule, platform="cpu")
    return True


__all__ = ["fast_cpu_prng", "fast_cpu_prng_active"]
