"""`Strategy`: any evosax algorithm over populations of an Equinox module.

`strategy.py` holds the one `Strategy` class; `base.py` the state and the
interface each evosax family implements; `distribution.py`, `population.py`
and `stein.py` one family each.
"""

from .base import AbstractFamily as AbstractFamily, StrategyState as StrategyState
from .strategy import FAMILIES as FAMILIES, Strategy as Strategy

__all__ = ["FAMILIES", "AbstractFamily", "Strategy", "StrategyState"]
