"""Plasticity: per-edge eligibility traces and three-factor weight updates.

Every plastic edge keeps an eligibility trace `e` that records recent pre/post
co-activity, and its weight changes only when a third, modulatory factor `m(t)`
arrives (Fremaux & Gerstner 2016, "Neuromodulated spike-timing-dependent
plasticity, and theory of three-factor learning rules"):

    e <- lambda * e + increment(pre, post)
    w <- clip(w + eta * m(t) * e, w_min, w_max)

Rules (the coefficients are evolvable leaves of the genome):

- `HebbianRule`, for rate networks: the ABCD rule
  `increment = A pre post + B pre + C post + D` (Soltoggio et al. 2018, "Born to
  learn"; Najarro & Risi 2020, "Meta-learning through Hebbian plasticity in random
  networks").
- `STDPRule`, for spiking networks: pair-based STDP into the trace, from per-neuron
  pre/post spike traces `x` (decay `tau_plus`) and `y` (decay `tau_minus`) taken
  before this step's spikes: `increment = a_plus x[src] s[dst] - a_minus y[dst] s[src]`
  (Izhikevich 2007, "Solving the distal reward problem through linkage of STDP and
  dopamine signaling").

The modulatory signal is either the reward handed to `policy.reinforce`
(`modulation="reward"`) or the activity of a designated neuromodulatory neuron
(`modulation="neuron"`). Plastic weights and traces live in the lifetime state,
never in the genome.

Reward modulation is a bounded reward prediction error (Fremaux & Gerstner 2016,
sec. 4: the third factor must be "reward minus expected reward", otherwise a
rule driven by a reward of non-zero mean is plain Hebbian learning):

    r~ = clip(r, -reward_bound, reward_bound)
    m  = r~ - E[r~],    E[r~]: running average (decay beta), bias-corrected

Both parts are defaults because without them the rule does not learn from
reward at all. Measured on L4 over a 1e5-step lifetime (docs/studies.md): with
`m = r` (every eqxevo reward is >= 0 but for penalties) 99% of the plastic
weights sat at the +-2 bound for every genome with a positive learning rate
(the initial genome's 0.01 included): plain Hebbian growth; and one L4 death
(reward -100) moved weights by up to `eta * 100 * |e|` = 10, 2.5 times the
bound's width. With the bounded prediction error the initial genome keeps none
at the bound; genomes with |eta| of 0.04-0.17 (SNES's first samples) still
drift there (33-58% of the weights, averaged over the lifetime): bounded
updates of zero mean still wander over 1e5 steps, and evolution sets eta.

Trace dtype: traces can be stored in float16 or bfloat16 to halve their memory.
Rounding a decaying trace to nearest stalls it (bfloat16 keeps 1.0 * 0.999 == 1.0
forever) and biases it; here every update is computed in float32 and then
*stochastically rounded* to the storage dtype (unbiased: the expected stored value
equals the float32 value), with random bits from a counter-based hash of
(genome seed, step, edge). docs/performance.md has the drift measurement.
"""

import math
from typing import Literal

import equinox as eqx
import jax.numpy as jnp
from jax import lax
from jax.typing import DTypeLike

from .._types import Array, Float, Scalar, UInt32

Modulation = Literal["reward", "neuron"]
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


def random_bits(
    seed: UInt32[Array, "*#batch"],
    step: UInt32[Array, "*#batch"],
    shape: tuple[int, ...],
) -> UInt32[Array, "..."]:
    """Counter-based random bits `[*shape, *batch]` for one step of one genome.

    Each (seed, step, element) triple gives an independent-looking uint32; cheap
    enough to draw for every edge at every step (a few integer ops per element).
    """
    stream = _mix32(seed ^ _mix32(step * jnp.uint32(0x9E3779B9) + jnp.uint32(1)))
    index = lax.iota(jnp.uint32, math.prod(shape)).reshape(shape + (1,) * seed.ndim)
    return _mix32(index * jnp.uint32(0x85EBCA6B) ^ stream)


def stochastic_round(
    value: Float[Array, "*#shape"], dtype: DTypeLike, bits: UInt32[Array, "*#shape"]
) -> Array:
    """Round float32 `value` to `dtype`, up or down with probability by distance.

    `E[result] == value` (exactly, up to the 24-bit resolution of the random
    threshold), so repeated updates do not drift the way round-to-nearest does.
    Non-finite values round to nearest.
    """
    dtype = jnp.dtype(dtype)
    if dtype == jnp.float32:
        return value.astype(jnp.float32)
    nearest = value.astype(dtype)
    nearest32 = nearest.astype(jnp.float32)
    residual = value - nearest32
    toward = jnp.where(residual > 0, jnp.inf, -jnp.inf).astype(dtype)
    neighbour = jnp.nextafter(nearest, toward)
    gap = neighbour.astype(jnp.float32) - nearest32
    usable = jnp.isfinite(gap) & (gap != 0) & jnp.isfinite(value)
    probability = jnp.where(usable, residual / jnp.where(usable, gap, 1.0), 0.0)
    uniform = (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)
    return jnp.where(uniform < probability, neighbour, nearest)


def update_trace(
    trace: Array,
    increment: Array,
    decay: float | Array,
    bits: UInt32[Array, "..."] | None = None,
) -> Array:
    """`decay * trace + increment`, computed in float32, stored in `trace.dtype`.

    16-bit traces need `bits` (see `random_bits`) for stochastic rounding.
    """
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
    step = (learning_rate * modulation) * trace.astype(jnp.float32)
    updated = jnp.clip(weights + step, bounds[0], bounds[1])
    return jnp.where(mask, updated, jnp.zeros((), weights.dtype))


# -- rules ------------------------------------------------------------------------


def _check_common(
    learning_rate: float,
    modulation: str,
    modulator: int | None,
    weight_bounds: tuple[float, float],
    trace_dtype: str,
    baseline_decay: float | None,
    reward_bound: float | None,
) -> tuple[tuple[float, float], str]:
    if modulation not in ("reward", "neuron"):
        raise ValueError(f"modulation must be 'reward' or 'neuron'; got {modulation!r}")
    if modulation == "neuron" and (
        isinstance(modulator, bool) or not isinstance(modulator, int) or modulator < 0
    ):
        raise ValueError(
            "modulation='neuron' needs modulator=<index of the neuromodulatory "
            f"neuron> (a non-negative int); got modulator={modulator!r}"
        )
    if modulation == "reward" and modulator is not None:
        raise ValueError(
            f"modulator={modulator!r} is only used with modulation='neuron'"
        )
    lo, hi = (float(b) for b in weight_bounds)
    if not lo < hi:
        raise ValueError(
            f"weight_bounds must be (low, high) with low < high; got {weight_bounds!r}"
        )
    if baseline_decay is not None and not 0.0 <= baseline_decay < 1.0:
        raise ValueError(
            f"baseline_decay must be None or in [0, 1); got {baseline_decay!r}"
        )
    if reward_bound is not None and not (
        isinstance(reward_bound, int | float)
        and not isinstance(reward_bound, bool)
        and 0.0 < reward_bound < math.inf
    ):
        raise ValueError(
            f"reward_bound must be None or a finite number > 0; got {reward_bound!r}"
        )
    if not math.isfinite(learning_rate):
        raise ValueError(f"learning_rate must be finite; got {learning_rate!r}")
    return (lo, hi), str(check_trace_dtype(trace_dtype))


class HebbianRule(eqx.Module):
    """ABCD Hebbian eligibility with a three-factor update, for rate networks.

    Arguments:
        a, b, c, d: initial coefficients of `A pre post + B pre + C post + D`.
        learning_rate: initial eta.
        trace_decay: lambda, the per-step decay of the eligibility trace, in [0, 1).
        modulation: `"reward"` (m = the bounded reward from `reinforce` minus its
            running average; see the module docstring) or `"neuron"` (m = rate of
            neuron `modulator`).
        modulator: index of the neuromodulatory neuron (modulation="neuron").
        weight_bounds: plastic weights stay in `[low, high]`.
        trace_dtype: `"float32"`, `"float16"` or `"bfloat16"` (16-bit traces are
            stochastically rounded; see the module docstring).
        baseline_decay: decay of the running reward average subtracted from the
            reward (default 0.99, about 100 steps); None: m = reward.
        reward_bound: the reward is clipped to `[-reward_bound, reward_bound]`
            before it modulates (default 1.0); None: unclipped.

    Attributes:
        a, b, c, d, learning_rate: scalars, evolvable.
    """

    a: Scalar
    b: Scalar
    c: Scalar
    d: Scalar
    learning_rate: Scalar
    trace_decay: float = eqx.field(static=True)
    modulation: str = eqx.field(static=True)
    modulator: int | None = eqx.field(static=True)
    weight_bounds: tuple[float, float] = eqx.field(static=True)
    trace_dtype: str = eqx.field(static=True)
    baseline_decay: float | None = eqx.field(static=True)
    reward_bound: float | None = eqx.field(static=True)

    def __init__(
        self,
        a: float = 1.0,
        b: float = 0.0,
        c: float = 0.0,
        d: float = 0.0,
        *,
        learning_rate: float = 0.01,
        trace_decay: float = 0.9,
        modulation: Modulation = "reward",
        modulator: int | None = None,
        weight_bounds: tuple[float, float] = (-2.0, 2.0),
        trace_dtype: str = "float32",
        baseline_decay: float | None = 0.99,
        reward_bound: float | None = 1.0,
    ):
        if not 0.0 <= trace_decay < 1.0:
            raise ValueError(f"trace_decay must be in [0, 1); got {trace_decay!r}")
        self.weight_bounds, self.trace_dtype = _check_common(
            learning_rate,
            modulation,
            modulator,
            weight_bounds,
            trace_dtype,
            baseline_decay,
            reward_bound,
        )
        self.a, self.b, self.c, self.d = (
            jnp.asarray(v, jnp.float32) for v in (a, b, c, d)
        )
        self.learning_rate = jnp.asarray(learning_rate, jnp.float32)
        self.trace_decay = float(trace_decay)
        self.modulation, self.modulator = modulation, modulator
        self.baseline_decay = baseline_decay
        self.reward_bound = None if reward_bound is None else float(reward_bound)

    def increment(self, pre: Array, post: Array) -> Array:
        """`A pre post + B pre + C post + D` (broadcasting)."""
        return self.a * pre * post + self.b * pre + self.c * post + self.d


class STDPRule(eqx.Module):
    """Pair-based STDP eligibility with a three-factor update, for spiking networks.

    Arguments:
        a_plus, a_minus: initial potentiation / depression amplitudes.
        learning_rate: initial eta.
        tau_plus, tau_minus: time constants of the pre / post spike traces.
        tau_eligibility: time constant of the per-edge eligibility trace.
        modulation, modulator, weight_bounds, trace_dtype, baseline_decay,
        reward_bound: as for `HebbianRule` (with modulation="neuron", m is the
            modulator's spike).

    Attributes:
        a_plus, a_minus, learning_rate: scalars, evolvable.
    """

    a_plus: Scalar
    a_minus: Scalar
    learning_rate: Scalar
    tau_plus: float = eqx.field(static=True)
    tau_minus: float = eqx.field(static=True)
    tau_eligibility: float = eqx.field(static=True)
    modulation: str = eqx.field(static=True)
    modulator: int | None = eqx.field(static=True)
    weight_bounds: tuple[float, float] = eqx.field(static=True)
    trace_dtype: str = eqx.field(static=True)
    baseline_decay: float | None = eqx.field(static=True)
    reward_bound: float | None = eqx.field(static=True)

    def __init__(
        self,
        a_plus: float = 1.0,
        a_minus: float = 1.0,
        *,
        learning_rate: float = 0.01,
        tau_plus: float = 20.0,
        tau_minus: float = 20.0,
        tau_eligibility: float = 200.0,
        modulation: Modulation = "reward",
        modulator: int | None = None,
        weight_bounds: tuple[float, float] = (-2.0, 2.0),
        trace_dtype: str = "float32",
        baseline_decay: float | None = 0.99,
        reward_bound: float | None = 1.0,
    ):
        for name, value in (
            ("tau_plus", tau_plus),
            ("tau_minus", tau_minus),
            ("tau_eligibility", tau_eligibility),
        ):
            if not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"{name} must be > 0; got {value!r}")
        self.weight_bounds, self.trace_dtype = _check_common(
            learning_rate,
            modulation,
            modulator,
            weight_bounds,
            trace_dtype,
            baseline_decay,
            reward_bound,
        )
        self.a_plus = jnp.asarray(a_plus, jnp.float32)
        self.a_minus = jnp.asarray(a_minus, jnp.float32)
        self.learning_rate = jnp.asarray(learning_rate, jnp.float32)
        self.tau_plus, self.tau_minus = float(tau_plus), float(tau_minus)
        self.tau_eligibility = float(tau_eligibility)
        self.modulation, self.modulator = modulation, modulator
        self.baseline_decay = baseline_decay
        self.reward_bound = None if reward_bound is None else float(reward_bound)

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
    """

    weights: Array
    trace: Array
    modulation: Array
    baseline: Array
    seed: Array
    step: Array


def reward_modulation(
    rule: Rule, reward: Array, baseline: Array, seen: Array | None = None
) -> tuple[Array, Array]:
    """`(m, new_baseline)` from a reward: `m = clip(r) - expected` (see the module
    docstring; `clip(r)` alone without a baseline, `r` without a bound).

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
        expected = jnp.where(
            seen > 0, baseline / jnp.where(seen > 0, unbiased, 1.0), reward
        )
    return reward - expected, beta * baseline + (1.0 - beta) * reward


__all__ = [
    "TRACE_DTYPES",
    "HebbianRule",
    "Modulation",
    "PlasticState",
    "Rule",
    "STDPRule",
    "check_trace_dtype",
    "random_bits",
    "reward_modulation",
    "stochastic_round",
    "three_factor_update",
    "update_trace",
]
