"""The policy protocol every network implements, and rollouts rely on.

A policy is an Equinox module (so it can be a genome) that acts over a lifetime:

    state = policy.initial_state(key)               # lifetime state
    action, state = policy(obs, state)              # once per step
    state = policy.reinforce(reward, state)         # after the env step

The lifetime state holds everything that changes within a lifetime (neuron
activations, membrane potentials, plastic weights, eligibility traces); the
module itself holds what evolution sets (initial weights, rule coefficients,
time constants) and what is shared (topology, configuration). Nothing in a
policy's lifetime is ever written back into the genome.
"""

import abc
from typing import Any

import equinox as eqx

from .._types import Array, Float, PRNGKey, Scalar

PolicyState = Any
"""Any pytree of arrays (None for a stateless policy)."""


class AbstractPolicy(eqx.Module):
    """A network acting over a lifetime: `policy(obs, state) -> (action, state)`.

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
