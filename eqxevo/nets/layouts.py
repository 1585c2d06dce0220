"""`make_layout`: a propagation layout by name, the XLA ones and the fused kernel."""

# This module sits above propagate.py (the XLA layouts) and fused.py (which
# builds on them), so that it can name all four.
from collections.abc import Callable

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
    return _CLASSES[layout](topology)


__all__ = ["make_layout"]
