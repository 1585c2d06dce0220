"""Plasticity: Hebbian and STDP rules, eligibility traces, three-factor updates.

See docs/networks.md ("Plasticity") for the rules, reward modulation and 16-bit traces.
"""

import abc
import dataclasses
import math
from typing import Any, Literal, TypeVar

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from .._checks import int_at_least, one_of, positive_number
from .._types import Array, Float, Scalar, UInt32
from .propagate import AbstractLayout

Modulation = Literal["reward", "neuron", "none"]
_Rule = TypeVar("_Rule", bound="AbstractRule")
MODULATIONS: tuple[str, ...] = ("reward", "neuron", "none")
TRACE_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")


def check_trace_dtype(trace_dtype: DTypeLike) -> jnp.dtype:
    """The numpy dtype for a supported trace dtype name.

    Raises:
        ValueError: `trace_dtype` is not one of `TRACE_DTYPES`.
    """
    name = getattr(trace_dtype, "__name__", trace_dtype)
    name = str(jnp.dtype(name)) if not isinstance(name, str) else name
    if name not in TRACE_DTYPES:
        raise ValueError(
            f"trace_dtype must be one of {', '.join(map(repr, TRACE_DTYPES))}; got "
            f"{trace_dtype!r}"
        )
    return jnp.dtype(name)


# -- random bits for stochastic rounding ------------------------------------------


def _mix32(x: Array) -> Array:
    """A 32-bit integer finaliser (Wellons' "lowbias32"); uint32 in, uint32 out."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x21F0AAAD)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x735A2D97)
    return x ^ (x >> 15)


def bit_stream(
    seed: UInt32[Array, "*#batch"], step: UInt32[Array, "*#batch"]
) -> UInt32[Array, "*#batch"]:
    """The stream word of one genome's step, which `element_bits` mixes per element."""
    # step times the golden ratio (a Weyl sequence) spreads consecutive steps
    # over all 32 bits before they meet the seed
    return _mix32(seed ^ _mix32(step * jnp.uint32(0x9E3779B9) + jnp.uint32(1)))


def element_bits(
    index: UInt32[Array, "*#shape"], stream: UInt32[Array, "*#shape"]
) -> UInt32[Array, "*#shape"]:
    """The random bits of element `index` (row-major in the native shape)."""
    # murmur3's multiplier likewise spreads neighbouring indices apart
    return _mix32(index * jnp.uint32(0x85EBCA6B) ^ stream)


def random_bits(
    seed: UInt32[Array, "*#batch"],
    step: UInt32[Array, "*#batch"],
    shape: tuple[int, ...],
) -> UInt32[Array, "..."]:
    """Counter-based random bits `[*shape, *batch]` for one step of one genome.

    Each (seed, step, element) triple gives an independent-looking uint32; cheap
    enough to draw for every edge at every step (a few integer ops per element).
    """
    index = lax.iota(jnp.uint32, math.prod(shape)).reshape(shape + (1,) * seed.ndim)
    return element_bits(index, bit_stream(seed, step))


def widen(value: Array) -> Float[Array, "*shape"]:
    """The float32 value of a float16/bfloat16 array, converted by its bits.

    Equal to `value.astype(jnp.float32)`, but not a conversion XLA can fold: by
    default XLA:GPU rewrites float32 -> 16-bit -> float32 as the identity
    (`xla_allow_excess_precision`), which made stochastic rounding round to
    nearest on an H200. Float16's subnormals are their mantissa times 2**-24.
    """
    half = lax.bitcast_convert_type(value, jnp.uint16).astype(jnp.uint32)
    if value.dtype == jnp.bfloat16:
        return lax.bitcast_convert_type(half << 16, jnp.float32)
    sign = (half >> 15) << 31
    exponent = (half >> 10) & jnp.uint32(0x1F)
    mantissa = half & jnp.uint32(0x3FF)
    # rebias 15 -> 127; the all-ones exponent (inf, nan) stays all ones
    rebiased = jnp.where(exponent == 0x1F, jnp.uint32(0xFF), exponent + 112)
    normal = lax.bitcast_convert_type(
        sign | (rebiased << 23) | (mantissa << 13), jnp.float32
    )
    tiny = mantissa.astype(jnp.int32).astype(jnp.float32) * jnp.float32(2.0**-24)
    tiny = jnp.where(sign != 0, -tiny, tiny)
    return jnp.where(exponent == 0, tiny, normal)


def round_between(
    value: Float[Array, "*#shape"],
    nearest: Array,
    neighbour: Array,
    bits: UInt32[Array, "*#shape"],
) -> Array:
    """`neighbour` with probability `|value - nearest| / |neighbour - nearest|`, else
    `nearest`: unbiased rounding of float32 `value` between two 16-bit values.

    `bits` give the uniform draw (their top 24 bits); where the gap is zero or not
    finite, or `value` is not finite, the result is `nearest`. Both candidates are
    widened by their bits (`widen`), so no compiler folds the rounding away.
    """
    nearest32 = widen(nearest)
    residual = value - nearest32
    gap = widen(neighbour) - nearest32
    usable = jnp.isfinite(gap) & (gap != 0) & jnp.isfinite(value)
    probability = jnp.where(usable, residual / jnp.where(usable, gap, 1.0), 0.0)
    # the top 24 bits: every such uniform is exact in float32
    uniform = (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)
    return jnp.where(uniform < probability, neighbour, nearest)


def stochastic_round(
    value: Float[Array, "*#shape"], dtype: DTypeLike, bits: UInt32[Array, "*#shape"]
) -> Array:
    """Round float32 `value` to `dtype`, up or down with probability by distance.

    `E[result] == value` (exactly, up to the 24-bit resolution of the random
    threshold), so repeated updates do not drift the way round-to-nearest does.
    Non-finite values round to nearest. The same bits on a GPU, with no XLA flag
    (`widen`).
    """
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return value.astype(jnp.float32)
    nearest = value.astype(dtype)
    residual = value - widen(nearest)
    # the other candidate: the next representable value on the residual's side
    toward = jnp.where(residual > 0, jnp.inf, -jnp.inf).astype(dtype)
    return round_between(value, nearest, jnp.nextafter(nearest, toward), bits)


def update_trace(
    trace: Array,
    increment: Array,
    decay: float | Array,
    bits: UInt32[Array, "..."] | None = None,
) -> Array:
    """`decay * trace + increment`, computed in float32, stored in `trace.dtype`.

    16-bit traces need `bits` (see `random_bits`) for stochastic rounding.
    """
    # widened once, rounded once: a 16-bit trace never sees a 16-bit product
    value = decay * trace.astype(jnp.float32) + increment
    if trace.dtype == jnp.float32:
        return value
    if bits is None:
        raise ValueError(
            f"a {trace.dtype} trace needs random bits for stochastic rounding"
        )
    return stochastic_round(value, trace.dtype, bits)


def three_factor_update(
    weights: Array,
    trace: Array,
    modulation: Array,
    learning_rate: Array,
    bounds: tuple[float, float],
    mask: Array,
) -> Array:
    """`clip(w + eta * m * e, *bounds)` on active edges; masked entries stay 0."""
    # (eta m) first, one scalar per genome: the order the fused kernel uses too
    step = (learning_rate * modulation) * trace.astype(jnp.float32)
    updated = jnp.clip(weights + step, bounds[0], bounds[1])
    return jnp.where(mask, updated, jnp.zeros((), weights.dtype))


def abcd_increment(
    a: Array, b: Array, c: Array, d: Array, pre: Array, post: Array
) -> Array:
    """The ABCD Hebbian term `A pre post + B pre + C post + D` (broadcasting)."""
    return a * pre * post + b * pre + c * post + d


# -- rules ------------------------------------------------------------------------
# Rules are dataclasses: each field is a constructor argument (the converters
# check and normalise it), so a rule's TOML table is its list of fields.


def _float32(value: Any) -> Array:
    return jnp.asarray(value, jnp.float32)


def _learning_rate(value: Any) -> Array:
    if not math.isfinite(value):
        raise ValueError(f"learning_rate must be finite; got {value!r}")
    return _float32(value)


def _bounds(value: Any) -> tuple[float, float]:
    lo, hi = (float(b) for b in value)
    if not lo < hi:
        raise ValueError(
            f"weight_bounds must be (low, high) with low < high; got {value!r}"
        )
    return lo, hi


def _trace_dtype(value: Any) -> str:
    return str(check_trace_dtype(value))


def _baseline_decay(value: Any) -> Any:
    if value is not None and not 0.0 <= value < 1.0:
        raise ValueError(f"baseline_decay must be None or in [0, 1); got {value!r}")
    return value


def _reward_bound(value: Any) -> float | None:
    return None if value is None else positive_number("reward_bound", value)


def check_trace_decay(value: Any) -> float:
    """`value` as a float, checked: an eligibility-trace decay lambda in [0, 1).

    Raises:
        ValueError: it is not in [0, 1).
    """
    if not 0.0 <= value < 1.0:
        raise ValueError(f"trace_decay must be in [0, 1); got {value!r}")
    return float(value)


def _time_constant(name: str) -> Any:
    return lambda value: positive_number(name, value)


def _static(default: Any, converter: Any = None) -> Any:
    """A static keyword-only field (configuration, never evolved)."""
    if converter is None:
        return eqx.field(default=default, static=True, kw_only=True)
    return eqx.field(default=default, static=True, kw_only=True, converter=converter)


def _coefficient(
    default: float, converter: Any = _float32, kw_only: bool = False
) -> Any:
    """An evolvable scalar field (a float32 leaf of the genome)."""
    return eqx.field(default=default, converter=converter, kw_only=kw_only)


class AbstractRule(eqx.Module):
    """A three-factor rule: an eligibility trace per edge, a modulated weight update.

        e <- lambda e + increment(pre, post)
        w <- clip(w + eta m e, w_min, w_max)

    (Fremaux & Gerstner 2016, "Neuromodulated spike-timing-dependent plasticity,
    and theory of three-factor learning rules"). A rule defines `increment` and
    its coefficients; the configuration of the update is shared:

    Arguments:
        learning_rate: initial eta (evolvable).
        modulation: `"reward"` (m = the bounded reward from `reinforce` minus
            its running average; see `reward_modulation`), `"neuron"` (m = the
            activity of neuron `modulator`) or `"none"` (m = 1: plain Hebbian
            learning, every step; not in the fused kernel).
        modulator: index of the neuromodulatory neuron (modulation="neuron").
        weight_bounds: plastic weights stay in `[low, high]`.
        trace_dtype: `"float32"`, `"float16"` or `"bfloat16"` (16-bit traces are
            stochastically rounded: `stochastic_round`).
        baseline_decay: decay of the running reward average subtracted from the
            reward (default 0.99, about 100 steps); None: m = reward.
        reward_bound: the reward is clipped to `[-reward_bound, reward_bound]`
            before it modulates (default 1.0); None: unclipped.
    """

    learning_rate: eqx.AbstractVar[Scalar]
    modulation: Modulation = _static("reward")
    modulator: int | None = _static(None)
    weight_bounds: tuple[float, float] = _static((-2.0, 2.0), _bounds)
    trace_dtype: str = _static("float32", _trace_dtype)
    baseline_decay: float | None = _static(0.99, _baseline_decay)
    reward_bound: float | None = _static(1.0, _reward_bound)

    def __check_init__(self) -> None:
        one_of("modulation", self.modulation, MODULATIONS)
        if self.modulation == "neuron":
            name = (
                "modulator (the neuromodulatory neuron, needed by modulation='neuron')"
            )
            int_at_least(name, self.modulator, 0)
        elif self.modulator is not None:
            raise ValueError(
                f"modulator={self.modulator!r} is only used with modulation='neuron'"
            )

    @abc.abstractmethod
    def eligibility_decay(self, dt: float) -> float:
        """lambda: the per-step decay of the eligibility trace, for steps of `dt`."""

    def step_modulation(self, previous: Array, activity: Array) -> Array:
        """m after a step: the modulator's activity `[N, ...]` with
        modulation="neuron", 1 with "none", else `previous` (the last reward's m)."""
        if self.modulation == "none":
            return jnp.ones_like(previous)
        if self.modulation != "neuron":
            return previous
        assert self.modulator is not None
        return activity[self.modulator]

    def for_edges(self: _Rule, num_edges: int) -> _Rule:
        """The rule for a network of `num_edges` edge slots (per-edge
        coefficients get that length); a rule with shared coefficients as is."""
        del num_edges
        return self

    def in_native(self: _Rule, layout: AbstractLayout) -> _Rule:
        """The rule with its per-edge coefficients in `layout`'s native shape,
        population-last (`[E, B]` -> `[*native, B]`); shared ones as is."""
        del layout
        return self

    def update(
        self, weights: Array, trace: Array, modulation: Array, mask: Array
    ) -> Array:
        """The three-factor weight update `clip(w + eta m e, w_min, w_max)`
        (`three_factor_update` with this rule's eta and bounds)."""
        return three_factor_update(
            weights, trace, modulation, self.learning_rate, self.weight_bounds, mask
        )


class HebbianRule(AbstractRule):
    """The ABCD Hebbian rule into a three-factor update, for rate networks.

        increment = A pre post + B pre + C post + D

    (Soltoggio et al. 2018, "Born to learn"; Najarro & Risi 2020, "Meta-learning
    through Hebbian plasticity in random networks"), with pre and post the rates
    at the two ends of an edge.

    Arguments:
        a, b, c, d: initial coefficients (evolvable).
        trace_decay: lambda, the per-step decay of the eligibility trace, in [0, 1).

    `learning_rate`, `modulation`, `modulator`, `weight_bounds`, `trace_dtype`,
    `baseline_decay` and `reward_bound` are as in `AbstractRule`.
    """

    a: Scalar = _coefficient(1.0)
    b: Scalar = _coefficient(0.0)
    c: Scalar = _coefficient(0.0)
    d: Scalar = _coefficient(0.0)
    learning_rate: Scalar = _coefficient(0.01, _learning_rate, kw_only=True)
    trace_decay: float = _static(0.9, check_trace_decay)

    def eligibility_decay(self, dt: float) -> float:
        del dt
        return self.trace_decay

    def increment(self, pre: Array, post: Array) -> Array:
        """`A pre post + B pre + C post + D` (broadcasting)."""
        return abcd_increment(self.a, self.b, self.c, self.d, pre, post)


class STDPRule(AbstractRule):
    """Pair-based STDP into a three-factor update, for spiking networks.

        increment = a_plus x[src] s[dst] - a_minus y[dst] s[src]

    from this step's spikes `s` and per-neuron spike traces `x` (decay
    `tau_plus`) and `y` (decay `tau_minus`) taken before this step's spikes
    (Izhikevich 2007, "Solving the distal reward problem through linkage of STDP
    and dopamine signaling"). The eligibility trace decays with `tau_eligibility`:
    lambda = exp(-dt / tau_eligibility).

    Arguments:
        a_plus, a_minus: initial potentiation / depression amplitudes (evolvable).
        tau_plus, tau_minus: time constants of the pre / post spike traces.
        tau_eligibility: time constant of the per-edge eligibility trace.

    `learning_rate`, `modulation`, `modulator`, `weight_bounds`, `trace_dtype`,
    `baseline_decay` and `reward_bound` are as in `AbstractRule` (with
    modulation="neuron", m is the modulator's spike).
    """

    a_plus: Scalar = _coefficient(1.0)
    a_minus: Scalar = _coefficient(1.0)
    learning_rate: Scalar = _coefficient(0.01, _learning_rate, kw_only=True)
    tau_plus: float = _static(20.0, _time_constant("tau_plus"))
    tau_minus: float = _static(20.0, _time_constant("tau_minus"))
    tau_eligibility: float = _static(200.0, _time_constant("tau_eligibility"))

    def eligibility_decay(self, dt: float) -> float:
        return math.exp(-dt / self.tau_eligibility)

    def increment(
        self, pre_trace: Array, pre_spike: Array, post_trace: Array, post_spike: Array
    ) -> Array:
        """`a_plus x_pre s_post - a_minus y_post s_pre` (broadcasting)."""
        return (
            self.a_plus * pre_trace * post_spike - self.a_minus * post_trace * pre_spike
        )


Rule = HebbianRule | STDPRule


class PlasticState(eqx.Module):
    """The plastic part of a lifetime state (all per genome).

    Attributes:
        weights: plastic weights in the layout's native format, float32.
        trace: eligibility traces, same shape, in the rule's trace dtype.
        modulation: the last modulatory signal m(t), a float32 scalar.
        baseline: running reward average (used with `baseline_decay`).
        seed, step: uint32 scalars feeding the stochastic-rounding bits.
        pending: a bool scalar, True after `reinforce` (modulation="reward"):
            the update `clip(w + eta m e)` with that m is due and not yet in
            `weights`. The next step applies it first (`settle_step`), where it
            reads the eligibility trace already stored (docs/performance.md, L4);
            read weights after `reinforce` through the policy's `settled`.
    """

    weights: Array
    trace: Array
    modulation: Array
    baseline: Array
    seed: Array
    step: Array
    pending: Array

    def advanced(
        self, weights: Array, trace: Array, modulation: Array
    ) -> "PlasticState":
        """The state after one network step: new weights, trace and m; `step + 1`."""
        return PlasticState(
            weights=weights,
            trace=trace,
            modulation=modulation,
            baseline=self.baseline,
            seed=self.seed,
            step=self.step + jnp.uint32(1),
            pending=jnp.zeros_like(self.pending),
        )


def reward_modulation(
    rule: AbstractRule, reward: Array, baseline: Array, seen: Array | None = None
) -> tuple[Array, Array]:
    """`(m, new_baseline)` from a reward: a bounded reward prediction error.

        r~ = clip(r, -reward_bound, reward_bound)
        m  = r~ - E[r~],   E[r~]: running average (decay beta), bias-corrected

    (Fremaux & Gerstner 2016, sec. 4: the third factor must be "reward minus
    expected reward", otherwise a rule driven by a reward of non-zero mean is
    plain Hebbian learning.) `clip(r)` alone without a baseline, `r` without a
    bound.

    `baseline` is the running average of the (clipped) rewards, started at 0;
    with `seen`, the number of rewards before this one, the expectation is its
    bias-corrected value `baseline / (1 - beta**seen)` (as Adam corrects its
    moments), and `m = 0` for the first reward: without the correction the
    first ~1 / (1 - beta) steps of every lifetime would see a phantom
    prediction error summing to r / (1 - beta).
    """
    reward = reward.astype(jnp.float32)
    if rule.reward_bound is not None:
        reward = jnp.clip(reward, -rule.reward_bound, rule.reward_bound)
    if rule.baseline_decay is None:
        return reward, baseline
    beta = rule.baseline_decay
    expected = baseline
    if seen is not None:
        seen = jnp.asarray(seen).astype(jnp.float32)
        unbiased = 1.0 - jnp.float32(beta) ** seen
        # the first reward has no expectation yet: it is its own (m = 0)
        expected = jnp.where(
            seen > 0, baseline / jnp.where(seen > 0, unbiased, 1.0), reward
        )
    return reward - expected, beta * baseline + (1.0 - beta) * reward


# -- one step, population-last (a sparse policy's) ----------------------------------


def plastic_step(
    layout: AbstractLayout,
    rule: AbstractRule,
    plastic: PlasticState,
    weights: Array,
    increment: Array,
    activity: Array,
    dt: float,
) -> PlasticState:
    """One network step of a three-factor rule, population-last, in the layout's
    native format: the eligibility traces take in `increment`; with modulation
    "neuron" or "none" the weights are updated too (with "reward", in
    `reinforce_step`)."""
    bits = None
    if plastic.trace.dtype != jnp.float32:
        bits = random_bits(plastic.seed, plastic.step, layout.native_shape)
    trace = update_trace(plastic.trace, increment, rule.eligibility_decay(dt), bits)
    modulation = rule.step_modulation(plastic.modulation, activity)
    if rule.modulation != "reward":  # "neuron" or "none": every step
        weights = rule.update(
            weights, trace, modulation, layout.native_mask()[..., None]
        )
    return plastic.advanced(weights, trace, modulation)


def reinforce_step(layout: AbstractLayout, data: Any) -> PlasticState:
    """The reward's modulation, population-last: `data` is `(rule, reward,
    plastic)`; returns the plastic state with the new m and baseline and the
    weight update pending (a sparse policy's `reinforce`, through
    `population_last`; `settle_step` applies it)."""
    rule, reward, plastic = data
    # `reinforce` follows the step that advanced `plastic.step`: the rewards
    # before this one number step - 1.
    seen = jnp.maximum(plastic.step.astype(jnp.float32) - 1.0, 0.0)
    modulation, baseline = reward_modulation(
        rule.in_native(layout), reward, plastic.baseline, seen
    )
    return dataclasses.replace(
        plastic,
        modulation=modulation,
        baseline=baseline,
        pending=jnp.ones_like(plastic.pending),
    )


def settle_step(layout: AbstractLayout, data: Any) -> PlasticState:
    """A pending reward-modulated update applied, population-last: `data` is
    `(rule, plastic)`; the weights `clip(w + eta m e)` where `plastic.pending`."""
    rule, plastic = data
    if rule.modulation != "reward":  # nothing is ever pending
        return plastic
    mask = layout.native_mask()[..., None]
    rule = rule.in_native(layout)
    weights = rule.update(plastic.weights, plastic.trace, plastic.modulation, mask)
    return dataclasses.replace(
        plastic,
        weights=jnp.where(plastic.pending, weights, plastic.weights),
        pending=jnp.zeros_like(plastic.pending),
    )


__all__ = [
    "MODULATIONS",
    "TRACE_DTYPES",
    "AbstractRule",
    "HebbianRule",
    "Modulation",
    "PlasticState",
    "Rule",
    "STDPRule",
    "abcd_increment",
    "bit_stream",
    "check_trace_decay",
    "check_trace_dtype",
    "element_bits",
    "plastic_step",
    "random_bits",
    "reinforce_step",
    "reward_modulation",
    "round_between",
    "settle_step",
    "stochastic_round",
    "three_factor_update",
    "update_trace",
    "widen",
]
