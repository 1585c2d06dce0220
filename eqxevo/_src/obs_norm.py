"""Observation normalisation: running moments of the observations a population
saw, and the agent that acts on observations scaled by them.

See docs/environments.md ("Observation normalisation") for when the moments are
updated, frozen and saved.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from ._types import Array, Float, PRNGKey, Scalar
from .nets.base import AbstractPolicy, PolicyState

CLIP = 10.0
"""A normalised observation is clipped to [-CLIP, CLIP] standard deviations."""

EPS = 1e-8
"""Added to the variance before its square root (a constant dimension)."""


class ObsMoments(eqx.Module):
    """Count, mean and sum of squared deviations (Welford's M2) of observations,
    per dimension, all float32.

    With a count of 0 the normalisation is the identity.
    """

    count: Float[Array, ""]
    mean: Float[Array, " obs"]
    m2: Float[Array, " obs"]

    @classmethod
    def zeros(cls, size: int) -> "ObsMoments":
        """No observation seen yet (`size` dimensions)."""
        return cls(
            jnp.zeros((), jnp.float32),
            jnp.zeros((size,), jnp.float32),
            jnp.zeros((size,), jnp.float32),
        )

    def add(self, obs: Float[Array, " obs"], weight: Array) -> "ObsMoments":
        """One observation more (Welford's update); `weight` 0 leaves them as
        they are (a step of a frozen environment)."""
        w = jnp.asarray(weight, jnp.float32)
        count = self.count + w
        delta = obs - self.mean
        # Each increment is computed before it is added (an optimisation
        # barrier): XLA would otherwise contract the multiply-adds into FMAs in
        # some programs and not others (a lifetime scanned whole or in chunks,
        # `_until_done`), and the moments would differ in their last bits.
        # A reciprocal, then products: XLA rewrites a division by a broadcast
        # value into such a product in some programs (not in others).
        inverse = 1.0 / jnp.maximum(count, 1.0)
        step = jax.lax.optimization_barrier(w * delta * inverse)
        mean = self.mean + step
        spread = jax.lax.optimization_barrier(w * delta * (obs - mean))
        m2 = self.m2 + spread
        # weight 0 leaves them exactly (0 * a non-finite observation would not)
        keep = w == 0
        return ObsMoments(
            count, jnp.where(keep, self.mean, mean), jnp.where(keep, self.m2, m2)
        )

    def merge(self, other: "ObsMoments") -> "ObsMoments":
        """The moments of both sets of observations (Chan et al.'s pairwise form)."""
        count = self.count + other.count
        safe = jnp.maximum(count, 1.0)
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / safe)
        m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / safe)
        return ObsMoments(count, mean, m2)

    @property
    def variance(self) -> Float[Array, " obs"]:
        """The population variance (1 where nothing has been seen)."""
        return jnp.where(self.count > 0, self.m2 / jnp.maximum(self.count, 1.0), 1.0)

    def normalize(self, obs: Float[Array, " obs"]) -> Float[Array, " obs"]:
        """`(obs - mean) / sqrt(variance + EPS)`, clipped to +-`CLIP`; `obs`
        itself before any observation has been counted."""
        scaled = (obs - self.mean) / jnp.sqrt(self.variance + EPS)
        return jnp.where(self.count > 0, jnp.clip(scaled, -CLIP, CLIP), obs)


def merge_stacked(moments: ObsMoments) -> ObsMoments:
    """One `ObsMoments` from a stack of them (leading axis: genomes or
    lifetimes), in one pass: the total count, the count-weighted mean and the
    within- plus between-group squared deviations. A group whose moments are
    not finite (a lifetime whose physics blew up) is left out."""
    finite = (
        jnp.isfinite(moments.count)
        & jnp.all(jnp.isfinite(moments.mean), axis=-1)
        & jnp.all(jnp.isfinite(moments.m2), axis=-1)
    )
    count = jnp.where(finite, moments.count, 0.0)
    mean_i = jnp.where(finite[:, None], moments.mean, 0.0)
    m2_i = jnp.where(finite[:, None], moments.m2, 0.0)
    total = jnp.sum(count)
    safe = jnp.maximum(total, 1.0)
    mean = jnp.sum(count[:, None] * mean_i, axis=0) / safe
    m2 = jnp.sum(m2_i + count[:, None] * (mean_i - mean) ** 2, axis=0)
    return ObsMoments(total, mean, m2)


class RunningObs(eqx.Module):
    """What a run with observation normalisation carries between generations
    (`StrategyState.evaluation`).

    Attributes:
        moments: the running moments of every observation the population has
            seen; the next generation acts on them.
        best: the moments the best genome so far was evaluated with (its agent
            is that genome with these).
    """

    moments: ObsMoments
    best: ObsMoments

    @classmethod
    def zeros(cls, size: int) -> "RunningObs":
        """Before the first generation."""
        return cls(ObsMoments.zeros(size), ObsMoments.zeros(size))


class NormalizedPolicy(AbstractPolicy):
    """A policy that acts on observations normalised by frozen moments: what a
    run with observation normalisation saves and evaluates held out (a genome
    saved without its normaliser is not the agent).

    Arguments:
        policy: the genome.
        moments: the moments it was evolved with, frozen.
    """

    policy: AbstractPolicy
    moments: ObsMoments
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(self, policy: AbstractPolicy, moments: ObsMoments):
        self.policy, self.moments = policy, moments
        self.obs_size, self.action_size = policy.obs_size, policy.action_size

    def initial_state(self, key: PRNGKey) -> PolicyState:
        return self.policy.initial_state(key)

    def __call__(
        self, obs: Float[Array, " obs"], state: PolicyState
    ) -> tuple[Float[Array, " action"], PolicyState]:
        return self.policy(self.moments.normalize(obs), state)

    def reinforce(self, reward: Scalar, state: PolicyState) -> PolicyState:
        return self.policy.reinforce(reward, state)

    def without_plasticity(self) -> "NormalizedPolicy":
        return NormalizedPolicy(self.policy.without_plasticity(), self.moments)

    def forget(self, state: PolicyState, initial: PolicyState) -> PolicyState:
        return self.policy.forget(state, initial)


def normalized(genome: Any, moments: ObsMoments | None) -> Any:
    """`genome` acting on normalised observations, or itself without moments."""
    return genome if moments is None else NormalizedPolicy(genome, moments)


__all__ = [
    "CLIP",
    "EPS",
    "NormalizedPolicy",
    "ObsMoments",
    "RunningObs",
    "merge_stacked",
    "normalized",
]
