"""`GRUPolicy`: a gated recurrent unit (`eqx.nn.GRUCell`) with a linear tanh readout."""

import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import positive_int
from .._types import Array, Float, PRNGKey
from .base import AbstractPolicy


class GRUState(eqx.Module):
    """Lifetime state of a `GRUPolicy`: the hidden vector `[hidden]`."""

    hidden: Array


class GRUPolicy(AbstractPolicy):
    """A GRU policy (Cho et al. 2014, "Learning phrase representations using RNN
    encoder-decoder for statistical machine translation"); every weight evolvable.

        r = sigmoid(W_r obs + b_r + U_r h)
        z = sigmoid(W_z obs + b_z + U_z h)
        n = tanh(W_n obs + b_n + r * (U_n h + b_hn))
        h' = n + z * (h - n)   (= (1 - z) n + z h)
        action = tanh(V h' + c)

    The cell is Equinox's `eqx.nn.GRUCell` (its weights and initialisation);
    the hidden state is zero at the start of every lifetime; the readout is
    `RecurrentPolicy`'s.

    Arguments:
        obs_size, action_size: observation and action sizes.
        hidden_size: number of GRU units.
        key: initialisation key (keyword-only, last).

    Example:
        >>> policy = GRUPolicy(4, 2, 32, key=jr.key(0))
        >>> action, state = policy(obs, policy.initial_state(jr.key(1)))
    """

    cell: eqx.nn.GRUCell
    readout_weight: Float[Array, "action hidden"]
    readout_bias: Float[Array, " action"]
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)

    def __init__(
        self, obs_size: int, action_size: int, hidden_size: int = 32, *, key: PRNGKey
    ):
        obs_size = positive_int("obs_size", obs_size)
        action_size = positive_int("action_size", action_size)
        hidden_size = positive_int("hidden_size", hidden_size)
        cell_key, readout_key = jr.split(key)
        self.cell = eqx.nn.GRUCell(obs_size, hidden_size, key=cell_key)
        # 1/sqrt(fan-in), as RecurrentPolicy's readout
        self.readout_weight = jr.normal(
            readout_key, (action_size, hidden_size)
        ) / math.sqrt(hidden_size)
        self.readout_bias = jnp.zeros(action_size)
        self.obs_size, self.action_size = obs_size, action_size

    @property
    def hidden_size(self) -> int:
        return self.cell.hidden_size

    def forget(self, state: GRUState, initial: GRUState) -> GRUState:
        del state  # the hidden vector is all it remembers
        return initial

    def initial_state(self, key: PRNGKey) -> GRUState:
        del key
        return GRUState(jnp.zeros(self.hidden_size))

    def __call__(
        self, obs: Float[Array, " obs"], state: GRUState
    ) -> tuple[Float[Array, " action"], GRUState]:
        hidden = self.cell(obs, state.hidden)
        action = jnp.tanh(self.readout_weight @ hidden + self.readout_bias)
        return action, GRUState(hidden)


__all__ = ["GRUPolicy", "GRUState"]
