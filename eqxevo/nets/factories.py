"""`sparse_rate` and `sparse_lif`: sparse networks from plain options (TOML).

See docs/networks.md ("Sparse networks in experiment files").
"""

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import jax.random as jr

from .._types import PRNGKey
from .plasticity import AbstractRule, HebbianRule, STDPRule
from .sparse import AbstractSparsePolicy, SparseRatePolicy, SparseSpikingPolicy
from .topology import Topology

DEFAULT_FAN_IN = 8
"""The fan-in of a factory's topology when neither fan_in nor connection_prob is set."""

Policy = TypeVar("Policy", bound=AbstractSparsePolicy[Any])

# Arguments that are not options: the sizes and the key (and, of the policy
# class, what the factory builds itself).
_NOT_OPTIONS = {"obs_size", "action_size", "key"}
_BUILT = {"topology", "plasticity"}


def _rule(
    kind: type[HebbianRule] | type[STDPRule], plasticity: Any
) -> AbstractRule | None:
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


def _check_connectivity(fan_in: Any, connection_prob: Any) -> None:
    if fan_in is not None and connection_prob is not None:
        raise ValueError(
            "give fan_in or connection_prob, not both; got "
            f"fan_in={fan_in!r}, connection_prob={connection_prob!r}"
        )


def _defaults(fn: Any, skip: set[str] = _NOT_OPTIONS) -> dict[str, Any]:
    """The options of `fn`'s signature with their defaults (None when unset)."""
    return {
        p.name: None if p.default is p.empty else p.default
        for p in inspect.signature(fn).parameters.values()
        if p.name not in skip and p.kind is not p.VAR_KEYWORD
    }


def _plain(value: Any) -> Any:
    """`value` as TOML holds it: tuples as lists, mappings as dicts."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class SparseNet(Generic[Policy]):
    """A sparse network factory: `sparse_rate` and `sparse_lif` are the two.

    `factory(obs_size, action_size, *, ..., key, **options)` draws a topology
    from `key`, builds the plasticity rule from `plasticity`, and passes the
    remaining `options` to the policy class; `factory.effective_options(options)`
    lists every option with the value it takes.

    Arguments:
        name: the factory's name (`[net] name = ...`).
        policy: the policy class it builds.
        rule: the plasticity rule class `plasticity = true` (or a table) builds.
    """

    def __init__(
        self,
        name: str,
        policy: Callable[..., Policy],
        rule: type[HebbianRule] | type[STDPRule],
    ) -> None:
        self.__name__ = self.__qualname__ = name
        self.policy = policy
        self.rule = rule

    def __repr__(self) -> str:
        policy = getattr(self.policy, "__name__", self.policy)
        return f"<sparse network factory {self.__name__}: {policy}>"

    def __call__(
        self,
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
    ) -> Policy:
        """A policy on a random topology drawn from `key`.

        Arguments:
            obs_size, action_size: the environment's sizes.
            num_neurons: N.
            fan_in: edges into every neuron (`Topology.fixed_fan_in`; default 8
                when `connection_prob` is unset).
            connection_prob: instead of `fan_in`, each edge exists with this
                probability (`Topology.random`).
            num_edges: E_max (default: `Topology.default_num_edges`).
            self_connections: allow `i -> i` edges.
            plasticity: `true` for the rule's defaults, or a table of its
                arguments (e.g. `{ learning_rate = 0.01, trace_dtype = "float16" }`).
            key: draws the topology, then the initial weights.
            options: the remaining arguments of the policy class (`layout`,
                `tau`, ...).
        """
        _check_connectivity(fan_in, connection_prob)
        # one key draws the connectivity, the other the weights: one seed fixes both
        topology_key, weight_key = jr.split(key)
        if connection_prob is not None:
            topology = Topology.random(
                num_neurons,
                connection_prob,
                num_edges=num_edges,
                self_connections=self_connections,
                key=topology_key,
            )
        else:
            topology = Topology.fixed_fan_in(
                num_neurons,
                DEFAULT_FAN_IN if fan_in is None else fan_in,
                num_edges=num_edges,
                self_connections=self_connections,
                key=topology_key,
            )
        return self.policy(
            obs_size,
            action_size,
            topology,
            plasticity=_rule(self.rule, plasticity),
            key=weight_key,
            **options,
        )

    def effective_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option with the value it takes given `options` (TOML values).

        The user's value where given, else the default: `fan_in` 8 unless
        `connection_prob` is set (then `fan_in` is left out), `num_edges` the
        topology's E_max, `plasticity` false, or the rule's whole table. Options
        without a value (`connection_prob`, `input_ids`, `output_ids` unset) are
        left out; `layout = "auto"` stays "auto". Building from the result gives
        the same network as building from `options`, and the result is its own
        effective options.
        """
        policy = _defaults(self.policy, _NOT_OPTIONS | _BUILT)
        values = {**_defaults(self.__call__), **policy, **options}
        _check_connectivity(values["fan_in"], values["connection_prob"])
        if values["connection_prob"] is None and values["fan_in"] is None:
            values["fan_in"] = DEFAULT_FAN_IN
        if values["num_edges"] is None:
            values["num_edges"] = Topology.default_num_edges(
                values["num_neurons"],
                fan_in=values["fan_in"],
                p=values["connection_prob"],
                self_connections=values["self_connections"],
            )
        plasticity = values["plasticity"]
        if plasticity is None or plasticity is False:
            values["plasticity"] = False
        elif plasticity is True or isinstance(plasticity, Mapping):
            # the rule's whole table: its defaults (but unset ones), the user's values
            table = plasticity if isinstance(plasticity, Mapping) else {}
            rule = {k: v for k, v in _defaults(self.rule).items() if v is not None}
            values["plasticity"] = rule | dict(table)
        # None means "unset" here (TOML cannot hold it), except inside a user's table
        return {k: _plain(v) for k, v in values.items() if v is not None}


sparse_rate = SparseNet("sparse_rate", SparseRatePolicy, HebbianRule)
"""`[net] name = "sparse_rate"`: a `SparseRatePolicy`; `plasticity` builds a
`HebbianRule`."""

sparse_lif = SparseNet("sparse_lif", SparseSpikingPolicy, STDPRule)
"""`[net] name = "sparse_lif"`: a `SparseSpikingPolicy` (LIF units); `plasticity`
builds an `STDPRule`."""


def effective_options(factory: Any, options: Mapping[str, Any]) -> dict[str, Any]:
    """Every option of `sparse_rate` or `sparse_lif` with the value it takes.

    See `SparseNet.effective_options`; the resolved config.toml of a run writes
    these.

    Raises:
        ValueError: `factory` is not a sparse network factory, or `options` give
            both `fan_in` and `connection_prob`.
    """
    if not isinstance(factory, SparseNet):
        raise ValueError(
            "effective_options: factory must be sparse_rate or sparse_lif (a "
            f"SparseNet); got {factory!r}"
        )
    return factory.effective_options(options)


__all__ = [
    "DEFAULT_FAN_IN",
    "SparseNet",
    "effective_options",
    "sparse_lif",
    "sparse_rate",
]
