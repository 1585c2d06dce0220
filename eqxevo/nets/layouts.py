"""The layout rule: a propagation layout by name.

`make_layout(topology, "auto" | "segment" | "gather" | "dense" | "pallas")`: the
XLA layouts live in `propagate.py`, the fused Pallas one in `fused.py`, which
builds on them; this module sits above both.
"""

from .fused import PallasLayout
from .propagate import _LAYOUT_CLASSES, LAYOUTS, AbstractLayout, choose_layout
from .topology import Topology


def make_layout(
    topology: Topology, layout: str = "auto", *, plastic: bool = False
) -> AbstractLayout:
    """Build the layout named `layout` (or the one `"auto"` picks) for `topology`.

    Raises:
        ValueError: `layout` is not `"auto"`, `"segment"`, `"gather"`, `"dense"`
            or `"pallas"`.
    """
    if layout == "auto":
        layout = choose_layout(
            topology.num_neurons,
            topology.num_edges,
            topology.max_fan_in,
            plastic=plastic,
        )
    if layout == "pallas":
        return PallasLayout(topology)
    if layout not in _LAYOUT_CLASSES:
        raise ValueError(
            f"layout must be one of 'auto', {', '.join(map(repr, LAYOUTS))}, "
            f"'pallas'; got {layout!r}"
        )
    return _LAYOUT_CLASSES[layout](topology)


__all__ = ["make_layout"]
