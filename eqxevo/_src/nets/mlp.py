"""`MLPPolicy`: a stateless dense feed-forward policy."""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp

from .._checks import int_at_least, positive_int
from .._types import Array, Float, PRNGKey
from .base import AbstractStatelessPolicy


class MLPPolicy(AbstractStatelessPolicy):
    """A stateless multi-layer perceptron policy.

    Actions are `final_activation(mlp(obs))`, in [-1, 1] with the default tanh;
    environments map them to their own action space. Layer `i` computes
    `activation(h @ weights[i] + biases[i])`, with `weights[i]` of shape
    (in, out). Initial weights and biases are those of `eqx.nn.MLP` built with
    the same arguments and key (uniform in ±1/sqrt(in)), transposed.

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

    weights: tuple[Float[Array, "in out"], ...]
    biases: tuple[Float[Array, " out"], ...]
    activation: Callable[[Array], Array]
    final_activation: Callable[[Array], Array]
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
        self.obs_size = positive_int("obs_size", obs_size)
        self.action_size = positive_int("action_size", action_size)
        width = positive_int("width", width)
        depth = int_at_least("depth", depth, 0)
        mlp = eqx.nn.MLP(obs_size, action_size, width, depth, key=key)
        # Stored (in, out) and applied as `h @ W + b` (flax's Dense), not (out,
        # in) with `W @ h` (Equinox's Linear): under the population vmap that is
        # about 20% cheaper per Pendulum-v1 step on XLA:CPU (docs/environments.md,
        # "Harder gymnax tasks").
        self.weights = tuple(layer.weight.T for layer in mlp.layers)
        self.biases = tuple(
            layer.bias if layer.bias is not None else jnp.zeros(layer.out_features)
            for layer in mlp.layers
        )
        self.activation = activation
        self.final_activation = final_activation

    def __call__(
        self, obs: Float[Array, " obs"], state: None
    ) -> tuple[Float[Array, " action"], None]:
        h = obs
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ weight + bias
            h = self.final_activation(h) if i == last else self.activation(h)
        return h, state


__all__ = ["MLPPolicy"]
