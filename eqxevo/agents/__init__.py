"""Reference agents: the hand-written policies evolved agents are measured against
(docs/environments.md, "Reference agents"); `eqxevo.references` declares which
belong to which environment.
"""

from .arena import (
    AbstractSteeringAgent as AbstractSteeringAgent,
    BraitenbergAgent as BraitenbergAgent,
    ForagerAgent as ForagerAgent,
    PatchOracleAgent as PatchOracleAgent,
    ReactiveTasteAgent as ReactiveTasteAgent,
    SeasonOracleAgent as SeasonOracleAgent,
    SourceOracleAgent as SourceOracleAgent,
    TasteLearnerAgent as TasteLearnerAgent,
    TasteMemory as TasteMemory,
)
from .bandits import (
    BayesUCBAgent as BayesUCBAgent,
    ChangePointBayesAgent as ChangePointBayesAgent,
    KArmedWinStayLoseShiftAgent as KArmedWinStayLoseShiftAgent,
    OracleBanditAgent as OracleBanditAgent,
    ThompsonSamplingAgent as ThompsonSamplingAgent,
)
from .base import RandomAgent as RandomAgent
from .cue_reward import (
    AbstractCueRewardAgent as AbstractCueRewardAgent,
    ConstantResponseAgent as ConstantResponseAgent,
    CueBelief as CueBelief,
    CueRewardLearner as CueRewardLearner,
    CueRewardOracle as CueRewardOracle,
)
from .gymnax_bandit import (
    AbstractBanditAgent as AbstractBanditAgent,
    BanditBelief as BanditBelief,
    GreedyBayesAgent as GreedyBayesAgent,
    WinStayLoseShiftAgent as WinStayLoseShiftAgent,
)
from .maze import (
    AbstractMazeAgent as AbstractMazeAgent,
    MazeExploreExploitAgent as MazeExploreExploitAgent,
    MazeMemory as MazeMemory,
    MazeOracleAgent as MazeOracleAgent,
    MazeWallFollowerAgent as MazeWallFollowerAgent,
)
