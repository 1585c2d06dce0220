"""Neuron models: leaky rate units (tanh) and leaky integrate-and-fire (LIF) units.

`rate_step` and `lif_step` are elementwise, so they also run on trailing batch axes.
"""

import equinox as eqx
import jax.numpy as jnp

from .._checks import positive_int, positive_number
from .._types import Array, Float, Int


def rate_step(
    potential: Float[Array, "neurons *#batch"],
    current: Float[Array, "neurons *#batch"],
    bias: Float[Array, "neurons *#batch"],
    tau: Float[Array, "neurons *#batch"],
    dt: float,
) -> tuple[Float[Array, "neurons *#batch"], Float[Array, "neurons *#batch"]]:
    """One Euler step of leaky rate units; returns `(potential, rate)`."""
    # tau below dt would overshoot (a > 1) and oscillate: it acts as tau = dt
    alpha = dt / jnp.maximum(tau, dt)
    potential = potential + alpha * (current + bias - potential)
    return potential, jnp.tanh(potential)


def lif_step(
    potential: Float[Array, "neurons *#batch"],
    refractory: Int[Array, "neurons *#batch"],
    current: Float[Array, "neurons *#batch"],
    bias: Float[Array, "neurons *#batch"],
    tau: Float[Array, "neurons *#batch"],
    dt: float,
    threshold: float,
    reset: float,
    refractory_steps: int,
) -> tuple[
    Float[Array, "neurons *#batch"],
    Int[Array, "neurons *#batch"],
    Float[Array, "neurons *#batch"],
]:
    """One step of LIF units; returns `(potential, refractory, spikes)`.

    `spikes` is 1.0 where a neuron fired this step and 0.0 elsewhere;
    `refractory` counts the steps a neuron still stays clamped at `reset`.
    """
    beta = jnp.exp(-dt / jnp.maximum(tau, dt))  # as rate_step: tau >= dt
    resting = refractory > 0
    integrated = beta * potential + (1.0 - beta) * (current + bias)
    fired = (integrated >= threshold) & ~resting  # a clamped neuron cannot fire
    reset_value = jnp.asarray(reset, potential.dtype)
    potential = jnp.where(resting | fired, reset_value, integrated)
    refractory = jnp.where(
        fired,
        jnp.asarray(refractory_steps, refractory.dtype),
        jnp.maximum(refractory - 1, 0),  # count down to 0 and stay there
    )
    return potential, refractory, fired.astype(potential.dtype)


class _Neurons(eqx.Module):
    """Per-neuron evolvable biases and time constants, and the step length."""

    bias: Float[Array, " neurons"]
    tau: Float[Array, " neurons"]
    dt: float = eqx.field(static=True)

    def __init__(self, num_neurons: int, *, tau: float, dt: float):
        num_neurons = positive_int("num_neurons", num_neurons)
        self.dt = positive_number("dt", dt)
        self.bias = jnp.zeros(num_neurons)
        self.tau = jnp.full(num_neurons, positive_number("tau", tau))

    @property
    def num_neurons(self) -> int:
        return self.bias.shape[0]


class RateNeurons(_Neurons):
    """Leaky tanh rate units (a continuous-time RNN) with evolvable biases and
    time constants, advanced by one Euler step:

        tau dv/dt = -v + I + b,    r = tanh(v)
        v' = v + a (-v + I + b),   a = dt / max(tau, dt)     (so 0 < a <= 1)

    (Beer 1995, "On the dynamics of small continuous-time recurrent neural
    networks").

    Arguments:
        num_neurons: N.
        tau: initial time constant of every neuron (same unit as `dt`).
        dt: the step length (static).

    Attributes:
        bias, tau: `[N]`, evolvable.
    """

    def __init__(self, num_neurons: int, *, tau: float = 2.0, dt: float = 1.0):
        super().__init__(num_neurons, tau=tau, dt=dt)

    def step(
        self,
        potential: Float[Array, "neurons *#batch"],
        current: Float[Array, "neurons *#batch"],
    ) -> tuple[Float[Array, "neurons *#batch"], Float[Array, "neurons *#batch"]]:
        """Advance one step: `(potential, current) -> (potential, rate)`."""
        return rate_step(potential, current, self.bias, self.tau, self.dt)


class LIFNeurons(_Neurons):
    """Leaky integrate-and-fire units with evolvable biases and membrane constants.

    Each step integrates `tau dv/dt = -v + I + b` exactly over the step, the
    input held constant (Gerstner et al. 2014, "Neuronal Dynamics", ch. 1):

        refractory (c > 0):  v' = v_reset, c' = c - 1, no spike
        otherwise:           v' = beta v + (1 - beta)(I + b),
                             beta = exp(-dt / max(tau, dt));
                             spike if v' >= threshold: v' = v_reset,
                             c' = refractory_steps

    with `refractory_steps = round(refractory_period / dt)` (0 disables it).

    Arguments:
        num_neurons: N.
        tau: initial membrane time constant (same unit as `dt`; default 20 ms).
        dt: the step length (default 1 ms).
        threshold, reset: firing threshold and reset potential (rest is 0).
        refractory_period: clamped time after a spike (rounded to whole steps).

    Attributes:
        bias, tau: `[N]`, evolvable.
    """

    threshold: float = eqx.field(static=True)
    reset: float = eqx.field(static=True)
    refractory_steps: int = eqx.field(static=True)

    def __init__(
        self,
        num_neurons: int,
        *,
        tau: float = 20.0,
        dt: float = 1.0,
        threshold: float = 1.0,
        reset: float = 0.0,
        refractory_period: float = 2.0,
    ):
        super().__init__(num_neurons, tau=tau, dt=dt)
        if not (isinstance(refractory_period, int | float) and refractory_period >= 0):
            raise ValueError(
                f"refractory_period must be >= 0; got {refractory_period!r}"
            )
        if not reset < threshold:
            raise ValueError(
                f"reset must be below threshold; got reset={reset!r}, "
                f"threshold={threshold!r}"
            )
        self.threshold, self.reset = float(threshold), float(reset)
        self.refractory_steps = round(refractory_period / self.dt)

    def step(
        self,
        potential: Float[Array, "neurons *#batch"],
        refractory: Int[Array, "neurons *#batch"],
        current: Float[Array, "neurons *#batch"],
    ) -> tuple[
        Float[Array, "neurons *#batch"],
        Int[Array, "neurons *#batch"],
        Float[Array, "neurons *#batch"],
    ]:
        """Advance one step: returns `(potential, refractory, spikes)`."""
        return lif_step(
            potential,
            refractory,
            current,
            self.bias,
            self.tau,
            self.dt,
            self.threshold,
            self.reset,
            self.refractory_steps,
        )


__all__ = ["LIFNeurons", "RateNeurons", "lif_step", "rate_step"]
