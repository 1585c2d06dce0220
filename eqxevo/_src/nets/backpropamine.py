"""Backpropamine: neuromodulated Hebbian plasticity, and `PlasticMLPPolicy`.

Miconi, Rawal, Clune & Stanley 2019, "Backpropamine: training self-modifying
neural networks with differentiable neuromodulated plasticity" (ICLR).
"""

import math
from collections.abc import Callable, Sequence
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr

from .._checks import int_at_least, one_of, positive_number
from .._types import Array, Float, PRNGKey, Scalar
from .base import AbstractPolicy
from .mlp import MLPPolicy

Modulation = Literal["simple", "retroactive"]
MODULATIONS: tuple[str, ...] = ("simple", "retroactive")


def neuromodulated_hebb(
    hebb: Float[Array, "*#shape"],
    coactivity: Float[Array, "*#shape"],
    modulator: Float[Array, "*#mshape"],
    bound: float,
    eligibility: Float[Array, "*#shape"] | None = None,
    trace_rate: Float[Array, "*#mshape"] | None = None,
) -> tuple[Float[Array, "*#shape"], Float[Array, "*#shape"] | None]:
    """One step of backpropamine's Hebbian trace (Miconi et al. 2019, eqs. 3-6).

    Simple neuromodulation (`eligibility` None):

        Hebb <- clip(Hebb + M(t) pre post, -bound, bound)

    Retroactive neuromodulation (an eligibility trace E and its rate eta):

        Hebb <- clip(Hebb + M(t) E, -bound, bound)
        E    <- (1 - eta) E + eta pre post

    Arguments:
        hebb: the Hebbian trace, any shape.
        coactivity: `pre post` per synapse, the shape of `hebb` (an outer
            product for a dense layer).
        modulator: M(t), a scalar (or one per genome, broadcasting against
            the trailing axis of `hebb`: the sparse networks' population-last
            step).
        bound: Hebb stays within [-bound, bound].
        eligibility: E (retroactive), or None (simple).
        trace_rate: eta in [0, 1] (retroactive only; shaped as `modulator`).

    Returns:
        `(hebb, eligibility)` after the step (`eligibility` None when simple).
    """
    if eligibility is None:
        return jnp.clip(hebb + modulator * coactivity, -bound, bound), None
    if trace_rate is None:
        raise ValueError("retroactive neuromodulation needs trace_rate (eta)")
    hebb = jnp.clip(hebb + modulator * eligibility, -bound, bound)
    eligibility = (1.0 - trace_rate) * eligibility + trace_rate * coactivity
    return hebb, eligibility


class PlasticMLPState(eqx.Module):
    """Lifetime state of a `PlasticMLPPolicy`, one entry per plastic layer.

    Attributes:
        hebb: the Hebbian traces, each `(in, out)` like its layer's weights.
        eligibility: the eligibility traces (retroactive modulation), the same
            shapes; an empty tuple with simple modulation.
    """

    hebb: tuple[Float[Array, "_in _out"], ...]
    eligibility: tuple[Float[Array, "_in _out"], ...]


def _plastic_layers(layers: Sequence[int] | None, num_layers: int) -> tuple[int, ...]:
    if layers is None:
        return tuple(range(num_layers))
    if isinstance(layers, str) or not isinstance(layers, Sequence):
        raise ValueError(
            f"layers must be a list of layer indices (0 ... {num_layers - 1}, or "
            f"negative from the end); got {layers!r}"
        )
    out = []
    for layer in layers:
        index = int_at_least("layers entry", layer, -num_layers)
        if index >= num_layers:
            raise ValueError(
                f"layers entry must be < {num_layers} (the network has {num_layers} "
                f"layers: depth + 1); got {layer!r}"
            )
        out.append(index % num_layers)
    if not out or len(set(out)) != len(out):
        raise ValueError(
            f"layers must name at least one layer, each once; got {layers!r}"
        )
    return tuple(sorted(out))


def _finite(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number; got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value!r}")
    return float(value)


class PlasticMLPPolicy(AbstractPolicy):
    """An MLP whose weights learn within a lifetime: backpropamine plasticity.

    Each plastic layer uses a fixed weight plus a plastic part (Miconi et al.
    2019, "Backpropamine: training self-modifying neural networks with
    differentiable neuromodulated plasticity", ICLR):

        h_out = activation(h_in @ (W + alpha * Hebb) + b)
        M(t) = tanh(h_last @ m + m_0)
        Hebb <- clip(Hebb + M(t) outer(h_in, h_out), -hebb_bound, hebb_bound)

    W and b (`mlp`, an `MLPPolicy`), the per-synapse plasticity coefficients
    alpha (the shape of W) and the modulator weights `m`, `m_0` are evolved;
    Hebb is lifetime state, zero at birth. The neuromodulator M(t) is an extra
    output unit of the last layer (its weights are not plastic), read from that
    layer's input `h_last` and left out of the action: the network decides when
    and in which direction it learns. Hebb is updated after the step's forward
    pass, from this step's pre- and post-synaptic activity, so it acts from the
    next step on. With `modulation = "retroactive"` M(t) acts on a decaying
    eligibility trace instead (`neuromodulated_hebb`). The network has no
    recurrence: its only memory is Hebb.

    The paper makes the recurrent layer of an RNN plastic and keeps the input
    and output layers fixed; a feed-forward network has no recurrent layer, so
    `layers` says which are plastic (default: all, the output layer included).
    Unlike the paper's code, M(t) reaches every synapse unscaled (no per-neuron
    "fan-out" weights: alpha already scales and signs each synapse).

    Arguments:
        obs_size, action_size, width, depth, activation, final_activation: as
            `MLPPolicy` (W and b are the `MLPPolicy` built from the first half
            of `key`).
        layers: indices of the plastic layers (0 reads the observation, `depth`
            is the output layer; negative counts from the end); None: all.
        hebb_bound: Hebb stays within [-hebb_bound, hebb_bound] (the paper: 1).
        modulation: "simple" or "retroactive" (eligibility trace).
        alpha_init: the initial value of every alpha (0: the initial genome
            acts as its `MLPPolicy`).
        trace_rate: the initial eligibility rate eta, in [0, 1] (retroactive
            only; evolved, clipped to [0, 1] when used).
        key: initialisation key (keyword-only, last).

    Example:
        >>> policy = PlasticMLPPolicy(4, 2, width=16, depth=1, key=jr.key(0))
        >>> action, state = policy(obs, policy.initial_state(jr.key(1)))
    """

    mlp: MLPPolicy
    alpha: tuple[Float[Array, "_in _out"], ...]
    modulator_weight: Float[Array, " hidden"]
    modulator_bias: Scalar
    trace_rate: Scalar | None
    layers: tuple[int, ...] = eqx.field(static=True)
    hebb_bound: float = eqx.field(static=True)
    modulation: Modulation = eqx.field(static=True)
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
        layers: Sequence[int] | None = None,
        hebb_bound: float = 1.0,
        modulation: Modulation = "simple",
        alpha_init: float = 0.0,
        trace_rate: float = 0.1,
        key: PRNGKey,
    ):
        # the plastic arguments are checked before anything is drawn
        num_layers = int_at_least("depth", depth, 0) + 1
        self.layers = _plastic_layers(layers, num_layers)
        self.hebb_bound = positive_number("hebb_bound", hebb_bound)
        self.modulation = one_of("modulation", modulation, MODULATIONS)
        alpha_init = _finite("alpha_init", alpha_init)
        rate = _finite("trace_rate", trace_rate)
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"trace_rate must be in [0, 1]; got {trace_rate!r}")
        mlp_key, modulator_key = jr.split(key)
        self.mlp = MLPPolicy(
            obs_size,
            action_size,
            width,
            depth,
            activation,
            final_activation,
            key=mlp_key,
        )
        self.obs_size, self.action_size = self.mlp.obs_size, self.mlp.action_size
        weights = self.mlp.weights
        self.alpha = tuple(
            jnp.full(weights[i].shape, alpha_init, weights[i].dtype)
            for i in self.layers
        )
        # the modulator: one more output unit of the last layer, initialised as
        # `eqx.nn.Linear` initialises it
        readout = eqx.nn.Linear(weights[-1].shape[0], 1, key=modulator_key)
        assert readout.bias is not None  # use_bias=True
        self.modulator_weight, self.modulator_bias = readout.weight[0], readout.bias[0]
        retroactive = self.modulation == "retroactive"
        self.trace_rate = jnp.asarray(rate, jnp.float32) if retroactive else None

    def without_plasticity(self) -> "PlasticMLPPolicy":
        """alpha = 0: the Hebbian traces still change but act on nothing (the
        network is its MLP, bit for bit)."""
        return eqx.tree_at(
            lambda p: p.alpha, self, tuple(jnp.zeros_like(a) for a in self.alpha)
        )

    def initial_state(self, key: PRNGKey) -> PlasticMLPState:
        """Every Hebbian (and eligibility) trace zero: nothing learned yet."""
        del key
        zeros = tuple(jnp.zeros_like(a) for a in self.alpha)
        return PlasticMLPState(
            hebb=zeros, eligibility=zeros if self.modulation == "retroactive" else ()
        )

    def __call__(
        self, obs: Float[Array, " obs"], state: PlasticMLPState
    ) -> tuple[Float[Array, " action"], PlasticMLPState]:
        mlp = self.mlp
        plastic = {layer: k for k, layer in enumerate(self.layers)}
        last = len(mlp.weights) - 1
        h, h_last = obs, obs
        coactivity = []
        for i, (weight, bias) in enumerate(zip(mlp.weights, mlp.biases, strict=True)):
            k = plastic.get(i)
            if i == last:
                h_last = h
            if k is not None:
                weight = weight + self.alpha[k] * state.hebb[k]
            out = h @ weight + bias
            out = mlp.final_activation(out) if i == last else mlp.activation(out)
            if k is not None:
                coactivity.append(jnp.outer(h, out))
            h = out
        modulator = jnp.tanh(h_last @ self.modulator_weight + self.modulator_bias)
        # trace_rate is None exactly when modulation is "simple"
        rate = None if self.trace_rate is None else jnp.clip(self.trace_rate, 0.0, 1.0)
        hebb, eligibility = [], []
        for k, c in enumerate(coactivity):
            trace = None if rate is None else state.eligibility[k]
            new_hebb, trace = neuromodulated_hebb(
                state.hebb[k], c, modulator, self.hebb_bound, trace, rate
            )
            hebb.append(new_hebb)
            if trace is not None:
                eligibility.append(trace)
        return h, PlasticMLPState(tuple(hebb), tuple(eligibility))


__all__ = [
    "MODULATIONS",
    "Modulation",
    "PlasticMLPPolicy",
    "PlasticMLPState",
    "neuromodulated_hebb",
]
