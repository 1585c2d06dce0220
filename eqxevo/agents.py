"""Reference agents: the hand-written policies evolved agents are measured against
(docs/environments.md, "Reference agents"): random, memoryless, learners and
oracles for each environment.
"""

from ._src.agents.arena import (
    BraitenbergAgent as BraitenbergAgent,
    ForagerAgent as ForagerAgent,
    PatchOracleAgent as PatchOracleAgent,
    ReactiveTasteAgent as ReactiveTasteAgent,
    SeasonOracleAgent as SeasonOracleAgent,
    SourceOracleAgent as SourceOracleAgent,
    TasteLearnerAgent as TasteLearnerAgent,
)
from ._src.agents.bandits import (
    BayesUCBAgent as BayesUCBAgent,
    ChangePointBayesAgent as ChangePointBayesAgent,
    KArmedWinStayLoseShiftAgent as KArmedWinStayLoseShiftAgent,
    OracleBanditAgent as OracleBanditAgent,
    ThompsonSamplingAgent as ThompsonSamplingAgent,
)
from ._src.agents.base import (
    RandomAgent as RandomAgent,
)
from ._src.agents.cue_reward import (
    ConstantResponseAgent as ConstantResponseAgent,
    CueRewardLearner as CueRewardLearner,
    CueRewardOracle as CueRewardOracle,
)
from ._src.agents.gymnax_bandit import (
    GreedyBayesAgent as GreedyBayesAgent,
    WinStayLoseShiftAgent as WinStayLoseShiftAgent,
)
from ._src.agents.maze import (
    MazeExploreExploitAgent as MazeExploreExploitAgent,
    MazeOracleAgent as MazeOracleAgent,
    MazeWallFollowerAgent as MazeWallFollowerAgent,
)
