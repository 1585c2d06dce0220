"""Deprecated spellings of eqxevo 0.1, kept working for one release with a warning.

- `key_first`: `evolve`, `evaluate`, `rollout` and `record` took their key after
  the other arguments; they now take it first, as every JAX library does. The
  old order still works and warns.
- `moved`: modules renamed in 0.2 (`eqxevo.logging`, `eqxevo.baselines`,
  `eqxevo.envs.render`) stay importable and warn on import.
"""

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

_F = TypeVar("_F", bound=Callable[..., Any])


def is_key(value: Any) -> bool:
    """Whether `value` looks like a JAX PRNG key (typed, or raw uint32[2])."""
    if not isinstance(value, jax.Array | np.ndarray):
        return False
    if jnp.issubdtype(value.dtype, jax.dtypes.prng_key):
        return True
    return value.dtype == np.uint32 and value.shape == (2,)


def key_first(old_position: int) -> Callable[[_F], _F]:
    """Accept the 0.1 argument order (key at `old_position`) with a warning."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if args and not is_key(args[0]):
                if "key" in kwargs:
                    key = kwargs.pop("key")
                elif len(args) > old_position and is_key(args[old_position]):
                    key = args[old_position]
                    args = args[:old_position] + args[old_position + 1 :]
                else:
                    return fn(*args, **kwargs)  # let the real call report it
                warnings.warn(
                    f"{fn.__name__}(..., key, ...) is deprecated: pass the PRNG key "
                    f"as the first argument, {fn.__name__}(key, ...)",
                    DeprecationWarning,
                    stacklevel=2,
                )
                args = (key, *args)
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def moved(old: str, new: str) -> None:
    """Warn that module `old` is now `new` (call at the top of the old module)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next release; import "
        f"{new} instead",
        DeprecationWarning,
        stacklevel=3,
    )


__all__ = ["is_key", "key_first", "moved"]
