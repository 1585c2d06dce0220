"""QD test tasks: fitness functions that return `(fitness, descriptor)`."""

import jax.numpy as jnp

from .._types import Array, Float, PRNGKey


def arm(angles: Float[Array, " dof"]) -> tuple[Float[Array, ""], Float[Array, "2"]]:
    """The planar arm of QDax (`qdax.tasks.arm.arm`, after fast_map-elites): each
    value in [0, 1] (clipped) is a joint angle; the fitness is minus the angles'
    standard deviation, the descriptor the end effector's position in [0, 1]^2
    (arm centred at (0.5, 0.5), its links 1 / (2 dof) long)."""
    x = jnp.clip(angles, 0, 1)
    dof = x.shape[0]
    spread = jnp.sqrt(jnp.mean(jnp.square(x - jnp.mean(x))))
    cumulative = jnp.cumsum(2 * jnp.pi * x - jnp.pi)
    position = jnp.stack(
        [
            jnp.sum(jnp.cos(cumulative)) / (2 * dof) + 0.5,
            jnp.sum(jnp.sin(cumulative)) / (2 * dof) + 0.5,
        ]
    )
    return -spread, position


def arm_fitness(
    angles: Float[Array, " dof"], key: PRNGKey
) -> tuple[Float[Array, ""], Float[Array, "2"]]:
    """`arm` as a fitness function for `evolve` (the key is unused)."""
    del key
    return arm(angles)


__all__ = ["arm", "arm_fitness"]
