"""Hypothesis strategies that draw eqxevo's inputs (public as `eqxevo.testing`)."""

from typing import Any

import jax.numpy as jnp
import jax.random as jr

from ._checks import int_at_least, positive_int
from .nets.mlp import MLPPolicy


def _hypothesis() -> Any:
    try:
        import hypothesis.strategies as st
    except ImportError as err:  # pragma: no cover - hypothesis is a dev dependency
        raise ImportError(
            "eqxevo.testing's strategies need hypothesis: pip install hypothesis "
            '(or "eqxevo[dev]")'
        ) from err
    return st


def keys() -> Any:
    """Hypothesis strategy: typed PRNG keys `jax.random.key(seed)`."""
    st = _hypothesis()
    return st.integers(0, 2**32 - 1).map(jr.key)


def population_sizes(
    min_size: int = 2, max_size: int = 32, *, even: bool = False
) -> Any:
    """Hypothesis strategy: population sizes in `[min_size, max_size]`.

    Arguments:
        even: only even sizes (antithetic strategies such as open_es and pgpe).
    """
    st = _hypothesis()
    min_size = positive_int("min_size", min_size)
    max_size = int_at_least("max_size", max_size, min_size)
    if not even:
        return st.integers(min_size, max_size)
    low, high = (min_size + 1) // 2, max_size // 2
    if low > high:
        raise ValueError(f"no even size in [{min_size}, {max_size}]")
    return st.integers(low, high).map(lambda n: 2 * n)


def small_genomes(
    obs_size: int | None = None,
    action_size: int | None = None,
    *,
    max_width: int = 8,
    max_depth: int = 2,
) -> Any:
    """Hypothesis strategy: small `MLPPolicy` genomes (few shapes: compiling costs).

    Arguments:
        obs_size, action_size: fixed sizes, or None to draw them in [1, 4].
        max_width, max_depth: bounds of the hidden layers.
    """
    st = _hypothesis()
    size = st.integers(1, 4)
    return st.builds(
        lambda o, a, w, d, seed: MLPPolicy(o, a, w, d, key=jr.key(seed)),
        st.just(obs_size) if obs_size is not None else size,
        st.just(action_size) if action_size is not None else size,
        st.integers(1, max_width),
        st.integers(0, max_depth),
        st.integers(0, 2**32 - 1),
    )


def actions(action_size: int) -> Any:
    """Hypothesis strategy: float32 actions of shape `(action_size,)` in [-1, 1]."""
    st = _hypothesis()
    element = st.floats(-1.0, 1.0, width=32)
    return st.lists(element, min_size=action_size, max_size=action_size).map(
        lambda xs: jnp.asarray(xs, jnp.float32)
    )


__all__ = ["actions", "keys", "population_sizes", "small_genomes"]
