"""Backpropamine on the sparse networks: `BackpropamineRule` and its lifetime state.

Miconi, Rawal, Clune & Stanley 2019, "Backpropamine: training self-modifying
neural networks with differentiable neuromodulated plasticity" (ICLR); the Hebbian
update is `backpropamine.neuromodulated_hebb`, shared with `PlasticMLPPolicy`.
"""

from collections.abc import Sequence
from typing import TypeVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from .._checks import int_at_least, one_of, positive_number
from .._types import Array, Float, Scalar
from .backpropamine import MODULATIONS, Modulation, neuromodulated_hebb
from .per_synapse import edge_sized, per_edge
from .propagate import AbstractLayout

_Rule = TypeVar("_Rule", bound="BackpropamineRule")


class BackpropamineState(eqx.Module):
    """The plastic part of a sparse network's lifetime state under backpropamine.

    Attributes:
        hebb: the Hebbian traces, in the layout's native shape (0 on masked-out
            entries), float32; zero at birth.
        eligibility: the eligibility traces (retroactive modulation), the same
            shape; None with simple modulation.
        rates: `[N]` the neurons' low-pass filtered spike trains (spiking
            networks); None in a rate network.
    """

    hebb: Float[Array, "..."]
    eligibility: Float[Array, "..."] | None
    rates: Float[Array, "..."] | None


class BackpropamineRule(eqx.Module):
    """Backpropamine for `SparseRatePolicy` and `SparseSpikingPolicy`.

    Every edge has a fixed weight and a plastic part (Miconi, Rawal, Clune &
    Stanley 2019, "Backpropamine: training self-modifying neural networks with
    differentiable neuromodulated plasticity", ICLR):

        w_eff[e] = w[e] + alpha[e] Hebb[e]                   this step's weights
        M(t)     = tanh(g a_mod + h)                         the neuromodulator
        Hebb[e] <- clip(Hebb[e] + M(t) pre[e] post[e], -B, B)    after the step

    alpha (one per edge slot), g and h are evolved; Hebb is lifetime state, zero
    at birth and kept within [-B, B] (B = `hebb_bound`). The network makes its
    own neuromodulator: a_mod is the activity of one of its neurons,
    `modulator`, which receives and sends edges like any other, so M(t) is a
    recurrent, leaky function of the whole network's state (the paper reads M(t)
    off the recurrent layer). pre and post are the activities at the two ends of
    an edge: in a rate network the rates, pre from the step before (the rate
    that drove this step's current) and post from this step, as `HebbianRule`
    uses them, and a_mod the modulator's rate; in a spiking network the
    neurons' low-pass filtered spike trains `r <- beta r + (1 - beta) s` (beta
    the readout's decay, exp(-dt / readout_tau)), pre before this step's spikes
    and post after, and a_mod the modulator's filtered train. Rates, not spike
    pairs: the paper's Hebbian term is a product of activities, and a spike
    pair in one step almost never happens (an edge delivers its spike a step
    later); the filtered train is the rate estimate a rate-based Hebbian rule
    uses for spiking neurons (Gerstner, Kistler, Naud & Paninski 2014, "Neuronal
    Dynamics", ch. 19).

    With `modulation = "retroactive"` M(t) acts on an eligibility trace E
    instead (`Hebb <- clip(Hebb + M(t) E)`, `E <- (1 - eta) E + eta pre post`,
    eta evolved), as in `neuromodulated_hebb`.

    Arguments:
        modulator: the modulator neuron's id; None (default): the neuron just
            below the output neurons' default block, `N - action_size - 1`.
        hebb_bound: B (the paper: 1).
        modulation: "simple" or "retroactive".
        alpha_init: the initial alpha of every edge (a number, or one per edge
            slot); 0: the initial genome acts as the non-plastic network.
        trace_rate: the initial eta in [0, 1] (retroactive only).

    Example:
        >>> rule = BackpropamineRule(modulator=5)
        >>> policy = SparseRatePolicy(3, 2, topology, plasticity=rule, key=key)
    """

    alpha: Float[Array, "..."]
    modulator_gain: Scalar
    modulator_bias: Scalar
    trace_rate: Scalar | None
    modulator: int | None = eqx.field(static=True)
    hebb_bound: float = eqx.field(static=True)
    modulation: Modulation = eqx.field(static=True)

    def __init__(
        self,
        *,
        modulator: int | None = None,
        hebb_bound: float = 1.0,
        modulation: Modulation = "simple",
        alpha_init: float | Sequence[float] | ArrayLike = 0.0,
        trace_rate: float = 0.1,
    ):
        self.modulator = (
            None if modulator is None else int_at_least("modulator", modulator, 0)
        )
        self.hebb_bound = positive_number("hebb_bound", hebb_bound)
        self.modulation = one_of("modulation", modulation, MODULATIONS)
        self.alpha = per_edge("alpha_init")(alpha_init)
        rate = per_edge("trace_rate")(trace_rate)
        if rate.ndim != 0 or not 0.0 <= float(rate) <= 1.0:
            raise ValueError(
                f"trace_rate must be a number in [0, 1]; got {trace_rate!r}"
            )
        self.trace_rate = rate if modulation == "retroactive" else None
        # M(t) = tanh(a_mod) at birth: a silent modulator means no learning
        self.modulator_gain = jnp.ones((), jnp.float32)
        self.modulator_bias = jnp.zeros((), jnp.float32)

    def for_edges(self: _Rule, num_edges: int) -> _Rule:
        """The rule for a network of `num_edges` edge slots (alpha `[E]`)."""
        alpha = edge_sized("alpha_init", self.alpha, num_edges)
        return eqx.tree_at(lambda r: r.alpha, self, alpha)

    def modulator_id(self, num_neurons: int, action_size: int) -> int:
        """The modulator neuron of a network of `num_neurons` with `action_size`
        outputs.

        Raises:
            ValueError: it is not a neuron id in [0, num_neurons).
        """
        default = self.modulator is None
        neuron = num_neurons - action_size - 1 if default else self.modulator
        assert neuron is not None
        if not 0 <= neuron < num_neurons:
            what = f"the default N - action_size - 1 = {neuron}" if default else neuron
            raise ValueError(
                f"plasticity.modulator ({what}) is not a neuron id in "
                f"[0, {num_neurons})"
            )
        return neuron

    def initial_state(
        self, layout: AbstractLayout, num_neurons: int | None = None
    ) -> BackpropamineState:
        """Hebb (and E) zero: nothing learned yet; `num_neurons` for the spiking
        networks' filtered spike trains (zero too), None in a rate network."""
        zeros = jnp.zeros(layout.native_shape)
        return BackpropamineState(
            hebb=zeros,
            eligibility=zeros if self.modulation == "retroactive" else None,
            rates=None if num_neurons is None else jnp.zeros(num_neurons),
        )

    # -- population-last (a trailing batch axis B on every array) -----------------

    def weights(
        self, layout: AbstractLayout, fixed: Array, state: BackpropamineState
    ) -> Array:
        """This step's native weights `w + alpha Hebb`, from the native fixed ones."""
        # alpha is the genome's, loop invariant inside a rollout's scan: the
        # barrier lets XLA hoist its conversion out of the loop (as the weights')
        alpha = lax.optimization_barrier(layout.to_native(self.alpha))
        return fixed + alpha * state.hebb

    def step(
        self,
        layout: AbstractLayout,
        state: BackpropamineState,
        pre: Array,
        post: Array,
        activity: Array,
    ) -> BackpropamineState:
        """The state after a step: M(t) from the modulator's `activity` `[B]`,
        the Hebbian update from `pre`, `post` (as `layout.pre`, `layout.post`)."""
        modulator = jnp.tanh(self.modulator_gain * activity + self.modulator_bias)
        # padding slots gather real neurons: their co-activity is masked out, so
        # their Hebb (and E) stay 0
        mask = layout.native_mask()[..., None]
        coactivity = jnp.where(mask, pre * post, jnp.zeros((), pre.dtype))
        rate = None if self.trace_rate is None else jnp.clip(self.trace_rate, 0.0, 1.0)
        hebb, eligibility = neuromodulated_hebb(
            state.hebb, coactivity, modulator, self.hebb_bound, state.eligibility, rate
        )
        return BackpropamineState(hebb, eligibility, state.rates)

    def spiking_step(
        self,
        layout: AbstractLayout,
        state: BackpropamineState,
        spikes: Array,
        decay: float,
        modulator: int,
    ) -> BackpropamineState:
        """`step` for a spiking network: pre, post and the modulator's activity
        from the filtered spike trains, which take in this step's `spikes`."""
        previous = state.rates
        assert previous is not None
        rates = decay * previous + (1.0 - decay) * spikes
        pre, post = layout.pre(previous), layout.post(rates)
        state = self.step(layout, state, pre, post, rates[modulator])
        return BackpropamineState(state.hebb, state.eligibility, rates)


__all__ = ["BackpropamineRule", "BackpropamineState"]
