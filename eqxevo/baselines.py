"""Deprecated: the reference agents moved to `eqxevo.agents`."""

from ._deprecated import moved

moved("eqxevo.baselines", "eqxevo.agents")

from .agents import (  # noqa: E402
    BraitenbergAgent as BraitenbergAgent,
    ForagerAgent as ForagerAgent,
    RandomAgent as RandomAgent,
    TasteLearnerAgent as TasteLearnerAgent,
)
