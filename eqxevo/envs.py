"""Environments behind one functional, gymnax-compatible protocol: the arena
milestones L0, L2, L4, the bandits, any gymnax environment (`GymnaxEnv`, the `rl`
extra), any Brax environment (`BraxEnv`, the `brax` extra) and MuJoCo Playground's
DM Control suite (`PlaygroundEnv`, the `playground` extra); the physics libraries
are imported when an environment is made.
"""

from typing import Any

from ._src.envs.bandits import (
    IndependentBandit as IndependentBandit,
    IndependentBanditParams as IndependentBanditParams,
    ReversalBandit as ReversalBandit,
    ReversalBanditParams as ReversalBanditParams,
)
from ._src.envs.base import (
    AbstractEnv as AbstractEnv,
)
from ._src.envs.brax import (
    BraxEnv as BraxEnv,
)
from ._src.envs.chemotaxis import (
    Chemotaxis as Chemotaxis,
    ChemotaxisParams as ChemotaxisParams,
)
from ._src.envs.cue_reward import (
    CueReward as CueReward,
    CueRewardParams as CueRewardParams,
)
from ._src.envs.foraging import (
    Foraging as Foraging,
    ForagingParams as ForagingParams,
)
from ._src.envs.long_horizon import (
    LongHorizon as LongHorizon,
    LongHorizonParams as LongHorizonParams,
)
from ._src.envs.params import (
    AbstractParams as AbstractParams,
)
from ._src.envs.playground import (
    PlaygroundEnv as PlaygroundEnv,
)
from ._src.envs.privileged_view import (
    Privileged as Privileged,
    privileged as privileged,
)


def __getattr__(name: str) -> Any:
    # gymnax is optional: import the adapter (and gymnax) only when asked for.
    if name == "GymnaxEnv":
        from ._src.envs.gymnax import GymnaxEnv

        return GymnaxEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
