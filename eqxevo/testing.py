"""The testing kit for your own environments, policies and genomes: contract
checks (`check_env`, `check_policy`) and Hypothesis strategies (the `testing`
extra).
"""

from ._src._hypothesis import (
    actions as actions,
    keys as keys,
    population_sizes as population_sizes,
    small_genomes as small_genomes,
)
from ._src.testing import (
    CheckFailed as CheckFailed,
    check_env as check_env,
    check_policy as check_policy,
)
