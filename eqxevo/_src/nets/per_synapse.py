"""Per-synapse plasticity: the ABCD rule with its own coefficients on every edge.

Najarro & Risi 2020, "Meta-learning through Hebbian plasticity in random
networks" (NeurIPS); their code: enajx/HebbianMetaLearning.
"""

from typing import Any, TypeVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jax import lax

from .._types import Array, Float, PRNGKey
from .plasticity import AbstractRule, Modulation, abcd_increment, check_trace_decay
from .propagate import AbstractLayout

_Rule = TypeVar("_Rule", bound="PerSynapseHebbianRule")


def per_edge(name: str) -> Any:
    """A field converter for a per-edge coefficient `name`: a number, or one value
    per edge slot, as a finite float32 array (0-d or 1-d)."""

    def convert(value: Any) -> Array:
        array = jnp.asarray(value, jnp.float32)
        if array.ndim > 1:
            raise ValueError(
                f"{name} must be a number or a list with one value per edge slot; "
                f"got an array of shape {array.shape}"
            )
        if not bool(jnp.all(jnp.isfinite(array))):
            raise ValueError(f"{name} must be finite; got {value!r}")
        return array

    return convert


def edge_sized(name: str, value: Array, num_edges: int) -> Array:
    """A per-edge coefficient `[E]`: a 0-d `value` repeated, or `value` itself.

    Raises:
        ValueError: `value` has another number of values than `num_edges`.
    """
    if value.ndim == 0:
        return jnp.full((num_edges,), value)
    if value.shape != (num_edges,):
        raise ValueError(
            f"{name} has {value.shape[0]} values; the network has {num_edges} edge "
            "slots (E_max)"
        )
    return value


INITIAL_WEIGHTS = ("evolved", "uniform", "normal")
"""Where a `PerSynapseHebbianRule` network's weights at birth come from: the
genome ("evolved"), or a fresh draw every lifetime, U(-s, s) ("uniform") or
N(0, s^2) ("normal"), s = `initial_scale`."""


def _initial_weights(value: Any) -> str:
    if value not in INITIAL_WEIGHTS:
        shown = " | ".join(map(repr, INITIAL_WEIGHTS))
        raise ValueError(f"initial_weights must be one of {shown}; got {value!r}")
    return value


def _scale(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value < float("inf")
    ):
        raise ValueError(f"initial_scale must be a finite number > 0; got {value!r}")
    return float(value)


def _flag(name: str) -> Any:
    def convert(value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false; got {value!r}")
        return value

    return convert


_PER_EDGE = ("a", "b", "c", "d", "learning_rate")


# unannotated: eqx.tree_at calls it on a rule of wrapped leaves
def _coefficients(rule):
    return tuple(getattr(rule, name) for name in _PER_EDGE)


def normalise_weights(weights: Float[Array, "*native batch"]) -> Array:
    """`w / max |w|` over every axis but the last (the population's, trailing).

    Najarro & Risi 2020's per-layer normalisation; where every weight is 0 they
    stay 0. Masked-out entries are 0, so they never set the maximum.
    """
    axes = tuple(range(weights.ndim - 1))
    largest = jnp.max(jnp.abs(weights), axis=axes, keepdims=True)
    return weights / jnp.where(largest > 0, largest, 1.0)


class PerSynapseHebbianRule(AbstractRule):
    """The ABCD rule with its own coefficients on every edge, for rate networks.

        increment[e] = A[e] pre post + B[e] pre + C[e] post + D[e]
        e <- lambda e + increment;   w <- clip(w + eta[e] m e, w_min, w_max)
        w <- w / max |w|                                   (normalise)

    (Najarro & Risi 2020, "Meta-learning through Hebbian plasticity in random
    networks", NeurIPS; their code, enajx/HebbianMetaLearning, rule "ABCD_lr").
    With the defaults (modulation="none": m = 1; trace_decay=0: e is this
    step's increment) the update is theirs, `dw = eta (A pre post + B pre +
    C post + D)` on every step. Their central condition is that the weights at
    birth are random, drawn afresh every lifetime, so that everything the
    network does it must learn within the lifetime: `initial_weights="uniform"`
    (U(-s, s), their default with s = 0.1) or "normal" (N(0, s^2)); the genome
    then holds no weights, only the rule's coefficients (and the input
    weights). With "evolved" (the default) the weights at birth are the
    genome's, co-evolved with the rule. They divide each layer's weights by its largest
    magnitude after every update; a sparse recurrent network has one layer, its
    recurrent weight matrix, so `normalise` divides every plastic weight by the
    largest |w| of the whole network. (Per target neuron would scale every
    neuron's strongest input back to 1, erasing what the rule learnt about which
    neurons matter.)

    A, B, C, D and eta are evolvable leaves with one value per edge slot `[E]`
    once the rule is in a network (`for_edges`); before, each may be a number
    (the same on every edge) or already `[E]`.

    Arguments:
        a, b, c, d: initial coefficients (a number or one per edge slot).
        learning_rate: initial eta (likewise).
        trace_decay: lambda in [0, 1) (default 0: no eligibility memory).
        normalise: divide the weights by their largest magnitude after every
            update (default true).
        modulation: default "none" (m = 1); "reward" or "neuron" make it a
            three-factor rule like `HebbianRule`.
        initial_weights: "evolved" (the genome's), "uniform" or "normal" (drawn
            every lifetime; see above).
        initial_scale: s of the draw (default 0.1).
        modulator, weight_bounds, trace_dtype, baseline_decay, reward_bound:
            see `AbstractRule`.

    Example:
        >>> rule = PerSynapseHebbianRule(learning_rate=0.05)
        >>> policy = SparseRatePolicy(3, 2, topology, plasticity=rule, key=key)
        >>> policy.rule.a.shape   # (E_max,)
    """

    a: Float[Array, "..."] = eqx.field(default=1.0, converter=per_edge("a"))
    b: Float[Array, "..."] = eqx.field(default=0.0, converter=per_edge("b"))
    c: Float[Array, "..."] = eqx.field(default=0.0, converter=per_edge("c"))
    d: Float[Array, "..."] = eqx.field(default=0.0, converter=per_edge("d"))
    learning_rate: Float[Array, "..."] = eqx.field(
        default=0.01, converter=per_edge("learning_rate"), kw_only=True
    )
    modulation: Modulation = eqx.field(default="none", static=True, kw_only=True)
    trace_decay: float = eqx.field(
        default=0.0, static=True, kw_only=True, converter=check_trace_decay
    )
    normalise: bool = eqx.field(
        default=True, static=True, kw_only=True, converter=_flag("normalise")
    )
    initial_weights: str = eqx.field(
        default="evolved", static=True, kw_only=True, converter=_initial_weights
    )
    initial_scale: float = eqx.field(
        default=0.1, static=True, kw_only=True, converter=_scale
    )

    @property
    def draws_weights(self) -> bool:
        """Whether the weights at birth are drawn every lifetime (not evolved)."""
        return self.initial_weights != "evolved"

    def draw_weights(self, key: PRNGKey, num_edges: int) -> Float[Array, " edges"]:
        """Weights at birth for one lifetime, one per edge slot, in edge-list
        order: U(-s, s) or N(0, s^2) (`initial_weights`)."""
        s = self.initial_scale
        if self.initial_weights == "normal":
            return s * jr.normal(key, (num_edges,), jnp.float32)
        return jr.uniform(key, (num_edges,), jnp.float32, -s, s)

    def eligibility_decay(self, dt: float) -> float:
        del dt
        return self.trace_decay

    def increment(self, pre: Array, post: Array) -> Array:
        """`A pre post + B pre + C post + D`, per native entry (see `in_native`)."""
        return abcd_increment(self.a, self.b, self.c, self.d, pre, post)

    def for_edges(self: _Rule, num_edges: int) -> _Rule:
        values = tuple(
            edge_sized(name, value, num_edges)
            for name, value in zip(_PER_EDGE, _coefficients(self), strict=True)
        )
        return eqx.tree_at(_coefficients, self, values)

    def in_native(self: _Rule, layout: AbstractLayout) -> _Rule:
        # The coefficients are the genome's, so inside a rollout's scan they are
        # loop invariant; the barrier keeps XLA from fusing their conversion into
        # the step, so that it hoists it out of the loop (as a sparse policy's
        # fixed weights).
        values = tuple(
            lax.optimization_barrier(layout.to_native(v)) for v in _coefficients(self)
        )
        return eqx.tree_at(_coefficients, self, values)

    def update(
        self, weights: Array, trace: Array, modulation: Array, mask: Array
    ) -> Array:
        weights = super().update(weights, trace, modulation, mask)
        return normalise_weights(weights) if self.normalise else weights


__all__ = [
    "INITIAL_WEIGHTS",
    "PerSynapseHebbianRule",
    "edge_sized",
    "normalise_weights",
    "per_edge",
]
