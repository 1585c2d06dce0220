"""Networks behind one policy protocol (`AbstractPolicy`)."""

from .base import AbstractPolicy as AbstractPolicy, PolicyState as PolicyState
from .mlp import MLPPolicy as MLPPolicy
