"""`AbstractPolicy`: the protocol every network implements and rollouts rely on."""

import abc
from typing import Any

import equinox as eqx

from .._types import Array, Float, PRNGKey, Scalar

PolicyState = Any
"""Any pytree of arrays (None for a stateless policy)."""


class AbstractPolicy(eqx.Module):
    """A network acting over a lifetime: `policy(obs, state) -> (action, state)`.

        state = policy.initial_state(key)          # at birth
        action, state = policy(obs, state)         # once per step
        state = policy.reinforce(reward, state)    # after the environment's step

    The module holds what evolution sets (initial weights, rule coefficients,
    time constants) and what a population shares (topology, configuration); the
    lifetime state holds everything that changes within a lifetime (activations,
    potentials, plastic weights, eligibility traces). Nothing a lifetime does is
    written back into the genome.

    Subclasses provide `obs_size`, `action_size`, `initial_state` and `__call__`;
    plastic ones that use a reward signal also override `reinforce`.
    """

    obs_size: eqx.AbstractVar[int]
    action_size: eqx.AbstractVar[int]

    @abc.abstractmethod
    def initial_state(self, key: PRNGKey) -> PolicyState:
        """The lifetime state at birth (may be random, from `key`)."""

    @abc.abstractmethod
    def __call__(
        self, obs: Float[Array, " obs"], state: PolicyState
    ) -> tuple[Float[Array, " action"], PolicyState]:
        """One step: an observation in, an action out, the lifetime state updated."""

    def reinforce(self, reward: Scalar, state: PolicyState) -> PolicyState:
        """Hand the step's reward to the policy (three-factor plasticity uses it).

        The default ignores it: non-plastic policies need no reward.
        """
        del reward
        return state


class AbstractStatelessPolicy(AbstractPolicy):
    """A policy without lifetime state: `initial_state` is None, and so is the
    state `__call__` receives and returns."""

    def initial_state(self, key: PRNGKey) -> None:
        del key
        return None


__all__ = ["AbstractPolicy", "AbstractStatelessPolicy", "PolicyState"]
