"""`AbstractPolicy`: the protocol every network implements and rollouts rely on."""

import abc
from typing import Any

import equinox as eqx

from .._types import Array, Float, PRNGKey, Scalar

PolicyState = Any
"""Any pytree of arrays (None for a stateless policy)."""


class LesionError(ValueError):
    """A lesion the network has nothing to act on (one line naming it)."""


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

    def without_plasticity(self) -> "AbstractPolicy":
        """This network with its plasticity cut: the weights it learns within a
        lifetime stay those it is born with (the "plasticity" lesion of
        `eqxevo._src.nets.lesion`). Plastic networks override it.

        Raises:
            LesionError: the network has no plasticity.
        """
        raise LesionError(
            f"{type(self).__name__} has no plasticity to lesion (its weights do not "
            "change within a lifetime)"
        )

    def forget(self, state: PolicyState, initial: PolicyState) -> PolicyState:
        """`state` with its recurrent activity set back to `initial` (its value at
        birth), its plastic weights kept: what the "memory" lesion of
        `eqxevo._src.nets.lesion` does before every step. Recurrent networks override
        it.

        Raises:
            LesionError: the network has no recurrent state.
        """
        del state, initial
        raise LesionError(
            f"{type(self).__name__} has no recurrent state to lesion (nothing it "
            "computes carries over from one step to the next but plastic weights)"
        )


class AbstractStatelessPolicy(AbstractPolicy):
    """A policy without lifetime state: `initial_state` is None, and so is the
    state `__call__` receives and returns."""

    def initial_state(self, key: PRNGKey) -> None:
        del key
        return None


__all__ = ["AbstractPolicy", "AbstractStatelessPolicy", "LesionError", "PolicyState"]
