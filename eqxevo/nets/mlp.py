"""Dense feed-forward policy: an `eqx.nn.MLP` behind the policy protocol."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float, PRNGKey
from .base import AbstractPolicy


class MLPPolicy(AbstractPolicy):
    """A stateless multi-layer perceptron policy.

    Actions are `final_activation(mlp(obs))`, in [-1, 1] with the default tanh;
    environments map them to their own action space.

    Arguments:
        obs_size, action_size: input and output sizes.
        width: hidden units per layer.
        depth: number of hidden layers.
        activation, final_activation: hidden and output nonlinearities.
        key: initialisation key (keyword-only, last).

    Example:
        >>> policy = MLPPolicy(4, 2, width=32, depth=2, key=jr.key(0))
        >>> action, state = policy(obs, policy.initial_state(key))
    """

    mlp: eqx.nn.MLP
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        width: int = 32,
        depth: int = 2,
        activation: Callable[[Array], Array] = jnp.tanh,
        final_activation: Callable[[Array], Array] = jnp.tanh,
        *,
        key: PRNGKey,
    ):
        for name, value in (
            ("obs_size", obs_size),
            ("action_size", action_size),
            ("width", width),
        ):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        if not isinstance(depth, int) or depth < 0:
            raise ValueError(f"depth must be a non-negative int; got {depth!r}")
        self.obs_size = obs_size
        self.action_size = action_size
        self.mlp = eqx.nn.MLP(
            obs_size,
            action_size,
            width,
            depth,
            activation=activation,
            final_activation=final_activation,
            key=key,
        )

    def initial_state(self, key: PRNGKey) -> None:
        del key
        return None

    def __call__(
        self, obs: Float[Array, " obs"], state: None
    ) -> tuple[Float[Array, " action"], None]:
        return self.mlp(obs), state
