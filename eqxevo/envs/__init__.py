"""Environments behind one functional, gymnax-compatible protocol.

- `Chemotaxis` (L0), `Foraging` (L2), `LongHorizon` (L4): the milestone arena
  environments, with their params (`ChemotaxisParams`, ...), which extend
  `AbstractParams` (every field declared with its default and range, checked at
  construction and at reset; `eqxevo.envs.params`).
- `GymnaxEnv`: any gymnax environment by name (needs the `rl` extra; imported on
  first use).
- Pictures of a recorded lifetime are drawn by `eqxevo.plots`.
"""

from typing import Any

from .arena import (
    AbstractArenaEnv as AbstractArenaEnv,
    AbstractArenaParams as AbstractArenaParams,
)
from .base import (
    AbstractEnv as AbstractEnv,
    traced_param_checks as traced_param_checks,
)
from .chemotaxis import (
    Chemotaxis as Chemotaxis,
    ChemotaxisParams as ChemotaxisParams,
    ChemotaxisState as ChemotaxisState,
)
from .foraging import (
    AbstractFeedingParams as AbstractFeedingParams,
    Foraging as Foraging,
    ForagingParams as ForagingParams,
    ForagingState as ForagingState,
)
from .long_horizon import (
    LongHorizon as LongHorizon,
    LongHorizonParams as LongHorizonParams,
    LongHorizonState as LongHorizonState,
)
from .params import AbstractParams as AbstractParams


def __getattr__(name: str) -> Any:
    # gymnax is optional: import the adapter (and gymnax) only when asked for.
    if name == "GymnaxEnv":
        from .gymnax import GymnaxEnv

        return GymnaxEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
