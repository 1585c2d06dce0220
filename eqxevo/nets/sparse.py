"""Sparse rate and spiking policies: a `Topology`, a layout, neurons and plasticity.

The genome holds what evolution sets: initial edge weights `[E]` (in edge-list
order, whatever the layout, so the search space does not depend on it), input
gains, neuron biases and time constants, readout parameters and plasticity rule
coefficients. The topology and layout index arrays are integer leaves, shared by
the population. The lifetime state holds neuron state and, for plastic networks,
the plastic weights and eligibility traces in the layout's native format.

Observations drive the input neurons `input_ids` as external current
(`input_weight * obs`); actions are read from the output neurons `output_ids`:
their rates for a rate network, `tanh(readout_weight * y + readout_bias)` of their
low-pass filtered spike trains `y` for a spiking one. Both lie in [-1, 1].

One step (rate network; the spiking one is the same with LIF units, spikes for
rates and STDP for the Hebbian increment):

    I = W x + inject(input_weight * obs)        # propagate.py
    v, x = neurons.step(v, I)                   # neurons.py
    action = x[output_ids]
    e = lambda e + increment(x_pre, x_post)     # plasticity.py (plastic only)
    w = clip(w + eta m e)                       # modulation="neuron": here;
                                                # modulation="reward": in reinforce

A whole step runs through `batching.population_last`, so under `jax.vmap` over
genomes (as in `eqxevo.evaluate`) the population steps at once with its axis last.
With `layout="pallas"` the step's propagation, neuron update and trace update
run as one fused Pallas kernel (`fused.py`) instead of separate XLA operations.
"""

import math
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jax import lax

from .._types import Array, Float, PRNGKey, Scalar
from .base import AbstractPolicy
from .batching import population_last
from .fused import PallasLayout
from .layouts import make_layout
from .neurons import LIFNeurons, RateNeurons
from .plasticity import (
    HebbianRule,
    PlasticState,
    Rule,
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


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}")
    return value


def _check_rule(rule: Rule | None, expected: type, num_neurons: int) -> None:
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


def _fixed_weights(layout: AbstractLayout, weights: Array) -> Array:
    """Native weights of a non-plastic genome, computed from its `[E]` weights.

    They depend on the genome alone, so inside a rollout's scan they are loop
    invariant; the barrier keeps XLA from fusing the conversion into the
    per-step propagation, so that it hoists it out of the loop instead (the
    dense scatter cost more than the whole step otherwise).
    """
    return lax.optimization_barrier(layout._native(weights))


def _initial_plastic(
    layout: AbstractLayout, weights: Array, rule: Rule, key: PRNGKey
) -> PlasticState:
    lo, hi = rule.weight_bounds
    native = jnp.clip(layout.native_weights(weights), lo, hi)
    return PlasticState(
        weights=jnp.where(layout.native_mask(), native, 0.0),
        trace=jnp.zeros(layout.native_shape, rule.trace_dtype),
        modulation=jnp.zeros((), jnp.float32),
        baseline=jnp.zeros((), jnp.float32),
        seed=jr.bits(key, (), jnp.uint32),
        step=jnp.zeros((), jnp.uint32),
    )


def _trace_step(
    layout: AbstractLayout,
    rule: Rule,
    plastic: PlasticState,
    increment: Array,
    decay: float,
) -> Array:
    bits = None
    if plastic.trace.dtype != jnp.float32:
        bits = random_bits(plastic.seed, plastic.step, layout.native_shape)
    return update_trace(plastic.trace, increment, decay, bits)


def _finish_plastic(
    layout: AbstractLayout,
    rule: Rule,
    plastic: PlasticState,
    weights: Array,
    trace: Array,
    activity: Array,
) -> PlasticState:
    """Apply a neuron-modulated update (if configured) and advance the step."""
    modulation = plastic.modulation
    if rule.modulation == "neuron":
        assert rule.modulator is not None
        modulation = activity[rule.modulator]
        weights = three_factor_update(
            weights,
            trace,
            modulation,
            rule.learning_rate,
            rule.weight_bounds,
            layout.native_mask()[..., None],
        )
    return PlasticState(
        weights=weights,
        trace=trace,
        modulation=modulation,
        baseline=plastic.baseline,
        seed=plastic.seed,
        step=plastic.step + jnp.uint32(1),
    )


def _reinforce(
    layout: AbstractLayout,
    rule: Rule | None,
    reward: Scalar,
    plastic: PlasticState | None,
) -> PlasticState | None:
    if rule is None or rule.modulation != "reward" or plastic is None:
        return plastic
    # Through population_last like the step itself: the plastic arrays are then
    # only ever touched population-last, and XLA keeps them in that layout.
    update = population_last(_reinforce_trailing, enabled=layout.population_last)
    return update(layout, (rule, reward, plastic))


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
    return PlasticState(
        weights=weights,
        trace=plastic.trace,
        modulation=modulation,
        baseline=baseline,
        seed=plastic.seed,
        step=plastic.step,
    )


# -- rate network -------------------------------------------------------------------


class SparseRatePolicy(AbstractPolicy):
    """A sparse recurrent network of leaky tanh rate units, optionally plastic.

    Arguments:
        obs_size, action_size: observation and action sizes.
        topology: the shared connectivity (see `Topology`).
        layout: `"auto"` (default; measured rule), `"segment"`, `"gather"`,
            `"dense"` or `"pallas"` (the fused kernel; see `fused.py`). Results
            agree across layouts up to float rounding.
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

    weights: Float[Array, " edges"]
    input_weight: Float[Array, " obs"]
    neurons: RateNeurons
    rule: HebbianRule | None
    layout: AbstractLayout
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    input_ids: tuple[int, ...] = eqx.field(static=True)
    output_ids: tuple[int, ...] = eqx.field(static=True)

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
        self.obs_size = _positive_int("obs_size", obs_size)
        self.action_size = _positive_int("action_size", action_size)
        self.input_ids = _ids("input_ids", input_ids, range(obs_size), n, obs_size)
        self.output_ids = _ids(
            "output_ids", output_ids, range(n - action_size, n), n, action_size
        )
        _check_rule(plasticity, HebbianRule, n)
        self.layout = make_layout(topology, layout, plastic=plasticity is not None)
        self.neurons = RateNeurons(n, tau=tau, dt=dt)
        self.rule = plasticity
        fan_in = max(1.0, topology.num_active / n)
        scale = float(weight_scale) / math.sqrt(fan_in)
        self.weights = scale * jr.normal(key, (topology.num_edges,))
        self.input_weight = jnp.ones(obs_size)

    @property
    def num_neurons(self) -> int:
        return self.layout.num_neurons

    def initial_state(self, key: PRNGKey) -> SparseRateState:
        n = self.num_neurons
        plastic = None
        if self.rule is not None:
            plastic = _initial_plastic(self.layout, self.weights, self.rule, key)
        else:
            del key
        return SparseRateState(
            potential=jnp.zeros(n), rate=jnp.zeros(n), plastic=plastic
        )

    def __call__(
        self, obs: Float[Array, " obs"], state: SparseRateState
    ) -> tuple[Float[Array, " action"], SparseRateState]:
        index, genome = _split(self)
        step = population_last(_rate_step, enabled=self.layout.population_last)
        return step(index, (genome, obs, state))

    def reinforce(self, reward: Scalar, state: SparseRateState) -> SparseRateState:
        plastic = _reinforce(self.layout, self.rule, reward, state.plastic)
        return SparseRateState(state.potential, state.rate, plastic)


def _rate_step(index: Any, data: Any) -> tuple[Array, SparseRateState]:
    genome, obs, state = data
    policy: SparseRatePolicy = eqx.combine(index, genome)
    layout, rule = policy.layout, policy.rule
    x, plastic = state.rate, state.plastic
    if isinstance(layout, PallasLayout):
        if plastic is None:
            weights = _fixed_weights(layout, policy.weights)
        else:
            weights = plastic.weights
        external = _external(x, policy.input_weight * obs, policy.input_ids)
        potential, rate, plastic = layout._rate_step(
            policy.neurons, rule, weights, state.potential, x, external, plastic
        )
        return _read(rate, policy.output_ids), SparseRateState(potential, rate, plastic)
    if plastic is None:
        weights = _fixed_weights(layout, policy.weights)
        current, pre = layout._propagate(weights, x), None
    else:
        weights = plastic.weights
        current, pre = layout._propagate_pre(weights, x)
    current = _inject(current, policy.input_weight * obs, policy.input_ids)
    potential, rate = policy.neurons.step(state.potential, current)
    action = _read(rate, policy.output_ids)
    if plastic is not None:
        assert isinstance(rule, HebbianRule) and pre is not None
        increment = rule.increment(pre, layout._post(rate))
        trace = _trace_step(layout, rule, plastic, increment, rule.trace_decay)
        plastic = _finish_plastic(layout, rule, plastic, weights, trace, rate)
    return action, SparseRateState(potential, rate, plastic)


# -- spiking network ----------------------------------------------------------------


class SparseSpikingPolicy(AbstractPolicy):
    """A sparse recurrent network of LIF units, optionally with STDP plasticity.

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

    weights: Float[Array, " edges"]
    input_weight: Float[Array, " obs"]
    readout_weight: Float[Array, " action"]
    readout_bias: Float[Array, " action"]
    neurons: LIFNeurons
    rule: STDPRule | None
    layout: AbstractLayout
    obs_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    input_ids: tuple[int, ...] = eqx.field(static=True)
    output_ids: tuple[int, ...] = eqx.field(static=True)
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
        self.obs_size = _positive_int("obs_size", obs_size)
        self.action_size = _positive_int("action_size", action_size)
        self.input_ids = _ids("input_ids", input_ids, range(obs_size), n, obs_size)
        self.output_ids = _ids(
            "output_ids", output_ids, range(n - action_size, n), n, action_size
        )
        _check_rule(plasticity, STDPRule, n)
        if not (isinstance(readout_tau, int | float) and readout_tau > 0):
            raise ValueError(f"readout_tau must be > 0; got {readout_tau!r}")
        self.layout = make_layout(topology, layout, plastic=plasticity is not None)
        self.neurons = LIFNeurons(
            n,
            tau=tau,
            dt=dt,
            threshold=threshold,
            reset=reset,
            refractory_period=refractory_period,
        )
        self.rule = plasticity
        self.readout_decay = math.exp(-self.neurons.dt / readout_tau)
        fan_in = max(1.0, topology.num_active / n)
        scale = float(weight_scale) / math.sqrt(fan_in)
        self.weights = scale * jr.normal(key, (topology.num_edges,))
        self.input_weight = jnp.full(obs_size, float(input_scale))
        # tanh(4 y - 2): a silent output gives -0.96, one firing every step 0.96
        self.readout_weight = jnp.full(action_size, 4.0)
        self.readout_bias = jnp.full(action_size, -2.0)

    @property
    def num_neurons(self) -> int:
        return self.layout.num_neurons

    def initial_state(self, key: PRNGKey) -> SparseSpikingState:
        n = self.num_neurons
        plastic = pre = post = None
        if self.rule is not None:
            plastic = _initial_plastic(self.layout, self.weights, self.rule, key)
            pre, post = jnp.zeros(n), jnp.zeros(n)
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

    def __call__(
        self, obs: Float[Array, " obs"], state: SparseSpikingState
    ) -> tuple[Float[Array, " action"], SparseSpikingState]:
        index, genome = _split(self)
        step = population_last(_spiking_step, enabled=self.layout.population_last)
        return step(index, (genome, obs, state))

    def reinforce(
        self, reward: Scalar, state: SparseSpikingState
    ) -> SparseSpikingState:
        plastic = _reinforce(self.layout, self.rule, reward, state.plastic)
        return SparseSpikingState(
            state.potential,
            state.refractory,
            state.spikes,
            state.readout,
            state.pre_trace,
            state.post_trace,
            plastic,
        )


def _spiking_step(index: Any, data: Any) -> tuple[Array, SparseSpikingState]:
    genome, obs, state = data
    policy: SparseSpikingPolicy = eqx.combine(index, genome)
    layout, rule, neurons = policy.layout, policy.rule, policy.neurons
    plastic = state.plastic
    if plastic is None:
        weights = _fixed_weights(layout, policy.weights)
    else:
        weights = plastic.weights
    pre_trace, post_trace = state.pre_trace, state.post_trace
    fused = isinstance(layout, PallasLayout)
    if fused:
        external = _external(state.spikes, policy.input_weight * obs, policy.input_ids)
        potential, refractory, spikes, plastic = layout._spiking_step(
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
        current = layout._propagate(weights, state.spikes)
        current = _inject(current, policy.input_weight * obs, policy.input_ids)
        potential, refractory, spikes = neurons.step(
            state.potential, state.refractory, current
        )
    decay = policy.readout_decay
    readout = decay * state.readout + (1.0 - decay) * _read(spikes, policy.output_ids)
    action = jnp.tanh(policy.readout_weight * readout + policy.readout_bias)
    if plastic is not None:
        assert isinstance(rule, STDPRule)
        assert pre_trace is not None and post_trace is not None
        dt = neurons.dt
        if not fused:  # the kernel has updated the traces (and weights) already
            increment = rule.increment(
                layout._pre(pre_trace),
                layout._pre(spikes),
                layout._post(post_trace),
                layout._post(spikes),
            )
            trace = _trace_step(
                layout, rule, plastic, increment, math.exp(-dt / rule.tau_eligibility)
            )
            plastic = _finish_plastic(layout, rule, plastic, weights, trace, spikes)
        pre_trace = math.exp(-dt / rule.tau_plus) * pre_trace + spikes
        post_trace = math.exp(-dt / rule.tau_minus) * post_trace + spikes
    state = SparseSpikingState(
        potential, refractory, spikes, readout, pre_trace, post_trace, plastic
    )
    return action, state


__all__ = [
    "SparseRatePolicy",
    "SparseRateState",
    "SparseSpikingPolicy",
    "SparseSpikingState",
]
