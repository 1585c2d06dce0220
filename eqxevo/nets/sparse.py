"""Sparse rate and spiking policies: a `Topology`, a layout, neurons and plasticity.

See docs/networks.md ("Sparse policies") for one step and what the genome holds.
"""

import abc
import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

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
from .plasticity import (
    AbstractRule,
    HebbianRule,
    PlasticState,
    STDPRule,
    random_bits,
    reward_modulation,
    three_factor_update,
    update_trace,
)
from .propagate import AbstractLayout
from .topology import Topology


class SparseRateState(eqx.Module):
    """Lifetime state of a `SparseRatePolicy`.

    Attributes:
        potential: `[N]` membrane potentials.
        rate: `[N]` rates, `tanh(potential)`.
        plastic: `PlasticState` for a plastic network, else None.
    """

    potential: Array
    rate: Array
    plastic: PlasticState | None


class SparseSpikingState(eqx.Module):
    """Lifetime state of a `SparseSpikingPolicy`.

    Attributes:
        potential: `[N]` membrane potentials.
        refractory: `[N]` int32 steps left in the refractory period.
        spikes: `[N]` this step's spikes (0.0 / 1.0).
        readout: `[action]` low-pass filtered spikes of the output neurons.
        pre_trace, post_trace: `[N]` STDP spike traces (plastic only, else None).
        plastic: `PlasticState` for a plastic network, else None.
    """

    potential: Array
    refractory: Array
    spikes: Array
    readout: Array
    pre_trace: Array | None
    post_trace: Array | None
    plastic: PlasticState | None


# -- shared helpers ---------------------------------------------------------------


def _ids(
    name: str, ids: Sequence[int] | None, default: range, num_neurons: int, size: int
) -> tuple[int, ...]:
    # static ints: injection and readout index with constants (contiguous: a slice)
    out = tuple(default) if ids is None else tuple(int(i) for i in ids)
    if len(out) != size:
        raise ValueError(f"{name} must name {size} neurons; got {len(out)}: {out}")
    if any(i < 0 or i >= num_neurons for i in out) or len(set(out)) != len(out):
        raise ValueError(
            f"{name} must be distinct neuron ids in [0, {num_neurons}); got {out}"
        )
    return out


def _contiguous(ids: tuple[int, ...]) -> bool:
    return ids == tuple(range(ids[0], ids[0] + len(ids)))


def _inject(current: Array, values: Array, ids: tuple[int, ...]) -> Array:
    """Add `values[k]` to `current[ids[k]]` (trailing axes broadcast)."""
    # A contiguous block of ids (the default) is a pad and an add: no scatter.
    if _contiguous(ids):
        start, n = ids[0], current.shape[0]
        pad = ((start, n - start - len(ids)),) + ((0, 0),) * (values.ndim - 1)
        return current + jnp.pad(values, pad)
    return current.at[jnp.asarray(ids)].add(values)


def _external(x: Array, values: Array, ids: tuple[int, ...]) -> Array:
    """The injected current alone, `[N, B]`: what the fused kernel adds to `W x`."""
    zeros = jnp.zeros((x.shape[0], values.shape[-1]), x.dtype)
    return _inject(zeros, values, ids)


def _read(values: Array, ids: tuple[int, ...]) -> Array:
    if _contiguous(ids):
        return values[ids[0] : ids[0] + len(ids)]
    return values[jnp.asarray(ids)]


def _check_rule(rule: AbstractRule | None, expected: type, num_neurons: int) -> None:
    if rule is None:
        return
    if not isinstance(rule, expected):
        raise TypeError(
            f"plasticity must be a {expected.__name__} or None; got "
            f"{type(rule).__name__}"
        )
    if rule.modulator is not None and rule.modulator >= num_neurons:
        raise ValueError(
            f"plasticity.modulator={rule.modulator} is not a neuron id in "
            f"[0, {num_neurons})"
        )


def _split(policy: eqx.Module) -> tuple[Any, Any]:
    """Index leaves (integer/boolean arrays: the layout) vs everything else."""
    return eqx.partition(
        policy, lambda x: eqx.is_array(x) and not eqx.is_inexact_array(x)
    )


def _plastic_step(
    layout: AbstractLayout,
    rule: AbstractRule,
    plastic: PlasticState,
    weights: Array,
    increment: Array,
    activity: Array,
    dt: float,
) -> PlasticState:
    """Advance the eligibility traces by `increment`, then apply a neuron-modulated
    update (if configured); population-last, in the layout's native format."""
    bits = None
    if plastic.trace.dtype != jnp.float32:
        bits = random_bits(plastic.seed, plastic.step, layout.native_shape)
    trace = update_trace(plastic.trace, increment, rule.eligibility_decay(dt), bits)
    modulation = rule.step_modulation(plastic.modulation, activity)
    if rule.modulation == "neuron":
        weights = three_factor_update(
            weights,
            trace,
            modulation,
            rule.learning_rate,
            rule.weight_bounds,
            layout.native_mask()[..., None],
        )
    return plastic.advanced(weights, trace, modulation)


def _reinforce_trailing(layout: AbstractLayout, data: Any) -> PlasticState:
    rule, reward, plastic = data
    # `reinforce` follows the step that advanced `plastic.step`: the rewards
    # before this one number step - 1.
    seen = jnp.maximum(plastic.step.astype(jnp.float32) - 1.0, 0.0)
    modulation, baseline = reward_modulation(rule, reward, plastic.baseline, seen)
    weights = three_factor_update(
        plastic.weights,
        plastic.trace,
        modulation,
        rule.learning_rate,
        rule.weight_bounds,
        layout.native_mask()[..., None],
    )
    return dataclasses.replace(
        plastic, weights=weights, modulation=modulation, baseline=baseline
    )


def _trailing_step(index: Any, data: Any) -> tuple[Array, Any]:
    genome, obs, state = data
    policy: AbstractSparsePolicy[Any] = eqx.combine(index, genome)
    return policy._trailing_step(obs, state)


# -- the shared part of both policies -------------------------------------------

RuleT = TypeVar("RuleT", bound=AbstractRule)


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
        self.input_ids = _ids("input_ids", input_ids, range(obs_size), n, obs_size)
        self.output_ids = _ids(
            "output_ids", output_ids, range(n - action_size, n), n, action_size
        )

    def _init_edges(
        self,
        topology: Topology,
        layout: str,
        plasticity: RuleT | None,
        rule_type: type[RuleT],
        weight_scale: float,
        key: PRNGKey,
    ) -> None:
        """Set the layout, the rule and the initial weights (called by `__init__`)."""
        n = topology.num_neurons
        _check_rule(plasticity, rule_type, n)
        self.layout = make_layout(topology, layout, plastic=plasticity is not None)
        self.rule = plasticity
        # weight_scale * N(0, 1) / sqrt(mean fan-in)
        fan_in = max(1.0, topology.num_active / n)
        scale = float(weight_scale) / math.sqrt(fan_in)
        self.weights = scale * jr.normal(key, (topology.num_edges,))

    @property
    def num_neurons(self) -> int:
        return self.layout.num_neurons

    def _initial_plastic(self, key: PRNGKey) -> PlasticState | None:
        """The plastic state at birth (None without a rule)."""
        layout, rule = self.layout, self.rule
        if rule is None:
            del key
            return None
        # the genome's weights, clipped into the rule's bounds; masked entries stay 0
        lo, hi = rule.weight_bounds
        native = jnp.clip(layout.native_weights(self.weights), lo, hi)
        return PlasticState(
            weights=jnp.where(layout.native_mask(), native, 0.0),
            trace=jnp.zeros(layout.native_shape, rule.trace_dtype),
            modulation=jnp.zeros((), jnp.float32),
            baseline=jnp.zeros((), jnp.float32),
            seed=jr.bits(key, (), jnp.uint32),
            step=jnp.zeros((), jnp.uint32),
        )

    def _step_weights(self, plastic: PlasticState | None) -> Array:
        """This step's native weights `[*native, B]` (population-last)."""
        if plastic is not None:
            return plastic.weights
        # Fixed weights depend on the genome alone, so inside a rollout's scan
        # they are loop invariant; the barrier keeps XLA from fusing the
        # conversion into the per-step propagation, so that it hoists it out of
        # the loop instead (the dense scatter cost more than the whole step).
        return lax.optimization_barrier(self.layout.to_native(self.weights))

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
        if rule is None or rule.modulation != "reward" or plastic is None:
            return state
        # Through population_last like the step itself: the plastic arrays are then
        # only ever touched population-last, and XLA keeps them in that layout.
        update = population_last(
            _reinforce_trailing, enabled=self.layout.population_last
        )
        plastic = update(self.layout, (rule, reward, plastic))
        return dataclasses.replace(state, plastic=plastic)


# -- rate network -------------------------------------------------------------------


class SparseRatePolicy(AbstractSparsePolicy[HebbianRule]):
    """A sparse recurrent network of leaky tanh rate units, optionally plastic.

    One step, from the rates `x` of the last one:

        I = W x + inject(input_weight * obs)     (W: the topology's edges)
        v, x = RateNeurons.step(v, I)
        action = x[output_ids]                   (in [-1, 1])

    and with a `HebbianRule`, the eligibility trace and three-factor update on
    the plastic weights (in `reinforce` for modulation="reward").

    Arguments:
        obs_size, action_size: observation and action sizes.
        topology: the shared connectivity (see `Topology`).
        layout: `"auto"` (default; `choose_layout`'s measured rule),
            `"segment"`, `"gather"`, `"dense"` or `"pallas"` (the fused kernel,
            `PallasLayout`). Results agree across layouts up to float rounding.
        tau, dt: initial time constant and step length of the rate units.
        plasticity: a `HebbianRule`, or None for fixed weights.
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
    rule: HebbianRule | None
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
        plasticity: HebbianRule | None = None,
        input_ids: Sequence[int] | None = None,
        output_ids: Sequence[int] | None = None,
        weight_scale: float = 1.0,
        key: PRNGKey,
    ):
        n = topology.num_neurons
        self._init_io(obs_size, action_size, input_ids, output_ids, n)
        self._init_edges(topology, layout, plasticity, HebbianRule, weight_scale, key)
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
        layout, rule, x, plastic = self.layout, self.rule, state.rate, state.plastic
        weights = self._step_weights(plastic)
        if isinstance(layout, PallasLayout):
            external = _external(x, self.input_weight * obs, self.input_ids)
            potential, rate, plastic = layout.rate_step(
                self.neurons, rule, weights, state.potential, x, external, plastic
            )
            return _read(rate, self.output_ids), SparseRateState(
                potential, rate, plastic
            )
        if plastic is None:
            current, pre = layout.currents(weights, x), None
        else:
            current, pre = layout.currents_and_pre(weights, x)
        current = _inject(current, self.input_weight * obs, self.input_ids)
        potential, rate = self.neurons.step(state.potential, current)
        action = _read(rate, self.output_ids)
        if plastic is not None:
            assert rule is not None and pre is not None
            increment = rule.increment(pre, layout.post(rate))
            plastic = _plastic_step(
                layout, rule, plastic, weights, increment, rate, self.neurons.dt
            )
        return action, SparseRateState(potential, rate, plastic)


# -- spiking network ----------------------------------------------------------------


class SparseSpikingPolicy(AbstractSparsePolicy[STDPRule]):
    """A sparse recurrent network of LIF units, optionally with STDP plasticity.

    One step, from the spikes `s` of the last one:

        I = W s + inject(input_weight * obs)
        v, c, s = LIFNeurons.step(v, c, I)
        y = beta y + (1 - beta) s[output_ids],   beta = exp(-dt / readout_tau)
        action = tanh(readout_weight * y + readout_bias)      (in [-1, 1])

    and with an `STDPRule`, the spike traces, eligibility traces and
    three-factor update on the plastic weights.

    Arguments:
        obs_size, action_size: observation and action sizes.
        topology: the shared connectivity (see `Topology`).
        layout: `"auto"`, `"segment"`, `"gather"`, `"dense"` or `"pallas"`.
        tau, dt, threshold, reset, refractory_period: LIF parameters (see
            `LIFNeurons`; times in the unit of `dt`, default 1 ms).
        readout_tau: time constant of the output neurons' spike filter.
        plasticity: an `STDPRule`, or None for fixed weights.
        input_ids, output_ids: as for `SparseRatePolicy`.
        weight_scale: initial weights are `weight_scale * N(0, 1) / sqrt(fan-in)`.
        input_scale: initial input gain (observations are injected as current).
        key: initialisation key (keyword-only, last).
    """

    readout_weight: Float[Array, " action"]
    readout_bias: Float[Array, " action"]
    neurons: LIFNeurons
    rule: STDPRule | None
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
        plasticity: STDPRule | None = None,
        input_ids: Sequence[int] | None = None,
        output_ids: Sequence[int] | None = None,
        weight_scale: float = 1.0,
        input_scale: float = 2.0,
        key: PRNGKey,
    ):
        n = topology.num_neurons
        self._init_io(obs_size, action_size, input_ids, output_ids, n)
        readout_tau = positive_number("readout_tau", readout_tau)
        self._init_edges(topology, layout, plasticity, STDPRule, weight_scale, key)
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
        plastic = pre = post = None
        if self.rule is not None:
            plastic = self._initial_plastic(key)
            pre, post = jnp.zeros(n), jnp.zeros(n)  # the STDP spike traces
        else:
            del key
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
        plastic = state.plastic
        weights = self._step_weights(plastic)
        pre_trace, post_trace = state.pre_trace, state.post_trace
        fused = isinstance(layout, PallasLayout)
        if fused:
            external = _external(state.spikes, self.input_weight * obs, self.input_ids)
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
            current = _inject(current, self.input_weight * obs, self.input_ids)
            potential, refractory, spikes = neurons.step(
                state.potential, state.refractory, current
            )
        decay = self.readout_decay
        readout = decay * state.readout + (1.0 - decay) * _read(spikes, self.output_ids)
        action = jnp.tanh(self.readout_weight * readout + self.readout_bias)
        if plastic is not None:
            assert rule is not None
            assert pre_trace is not None and post_trace is not None
            dt = neurons.dt
            if not fused:  # the kernel has updated the traces (and weights) already
                increment = rule.increment(
                    layout.pre(pre_trace),
                    layout.pre(spikes),
                    layout.post(post_trace),
                    layout.post(spikes),
                )
                plastic = _plastic_step(
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
