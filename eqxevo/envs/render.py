"""Deprecated: pictures of a lifetime moved to `eqxevo.plots`.

The two names load from `eqxevo.plots` when first asked for (PEP 562): the
environments stay below the plotting module, which draws them.
"""

import importlib
from typing import Any

from .._deprecated import moved

moved("eqxevo.envs.render", "eqxevo.plots")

_MOVED = ("render_policy", "render_trajectory")


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return getattr(importlib.import_module("eqxevo.plots"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_MOVED})
