"""Sparse networks built from plain options, for TOML experiments.

`[net] name = "sparse_rate"` (or `"sparse_lif"`) calls these with the
environment's sizes, the `[net.options]` table and a key:

```toml
[net]
name = "sparse_rate"
[net.options]
num_neurons = 64        # N
fan_in = 8              # K edges into every neuron (or: connection_prob = 0.1)
layout = "auto"         # auto | segment | gather | dense | pallas (fused kernel)
plasticity = { learning_rate = 0.01, trace_dtype = "float16" }   # optional
```

The topology is drawn from the genome key, so one experiment seed fixes both the
connectivity and the initial weights; the whole population shares it.
"""

from collections.abc import Mapping
from typing import Any

import jax.random as jr

from .._types import PRNGKey
from .plasticity import HebbianRule, STDPRule
from .sparse import SparseRatePolicy, SparseSpikingPolicy
from .topology import Topology


def _topology(
    num_neurons: int,
    fan_in: int | None,
    connection_prob: float | None,
    num_edges: int | None,
    self_connections: bool,
    key: PRNGKey,
) -> Topology:
    if connection_prob is not None:
        if fan_in is not None:
            raise ValueError(
                "give fan_in or connection_prob, not both; got "
                f"fan_in={fan_in!r}, connection_prob={connection_prob!r}"
            )
        return Topology.random(
            num_neurons,
            connection_prob,
            num_edges=num_edges,
            self_connections=self_connections,
            key=key,
        )
    return Topology.fixed_fan_in(
        num_neurons,
        8 if fan_in is None else fan_in,
        num_edges=num_edges,
        self_connections=self_connections,
        key=key,
    )


def _rule(kind: type, plasticity: bool | Mapping[str, Any] | None) -> Any:
    if plasticity is None or plasticity is False:
        return None
    if plasticity is True:
        return kind()
    if isinstance(plasticity, Mapping):
        return kind(**plasticity)
    raise ValueError(
        "plasticity must be true/false or a table of "
        f"{kind.__name__} arguments; got {plasticity!r}"
    )


def _sparse(
    policy_cls: type,
    rule_cls: type,
    obs_size: int,
    action_size: int,
    *,
    num_neurons: int,
    fan_in: int | None,
    connection_prob: float | None,
    num_edges: int | None,
    self_connections: bool,
    plasticity: bool | Mapping[str, Any] | None,
    key: PRNGKey,
    options: Mapping[str, Any],
) -> Any:
    topology_key, weight_key = jr.split(key)
    topology = _topology(
        num_neurons, fan_in, connection_prob, num_edges, self_connections, topology_key
    )
    return policy_cls(
        obs_size,
        action_size,
        topology,
        plasticity=_rule(rule_cls, plasticity),
        key=weight_key,
        **options,
    )


def sparse_rate(
    obs_size: int,
    action_size: int,
    *,
    num_neurons: int = 64,
    fan_in: int | None = None,
    connection_prob: float | None = None,
    num_edges: int | None = None,
    self_connections: bool = False,
    plasticity: bool | Mapping[str, Any] | None = None,
    key: PRNGKey,
    **options: Any,
) -> SparseRatePolicy:
    """A `SparseRatePolicy` on a random topology.

    Arguments:
        num_neurons: N.
        fan_in: edges into every neuron (default 8, when `connection_prob` is unset).
        connection_prob: instead of `fan_in`, each edge exists with this probability.
        num_edges: E_max (default: see `Topology.fixed_fan_in` / `Topology.random`).
        self_connections: allow `i -> i` edges.
        plasticity: `true` for the default `HebbianRule`, or a table of its
            arguments (e.g. `{ learning_rate = 0.01, trace_dtype = "float16" }`).
        options: the remaining `SparseRatePolicy` arguments (`layout`, `tau`, ...).
    """
    return _sparse(
        SparseRatePolicy,
        HebbianRule,
        obs_size,
        action_size,
        num_neurons=num_neurons,
        fan_in=fan_in,
        connection_prob=connection_prob,
        num_edges=num_edges,
        self_connections=self_connections,
        plasticity=plasticity,
        key=key,
        options=options,
    )


def sparse_lif(
    obs_size: int,
    action_size: int,
    *,
    num_neurons: int = 64,
    fan_in: int | None = None,
    connection_prob: float | None = None,
    num_edges: int | None = None,
    self_connections: bool = False,
    plasticity: bool | Mapping[str, Any] | None = None,
    key: PRNGKey,
    **options: Any,
) -> SparseSpikingPolicy:
    """A `SparseSpikingPolicy` (LIF units) on a random topology.

    Arguments as for `sparse_rate`; `plasticity` builds an `STDPRule`, and
    `options` are the remaining `SparseSpikingPolicy` arguments.
    """
    return _sparse(
        SparseSpikingPolicy,
        STDPRule,
        obs_size,
        action_size,
        num_neurons=num_neurons,
        fan_in=fan_in,
        connection_prob=connection_prob,
        num_edges=num_edges,
        self_connections=self_connections,
        plasticity=plasticity,
        key=key,
        options=options,
    )


__all__ = ["sparse_lif", "sparse_rate"]
