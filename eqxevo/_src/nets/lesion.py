"""Lesions: an evolved network with its plasticity cut or its memory wiped every
step, to measure what each carries of its score (`eqxevo eval --lesion`)."""

from typing import Any

import equinox as eqx

from .._checks import one_of
from .._types import Array, Float, PRNGKey, Scalar
from .base import AbstractPolicy, LesionError, PolicyState

LESIONS = ("plasticity", "memory")
"""What a lesion cuts: "plasticity" (`AbstractPolicy.without_plasticity`: the
weights stay those it is born with; alpha = 0 for backpropamine) or "memory"
(`AbstractPolicy.forget` before every step: its recurrent activity reset, its
plastic weights kept)."""


class MemoryLesioned(AbstractPolicy):
    """`policy` whose recurrent activity is reset to its value at birth before
    every step: its lifetime state is `(state, state at birth)`.

    Attributes:
        policy: the network lesioned.
    """

    policy: AbstractPolicy
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(self, policy: AbstractPolicy):
        if type(policy).forget is AbstractPolicy.forget:
            policy.forget(None, None)  # raises LesionError, naming the network
        self.policy = policy
        self.obs_size, self.action_size = policy.obs_size, policy.action_size

    def initial_state(self, key: PRNGKey) -> tuple[PolicyState, PolicyState]:
        born = self.policy.initial_state(key)
        return born, born

    def __call__(
        self, obs: Float[Array, " obs"], state: tuple[PolicyState, PolicyState]
    ) -> tuple[Float[Array, " action"], tuple[PolicyState, PolicyState]]:
        current, born = state
        action, current = self.policy(obs, self.policy.forget(current, born))
        return action, (current, born)

    def reinforce(
        self, reward: Scalar, state: tuple[PolicyState, PolicyState]
    ) -> tuple[PolicyState, PolicyState]:
        current, born = state
        return self.policy.reinforce(reward, current), born


def lesion(policy: Any, what: str) -> AbstractPolicy:
    """`policy` with `what` ("plasticity" or "memory") cut (see `LESIONS`).

    Raises:
        LesionError: the network has nothing for the lesion to act on (no
            plasticity, no recurrent state), or is not an `AbstractPolicy`.
    """
    one_of("lesion", what, LESIONS)
    if not isinstance(policy, AbstractPolicy):
        raise LesionError(
            f"a {what} lesion needs an eqxevo network (AbstractPolicy); got "
            f"{type(policy).__name__}"
        )
    if what == "plasticity":
        return policy.without_plasticity()
    return MemoryLesioned(policy)


__all__ = ["LESIONS", "LesionError", "MemoryLesioned", "lesion"]
