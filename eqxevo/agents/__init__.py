"""Reference agents: the hand-written policies evolved agents are measured against
(docs/environments.md, "Reference agents"); `eqxevo.references` declares which
belong to which environment.
"""

from .arena import (
    AbstractSteeringAgent as AbstractSteeringAgent,
    BraitenbergAgent as BraitenbergAgent,
    ForagerAgent as ForagerAgent,
    TasteLearnerAgent as TasteLearnerAgent,
)
from .base import RandomAgent as RandomAgent
from .gymnax_bandit import (
    AbstractBanditAgent as AbstractBanditAgent,
    BanditBelief as BanditBelief,
    GreedyBayesAgent as GreedyBayesAgent,
    WinStayLoseShiftAgent as WinStayLoseShiftAgent,
)
