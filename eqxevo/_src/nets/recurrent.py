"""`RecurrentPolicy`: a dense leaky tanh RNN with a linear tanh readout."""

import math

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import positive_int, positive_number
from .._types import Array, Float, PRNGKey
from .base import AbstractPolicy


class RecurrentState(eqx.Module):
    """Lifetime state of a `RecurrentPolicy`: the hidden vector `[hidden]`."""

    hidden: Array


class RecurrentPolicy(AbstractPolicy):
    """A fully connected recurrent policy; every weight is evolvable.

        h' = (1 - a) h + a tanh(W h + U obs + b),   a = dt / max(tau, dt)
        action = tanh(V h' + c)

    With `tau == dt` (a = 1) this is an Elman network (Elman 1990, "Finding
    structure in time"); a larger `tau` makes the hidden units leaky integrators
    (a discretised continuous-time RNN; Beer 1995).

    Arguments:
        obs_size, action_size: observation and action sizes.
        hidden_size: number of recurrent units.
        tau, dt: time constant and step; `a = dt / max(tau, dt)` (default 1: Elman).
        gain: recurrent weights start as `gain * N(0, 1) / sqrt(hidden_size)`.
        key: initialisation key (keyword-only, last).

    Example:
        >>> policy = RecurrentPolicy(4, 2, 32, key=jr.key(0))
        >>> action, state = policy(obs, policy.initial_state(jr.key(1)))
    """

    recurrent_weight: Float[Array, "hidden hidden"]
    input_weight: Float[Array, "hidden obs"]
    bias: Float[Array, " hidden"]
    readout_weight: Float[Array, "action hidden"]
    readout_bias: Float[Array, " action"]
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    leak: float = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        hidden_size: int = 32,
        *,
        tau: float = 1.0,
        dt: float = 1.0,
        gain: float = 0.9,
        key: PRNGKey,
    ):
        obs_size = positive_int("obs_size", obs_size)
        action_size = positive_int("action_size", action_size)
        hidden_size = positive_int("hidden_size", hidden_size)
        tau, dt = positive_number("tau", tau), positive_number("dt", dt)
        rkey, ikey, okey = jr.split(key, 3)
        self.recurrent_weight = (
            gain / math.sqrt(hidden_size) * jr.normal(rkey, (hidden_size, hidden_size))
        )
        # 1/sqrt(fan-in) scales: unit-variance inputs give unit-variance drive
        self.input_weight = jr.normal(ikey, (hidden_size, obs_size)) / math.sqrt(
            obs_size
        )
        self.bias = jnp.zeros(hidden_size)
        self.readout_weight = jr.normal(okey, (action_size, hidden_size)) / math.sqrt(
            hidden_size
        )
        self.readout_bias = jnp.zeros(action_size)
        self.obs_size, self.action_size = obs_size, action_size
        # static: tau and dt are configuration, not evolved
        self.leak = dt / max(tau, dt)

    @property
    def hidden_size(self) -> int:
        return self.bias.shape[0]

    def forget(self, state: RecurrentState, initial: RecurrentState) -> RecurrentState:
        del state  # the hidden vector is all it remembers
        return initial

    def initial_state(self, key: PRNGKey) -> RecurrentState:
        del key
        return RecurrentState(jnp.zeros(self.hidden_size))

    def __call__(
        self, obs: Float[Array, " obs"], state: RecurrentState
    ) -> tuple[Float[Array, " action"], RecurrentState]:
        drive = self.recurrent_weight @ state.hidden + self.input_weight @ obs
        hidden = (1.0 - self.leak) * state.hidden + self.leak * jnp.tanh(
            drive + self.bias
        )
        action = jnp.tanh(self.readout_weight @ hidden + self.readout_bias)
        return action, RecurrentState(hidden)


__all__ = ["RecurrentPolicy", "RecurrentState"]
