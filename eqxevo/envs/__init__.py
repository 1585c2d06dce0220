"""Environments behind one functional, gymnax-compatible protocol: the arena
milestones L0, L2, L4, any gymnax environment (`GymnaxEnv`, the `rl` extra) and
any Brax environment (`BraxEnv`, the `brax` extra) and MuJoCo Playground's DM
Control suite (`PlaygroundEnv`, the `playground` extra); the physics libraries
are imported when an environment is made.
"""

from typing import Any

from .arena import (
    AbstractArenaEnv as AbstractArenaEnv,
    AbstractArenaParams as AbstractArenaParams,
)
from .bandits import (
    IndependentBandit as IndependentBandit,
    IndependentBanditParams as IndependentBanditParams,
    IndependentBanditState as IndependentBanditState,
    ReversalBandit as ReversalBandit,
    ReversalBanditParams as ReversalBanditParams,
    ReversalBanditState as ReversalBanditState,
)
from .base import AbstractEnv as AbstractEnv
from .brax import BraxEnv as BraxEnv
from .chemotaxis import (
    Chemotaxis as Chemotaxis,
    ChemotaxisParams as ChemotaxisParams,
    ChemotaxisState as ChemotaxisState,
)
from .cue_reward import (
    CueReward as CueReward,
    CueRewardParams as CueRewardParams,
    CueRewardState as CueRewardState,
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
from .playground import PlaygroundEnv as PlaygroundEnv
from .privileged_view import Privileged as Privileged, privileged as privileged


def __getattr__(name: str) -> Any:
    # gymnax is optional: import the adapter (and gymnax) only when asked for.
    if name == "GymnaxEnv":
        from .gymnax import GymnaxEnv

        return GymnaxEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
