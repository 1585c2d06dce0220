"""`make_layout`: a propagation layout by name, the XLA ones and the fused kernel."""

# This module sits above propagate.py (the XLA layouts) and fused.py (which
# builds on them), so that it can name all four.
import os
import warnings
from collections.abc import Callable

import jax

from .fused import PallasLayout
from .propagate import (
    LAYOUTS,
    AbstractLayout,
    DenseLayout,
    GatherLayout,
    SegmentLayout,
    choose_layout,
)
from .topology import Topology

_CLASSES: dict[str, Callable[[Topology], AbstractLayout]] = {
    "segment": SegmentLayout,
    "gather": GatherLayout,
    "dense": DenseLayout,
    "pallas": PallasLayout,
}


DETERMINISTIC_GPU_FLAG = "--xla_gpu_deterministic_ops=true"
"""The XLA flag under which XLA:GPU's scatter-add (the segment layout's) is
deterministic: the same bits for the same key, 3-5x slower at the milestones
(NVIDIA H100, jax 0.11.2; docs/performance.md)."""


def warn_if_nondeterministic(layout: str) -> None:
    """Warn when the segment layout runs on a GPU whose scatter-add uses atomics."""
    if (
        layout == "segment"
        and jax.default_backend() == "gpu"
        and DETERMINISTIC_GPU_FLAG not in os.environ.get("XLA_FLAGS", "")
    ):
        warnings.warn(
            "layout='segment' is not deterministic on this GPU: XLA's scatter-add "
            "runs on atomics, so the same key can give other bits; use 'auto' "
            "(dense or gather there), or set "
            f"XLA_FLAGS={DETERMINISTIC_GPU_FLAG} before JAX starts (3-5x slower)",
            RuntimeWarning,
            stacklevel=3,
        )


def make_layout(
    topology: Topology, layout: str = "auto", *, plastic: bool = False
) -> AbstractLayout:
    """Build the layout named `layout` (or the one `"auto"` picks) for `topology`.

    Arguments:
        topology: the shared connectivity.
        layout: `"auto"` (`choose_layout`'s pick), `"segment"`, `"gather"`,
            `"dense"` or `"pallas"`.
        plastic: whether the network updates its weights and traces every step
            (`"auto"` weighs that in).

    Raises:
        ValueError: `layout` is none of those names.
    """
    if layout == "auto":
        layout = choose_layout(
            topology.num_neurons,
            topology.num_edges,
            topology.max_fan_in,
            plastic=plastic,
        )
    if layout not in _CLASSES:
        raise ValueError(
            f"layout must be one of 'auto', {', '.join(map(repr, LAYOUTS))}, "
            f"'pallas'; got {layout!r}"
        )
    warn_if_nondeterministic(layout)
    return _CLASSES[layout](topology)


__all__ = ["DETERMINISTIC_GPU_FLAG", "make_layout", "warn_if_nondeterministic"]
