"""Sparse rate and spiking policies: a `Topology`, a layout, neurons and plasticity.

See docs/networks.md ("Sparse policies") for one step and what the genome holds.
"""

import abc
import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jax import lax

from .._checks import positive_int, positive_number
from .._types import Array, Float, PRNGKey, Scalar
from .base import AbstractPolicy
from .batching import population_last
from .fused import PallasLayout
from .layouts import make_layout
from .neurons import LIFNeurons, RateNeurons
from .per_synapse import PerSynapseHebbianRule
from .plasticity import (
    AbstractRule,
    HebbianRule,
    PlasticState,
    STDPRule,
    plastic_step,
    reinforce_step,
    settle_step,
)
from .propagate import AbstractLayout
from .sparse_backpropamine import BackpropamineRule, BackpropamineState
from .topology import Topology
from .wiring import external_current, inject, neuron_ids, read_out

RateRule = HebbianRule | PerSynapseHebbianRule | BackpropamineRule
"""The plasticity rules of `SparseRatePolicy`."""
SpikingRule = STDPRule | BackpropamineRule
"""The plasticity rules of `SparseSpikingPolicy`."""
Plastic = PlasticState | BackpropamineState


class SparseRateState(eqx.Module):
    """Lifetime state of a `SparseRatePolicy`.

    Attributes:
        potential: `[N]` membrane potentials.
        rate: `[N]` rates, `tanh(potential)`.
        plastic: `PlasticState` (three-factor rules) or `BackpropamineState`
            for a plastic network, else None.
    """

    potential: Array
    rate: Array
    plastic: Plastic | None


class SparseSpikingState(eqx.Module):
    """Lifetime state of a `SparseSpikingPolicy`.

    Attributes:
        potential: `[N]` membrane potentials.
        refractory: `[N]` int32 steps left in the refractory period.
        spikes: `[N]` this step's spikes (0.0 / 1.0).
        readout: `[action]` low-pass filtered spikes of the output neurons.
        pre_trace, post_trace: `[N]` STDP spike traces (STDP only, else None).
        plastic: `PlasticState` (STDP) or `BackpropamineState` for a plastic
            network, else None.
    """

    potential: Array
    refractory: Array
    spikes: Array
    readout: Array
    pre_trace: Array | None
    post_trace: Array | None
    plastic: Plastic | None


# -- shared helpers ---------------------------------------------------------------


def _check_rule(rule: Any, expected: tuple[type, ...], num_neurons: int) -> None:
    if rule is None:
        return
    if not isinstance(rule, expected):
        names = ", ".join(t.__name__ for t in expected)
        raise TypeError(
            f"plasticity must be one of {names} or None; got {type(rule).__name__}"
        )
    if rule.modulator is not None and rule.modulator >= num_neurons:
        raise ValueError(
            f"plasticity.modulator={rule.modulator} is not a neuron id in "
            f"[0, {num_neurons})"
        )


def _check_fusable(rule: Any, layout: AbstractLayout) -> None:
    """The fused kernel runs `HebbianRule` and `STDPRule` with modulation "reward"
    or "neuron"; any other rule on it is refused."""
    if not isinstance(layout, PallasLayout) or rule is None:
        return
    if isinstance(rule, HebbianRule | STDPRule) and rule.modulation != "none":
        return
    what = type(rule).__name__
    if isinstance(rule, AbstractRule):
        what += f" with modulation={rule.modulation!r}"
    raise ValueError(
        f"layout='pallas' (the fused kernel) runs HebbianRule and STDPRule with "
        f"modulation 'reward' or 'neuron'; got {what}: use layout 'auto', "
        "'segment', 'gather' or 'dense'"
    )


def _split(policy: eqx.Module) -> tuple[Any, Any]:
    """Index leaves (integer/boolean arrays: the layout) vs everything else."""
    return eqx.partition(
        policy, lambda x: eqx.is_array(x) and not eqx.is_inexact_array(x)
    )


def _trailing_step(index: Any, data: Any) -> tuple[Array, Any]:
    genome, obs, state = data
    policy: AbstractSparsePolicy[Any] = eqx.combine(index, genome)
    return policy._trailing_step(obs, state)


# -- the shared part of both policies -------------------------------------------

RuleT = TypeVar("RuleT", bound=AbstractRule | BackpropamineRule)


class AbstractSparsePolicy(AbstractPolicy, Generic[RuleT]):
    """A sparse recurrent network on a `Topology`: what rate and spiking ones share.

    Observations drive the input neurons `input_ids` as an external current
    `input_weight * obs`; actions are read from the output neurons `output_ids`.
    The genome holds the initial edge weights `[E]` in edge-list order, whatever
    the layout; the layout's index arrays are integer leaves, shared by a
    population. A subclass provides `_trailing_step`, one step with a trailing
    population axis on every array (see `batching.population_last`).
    """

    weights: Float[Array, " edges"]
    input_weight: Float[Array, " obs"]
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    input_ids: tuple[int, ...] = eqx.field(static=True)
    output_ids: tuple[int, ...] = eqx.field(static=True)
    layout: eqx.AbstractVar[AbstractLayout]
    rule: eqx.AbstractVar[RuleT | None]

    def _init_io(
        self,
        obs_size: int,
        action_size: int,
        input_ids: Sequence[int] | None,
        output_ids: Sequence[int] | None,
        n: int,
    ) -> None:
        """Set the sizes and the input/output neurons (called by `__init__`)."""
        self.obs_size = positive_int("obs_size", obs_size)
        self.action_size = positive_int("action_size", action_size)
        self.input_ids = neuron_ids(
            "input_ids", input_ids, range(obs_size), n, obs_size
        )
        self.output_ids = neuron_ids(
            "output_ids", output_ids, range(n - action_size, n), n, action_size
        )

    def _init_edges(
        self,
        topology: Topology,
        layout: str,
        plasticity: RuleT | None,
        rule_types: tuple[type, ...],
        weight_scale: float,
        key: PRNGKey,
    ) -> None:
        """Set the layout, the rule and the initial weights (called by `__init__`)."""
        n = topology.num_neurons
        _check_rule(plasticity, rule_types, n)
        if isinstance(plasticity, BackpropamineRule):
            plasticity.modulator_id(n, self.action_size)  # raises if there is none
        self.layout = make_layout(topology, layout, plastic=plasticity is not None)
        _check_fusable(plasticity, self.layout)
        self.rule = (
            None if plasticity is None else plasticity.for_edges(topology.num_edges)
        )
        if isinstance(plasticity, PerSynapseHebbianRule) and plasticity.draws_weights:
            # drawn at every birth (Najarro & Risi's condition): none to evolve
            self.weights = jnp.zeros((0,), jnp.float32)
            return
        # weight_scale * N(0, 1) / sqrt(mean fan-in)
        fan_in = max(1.0, topology.num_active / n)
        scale = float(weight_scale) / math.sqrt(fan_in)
        self.weights = scale * jr.normal(key, (topology.num_edges,))

    @property
    def num_neurons(self) -> int:
        return self.layout.num_neurons

    def _initial_plastic(self, key: PRNGKey) -> Plastic | None:
        """The plastic state at birth (None without a rule)."""
        layout, rule = self.layout, self.rule
        if rule is None or isinstance(rule, BackpropamineRule):
            del key
            spiking = isinstance(self, SparseSpikingPolicy)
            n = self.num_neurons if spiking else None
            return None if rule is None else rule.initial_state(layout, n)
        # the genome's weights (or, drawn every lifetime, fresh ones), clipped
        # into the rule's bounds; masked entries stay 0
        weights = self.weights
        if isinstance(rule, PerSynapseHebbianRule) and rule.draws_weights:
            draw_key, key = jr.split(key)
            weights = rule.draw_weights(draw_key, layout.num_edges)
        lo, hi = rule.weight_bounds
        native = jnp.clip(layout.native_weights(weights), lo, hi)
        return PlasticState(
            weights=jnp.where(layout.native_mask(), native, 0.0),
            trace=jnp.zeros(layout.native_shape, rule.trace_dtype),
            modulation=jnp.zeros((), jnp.float32),
            baseline=jnp.zeros((), jnp.float32),
            seed=jr.bits(key, (), jnp.uint32),
            step=jnp.zeros((), jnp.uint32),
            pending=jnp.zeros((), jnp.bool_),
        )

    def _settle(self, plastic: Plastic | None) -> Plastic | None:
        """`plastic` with a pending reward update applied (population-last)."""
        if not isinstance(plastic, PlasticState):
            return plastic
        return settle_step(self.layout, (self.rule, plastic))

    def _step_weights(self, plastic: Plastic | None) -> Array:
        """This step's native weights `[*native, B]` (population-last)."""
        if isinstance(plastic, PlasticState):
            return plastic.weights
        # Fixed weights depend on the genome alone, so inside a rollout's scan
        # they are loop invariant; the barrier keeps XLA from fusing the
        # conversion into the per-step propagation, so that it hoists it out of
        # the loop instead (the dense scatter cost more than the whole step).
        fixed = lax.optimization_barrier(self.layout.to_native(self.weights))
        if plastic is None:
            return fixed
        return cast(BackpropamineRule, self.rule).weights(self.layout, fixed, plastic)

    def _modulator(self) -> int:
        """The backpropamine modulator neuron's id."""
        rule = cast(BackpropamineRule, self.rule)
        return rule.modulator_id(self.num_neurons, self.action_size)

    @abc.abstractmethod
    def _trailing_step(self, obs: Array, state: Any) -> tuple[Array, Any]:
        """One step, population-last: `(action [A, B], state)`."""

    def __call__(self, obs: Float[Array, " obs"], state: Any) -> tuple[Any, Any]:
        # Index leaves are shared: only the genome and the state get a trailing
        # population axis under vmap.
        index, genome = _split(self)
        step = population_last(_trailing_step, enabled=self.layout.population_last)
        return step(index, (genome, obs, state))

    def reinforce(self, reward: Scalar, state: Any) -> Any:
        rule, plastic = self.rule, state.plastic
        if not isinstance(rule, AbstractRule) or rule.modulation != "reward":
            return state
        if plastic is None:
            return state
        # Through population_last like the step itself: the plastic arrays are then
        # only ever touched population-last, and XLA keeps them in that layout.
        update = population_last(reinforce_step, enabled=self.layout.population_last)
        plastic = update(self.layout, (rule, reward, plastic))
        return dataclasses.replace(state, plastic=plastic)

    def without_plasticity(self) -> AbstractPolicy:
        """A three-factor rule's learning rate, or backpropamine's alpha, set to 0:
        the weights stay those the network is born with (a
        `PerSynapseHebbianRule` that normalises still rescales them once, on the
        first update)."""
        rule = self.rule
        if rule is None:
            return super().without_plasticity()  # raises: nothing to cut
        if isinstance(rule, BackpropamineRule):
            return eqx.tree_at(lambda p: p.rule.alpha, self, jnp.zeros_like(rule.alpha))
        zero = jnp.zeros_like(rule.learning_rate)
        return eqx.tree_at(lambda p: p.rule.learning_rate, self, zero)

    def forget(self, state: Any, initial: Any) -> Any:
        """Every neuron's activity (potentials, rates, spikes, traces of spikes)
        back to its value at birth; the plastic weights kept."""
        return dataclasses.replace(initial, plastic=state.plastic)

    def settled(self, state: Any) -> Any:
        """`state` with the weight update that `reinforce` left pending applied
        (`PlasticState.pending`): read plastic weights after `reinforce` here."""
        if not isinstance(state.plastic, PlasticState):
            return state
        settle = population_last(settle_step, enabled=self.layout.population_last)
        plastic = settle(self.layout, (self.rule, state.plastic))
        return dataclasses.replace(state, plastic=plastic)


# -- rate network -------------------------------------------------------------------


class SparseRatePolicy(AbstractSparsePolicy[RateRule]):
    """A sparse recurrent network of leaky tanh rate units, optionally plastic.

    One step, from the rates `x` of the last one:

        I = W x + inject(input_weight * obs)     (W: the topology's edges)
        v, x = RateNeurons.step(v, I)
        action = x[output_ids]                   (in [-1, 1])

    and with a `HebbianRule` or `PerSynapseHebbianRule`, the eligibility trace
    and three-factor update on the plastic weights (in `reinforce` for
    modulation="reward"); with a `BackpropamineRule`, `W + alpha Hebb` for `W`
    and the neuromodulated Hebbian update.

    Arguments:
        obs_size, action_size: observation and action sizes.
        topology: the shared connectivity (see `Topology`).
        layout: `"auto"` (default; `choose_layout`'s measured rule),
            `"segment"`, `"gather"`, `"dense"` or `"pallas"` (the fused kernel,
            `PallasLayout`). Results agree across layouts up to float rounding.
        tau, dt: initial time constant and step length of the rate units.
        plasticity: a `HebbianRule`, `PerSynapseHebbianRule` or
            `BackpropamineRule`, or None for fixed weights.
        input_ids, output_ids: neurons receiving the observation / giving the
            action (default: the first `obs_size` / the last `action_size`).
        weight_scale: initial weights are `weight_scale * N(0, 1) / sqrt(fan-in)`.
        key: initialisation key (keyword-only, last).

    Example:
        >>> topology = Topology.fixed_fan_in(64, 8, key=jr.key(0))
        >>> policy = SparseRatePolicy(4, 2, topology, key=jr.key(1))
        >>> action, state = policy(obs, policy.initial_state(jr.key(2)))
    """

    neurons: RateNeurons
    rule: RateRule | None
    layout: AbstractLayout

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        topology: Topology,
        *,
        layout: str = "auto",
        tau: float = 2.0,
        dt: float = 1.0,
        plasticity: RateRule | None = None,
        input_ids: Sequence[int] | None = None,
        output_ids: Sequence[int] | None = None,
        weight_scale: float = 1.0,
        key: PRNGKey,
    ):
        n = topology.num_neurons
        self._init_io(obs_size, action_size, input_ids, output_ids, n)
        rules = (HebbianRule, PerSynapseHebbianRule, BackpropamineRule)
        self._init_edges(topology, layout, plasticity, rules, weight_scale, key)
        self.neurons = RateNeurons(n, tau=tau, dt=dt)
        self.input_weight = jnp.ones(obs_size)

    def initial_state(self, key: PRNGKey) -> SparseRateState:
        n = self.num_neurons
        plastic = self._initial_plastic(key)
        return SparseRateState(
            potential=jnp.zeros(n), rate=jnp.zeros(n), plastic=plastic
        )

    def _trailing_step(
        self, obs: Array, state: SparseRateState
    ) -> tuple[Array, SparseRateState]:
        layout, rule, x = self.layout, self.rule, state.rate
        plastic = self._settle(state.plastic)
        weights = self._step_weights(plastic)
        if isinstance(layout, PallasLayout):
            # only a HebbianRule is fused (`_check_fusable`)
            assert rule is None or isinstance(rule, HebbianRule)
            assert not isinstance(plastic, BackpropamineState)
            external = external_current(x, self.input_weight * obs, self.input_ids)
            potential, rate, plastic = layout.rate_step(
                self.neurons, rule, weights, state.potential, x, external, plastic
            )
            return read_out(rate, self.output_ids), SparseRateState(
                potential, rate, plastic
            )
        if plastic is None:
            current, pre = layout.currents(weights, x), None
        elif isinstance(plastic, BackpropamineState):
            # the currents as without plasticity (alpha = 0: the same bits)
            current, pre = layout.currents(weights, x), layout.pre(x)
        else:
            current, pre = layout.currents_and_pre(weights, x)
        current = inject(current, self.input_weight * obs, self.input_ids)
        potential, rate = self.neurons.step(state.potential, current)
        action = read_out(rate, self.output_ids)
        if isinstance(rule, BackpropamineRule):
            assert isinstance(plastic, BackpropamineState) and pre is not None
            activity = rate[self._modulator()]
            plastic = rule.step(layout, plastic, pre, layout.post(rate), activity)
        elif plastic is not None:
            assert rule is not None and pre is not None
            assert isinstance(plastic, PlasticState)
            rule = rule.in_native(layout)
            increment = rule.increment(pre, layout.post(rate))
            plastic = plastic_step(
                layout, rule, plastic, weights, increment, rate, self.neurons.dt
            )
        return action, SparseRateState(potential, rate, plastic)


# -- spiking network ----------------------------------------------------------------


class SparseSpikingPolicy(AbstractSparsePolicy[SpikingRule]):
    """A sparse recurrent network of LIF units, optionally plastic (STDP or
    backpropamine).

    One step, from the spikes `s` of the last one:

        I = W s + inject(input_weight * obs)
        v, c, s = LIFNeurons.step(v, c, I)
        y = beta y + (1 - beta) s[output_ids],   beta = exp(-dt / readout_tau)
        action = tanh(readout_weight * y + readout_bias)      (in [-1, 1])

    and with an `STDPRule`, the spike traces, eligibility traces and
    three-factor update on the plastic weights; with a `BackpropamineRule`,
    `W + alpha Hebb` for `W` and the neuromodulated Hebbian update from the
    filtered spike trains.

    Arguments:
        obs_size, action_size: observation and action sizes.
        topology: the shared connectivity (see `Topology`).
        layout: `"auto"`, `"segment"`, `"gather"`, `"dense"` or `"pallas"`.
        tau, dt, threshold, reset, refractory_period: LIF parameters (see
            `LIFNeurons`; times in the unit of `dt`, default 1 ms).
        readout_tau: time constant of the output neurons' spike filter.
        plasticity: an `STDPRule` or a `BackpropamineRule`, or None for fixed
            weights.
        input_ids, output_ids: as for `SparseRatePolicy`.
        weight_scale: initial weights are `weight_scale * N(0, 1) / sqrt(fan-in)`.
        input_scale: initial input gain (observations are injected as current).
        key: initialisation key (keyword-only, last).
    """

    readout_weight: Float[Array, " action"]
    readout_bias: Float[Array, " action"]
    neurons: LIFNeurons
    rule: SpikingRule | None
    layout: AbstractLayout
    readout_decay: float = eqx.field(static=True)

    def __init__(
        self,
        obs_size: int,
        action_size: int,
        topology: Topology,
        *,
        layout: str = "auto",
        tau: float = 20.0,
        dt: float = 1.0,
        threshold: float = 1.0,
        reset: float = 0.0,
        refractory_period: float = 2.0,
        readout_tau: float = 20.0,
        plasticity: SpikingRule | None = None,
        input_ids: Sequence[int] | None = None,
        output_ids: Sequence[int] | None = None,
        weight_scale: float = 1.0,
        input_scale: float = 2.0,
        key: PRNGKey,
    ):
        n = topology.num_neurons
        self._init_io(obs_size, action_size, input_ids, output_ids, n)
        readout_tau = positive_number("readout_tau", readout_tau)
        rules = (STDPRule, BackpropamineRule)
        self._init_edges(topology, layout, plasticity, rules, weight_scale, key)
        self.neurons = LIFNeurons(
            n,
            tau=tau,
            dt=dt,
            threshold=threshold,
            reset=reset,
            refractory_period=refractory_period,
        )
        self.readout_decay = math.exp(-self.neurons.dt / readout_tau)
        self.input_weight = jnp.full(obs_size, float(input_scale))
        # tanh(4 y - 2): a silent output gives -0.96, one firing every step 0.96
        self.readout_weight = jnp.full(action_size, 4.0)
        self.readout_bias = jnp.full(action_size, -2.0)

    def initial_state(self, key: PRNGKey) -> SparseSpikingState:
        n = self.num_neurons
        pre = post = None
        if isinstance(self.rule, STDPRule):
            pre, post = jnp.zeros(n), jnp.zeros(n)  # the STDP spike traces
        plastic = self._initial_plastic(key)
        return SparseSpikingState(
            potential=jnp.zeros(n),
            refractory=jnp.zeros(n, jnp.int32),
            spikes=jnp.zeros(n),
            readout=jnp.zeros(self.action_size),
            pre_trace=pre,
            post_trace=post,
            plastic=plastic,
        )

    def _trailing_step(
        self, obs: Array, state: SparseSpikingState
    ) -> tuple[Array, SparseSpikingState]:
        layout, rule, neurons = self.layout, self.rule, self.neurons
        plastic = self._settle(state.plastic)
        weights = self._step_weights(plastic)
        pre_trace, post_trace = state.pre_trace, state.post_trace
        fused = isinstance(layout, PallasLayout)
        if fused:
            # only an STDPRule is fused (`_check_fusable`)
            assert rule is None or isinstance(rule, STDPRule)
            assert not isinstance(plastic, BackpropamineState)
            external = external_current(
                state.spikes, self.input_weight * obs, self.input_ids
            )
            potential, refractory, spikes, plastic = layout.spiking_step(
                neurons,
                rule,
                weights,
                state.potential,
                state.refractory,
                state.spikes,
                external,
                pre_trace,
                post_trace,
                plastic,
            )
        else:
            current = layout.currents(weights, state.spikes)
            current = inject(current, self.input_weight * obs, self.input_ids)
            potential, refractory, spikes = neurons.step(
                state.potential, state.refractory, current
            )
        decay = self.readout_decay
        readout = decay * state.readout + (1.0 - decay) * read_out(
            spikes, self.output_ids
        )
        action = jnp.tanh(self.readout_weight * readout + self.readout_bias)
        if isinstance(rule, BackpropamineRule):
            assert isinstance(plastic, BackpropamineState)
            plastic = rule.spiking_step(
                layout, plastic, spikes, decay, self._modulator()
            )
        elif plastic is not None:
            assert isinstance(rule, STDPRule) and isinstance(plastic, PlasticState)
            assert pre_trace is not None and post_trace is not None
            dt = neurons.dt
            if not fused:  # the kernel has updated the traces (and weights) already
                increment = rule.increment(
                    layout.pre(pre_trace),
                    layout.pre(spikes),
                    layout.post(post_trace),
                    layout.post(spikes),
                )
                plastic = plastic_step(
                    layout, rule, plastic, weights, increment, spikes, dt
                )
            # the increment above read the spike traces from before this step's
            # spikes; only now do they take them in
            pre_trace = math.exp(-dt / rule.tau_plus) * pre_trace + spikes
            post_trace = math.exp(-dt / rule.tau_minus) * post_trace + spikes
        state = SparseSpikingState(
            potential, refractory, spikes, readout, pre_trace, post_trace, plastic
        )
        return action, state


__all__ = [
    "AbstractSparsePolicy",
    "SparseRatePolicy",
    "SparseRateState",
    "SparseSpikingPolicy",
    "SparseSpikingState",
]
