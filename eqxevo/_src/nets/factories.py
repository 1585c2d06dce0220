"""`sparse_rate`, `sparse_lif` and `mlp`: networks from plain options (TOML), each
with `effective_options(options)` (the registry's hook for config.toml).

See docs/networks.md ("Sparse networks in experiment files", "Backpropamine
plasticity").
"""

import inspect
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

import jax.numpy as jnp
import jax.random as jr

from .._types import Array, PRNGKey
from .backpropamine import PlasticMLPPolicy
from .mlp import MLPPolicy
from .per_synapse import PerSynapseHebbianRule
from .plasticity import HebbianRule, STDPRule
from .sparse import AbstractSparsePolicy, SparseRatePolicy, SparseSpikingPolicy
from .sparse_backpropamine import BackpropamineRule
from .topology import Topology

DEFAULT_FAN_IN = 8
"""The fan-in of a factory's topology when neither fan_in nor connection_prob is set."""

Policy = TypeVar("Policy", bound=AbstractSparsePolicy[Any])

# Arguments that are not options: the sizes and the key (and, of the policy
# class, what the factory builds itself).
_NOT_OPTIONS = {"obs_size", "action_size", "key"}
_BUILT = {"topology", "plasticity"}


def _plasticity_table(plasticity: Any, of: str) -> dict[str, Any] | None:
    """`plasticity` as keyword arguments: None when off (None or false), {} for
    true, the table itself; a `ValueError` naming `of` for anything else."""
    if plasticity is None or plasticity is False:
        return None
    if plasticity is True:
        return {}
    if isinstance(plasticity, Mapping):
        return dict(plasticity)
    raise ValueError(
        f"plasticity must be true/false or a table of {of} arguments; got "
        f"{plasticity!r}"
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
        rules: the plasticity rule classes by the name a `plasticity` table's
            `rule` key gives; the first is the one `plasticity = true` (or a
            table without `rule`) builds.
    """

    def __init__(
        self,
        name: str,
        policy: Callable[..., Policy],
        rules: Mapping[str, Callable[..., Any]],
    ) -> None:
        self.__name__ = self.__qualname__ = name
        self.policy = policy
        self.rules = dict(rules)

    def rule_class(self, table: Mapping[str, Any]) -> Callable[..., Any]:
        """The rule class a `plasticity` table names (its `rule` key; the
        default without one).

        Raises:
            ValueError: an unknown rule name (the known ones listed).
        """
        if "rule" not in table:
            return next(iter(self.rules.values()))
        name = table["rule"]
        if name not in self.rules:
            known = ", ".join(map(repr, self.rules))
            raise ValueError(
                f"{self.__name__}: plasticity.rule must be one of {known}; got {name!r}"
            )
        return self.rules[name]

    def _rule(self, plasticity: Any) -> Any:
        kinds = " or ".join(getattr(k, "__name__", str(k)) for k in self.rules.values())
        table = _plasticity_table(plasticity, kinds)
        if table is None:
            return None
        kind = self.rule_class(table)
        table.pop("rule", None)
        return kind(**table)

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
            plasticity: `true` for the default rule's defaults, or a table of its
                arguments (e.g. `{ learning_rate = 0.01, trace_dtype = "float16" }`);
                a table's `rule` key picks another rule (`"backpropamine"`,
                `"per_synapse_hebbian"` for `sparse_rate`), the rest are its
                arguments.
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
            plasticity=self._rule(plasticity),
            key=weight_key,
            **options,
        )

    def effective_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option with the value it takes given `options` (TOML values).

        The user's value where given, else the default: `fan_in` 8 unless
        `connection_prob` is set (then `fan_in` is left out), `num_edges` the
        topology's E_max, `plasticity` false, or the rule's whole table (its
        `rule` key kept where the user wrote one, none for the default). Options
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
            defaults = _defaults(self.rule_class(table))
            rule = {k: v for k, v in defaults.items() if v is not None}
            values["plasticity"] = rule | dict(table)
        # None means "unset" here (TOML cannot hold it), except inside a user's table
        return {k: _plain(v) for k, v in values.items() if v is not None}


sparse_rate = SparseNet(
    "sparse_rate",
    SparseRatePolicy,
    {
        "hebbian": HebbianRule,
        "per_synapse_hebbian": PerSynapseHebbianRule,
        "backpropamine": BackpropamineRule,
    },
)
"""`[net] name = "sparse_rate"`: a `SparseRatePolicy`; `plasticity` builds a
`HebbianRule`, or with `rule = "per_synapse_hebbian"` a `PerSynapseHebbianRule`,
with `rule = "backpropamine"` a `BackpropamineRule`."""

sparse_lif = SparseNet(
    "sparse_lif",
    SparseSpikingPolicy,
    {"stdp": STDPRule, "backpropamine": BackpropamineRule},
)
"""`[net] name = "sparse_lif"`: a `SparseSpikingPolicy` (LIF units); `plasticity`
builds an `STDPRule`, or with `rule = "backpropamine"` a `BackpropamineRule`."""


class MLPNet:
    """`[net] name = "mlp"` (`mlp`): an `MLPPolicy`, or with `plasticity` a
    `PlasticMLPPolicy` (backpropamine); `mlp.effective_options(options)` lists
    every option with the value it takes."""

    def __init__(self) -> None:
        self.__name__ = self.__qualname__ = "mlp"  # as `[net] name` writes it

    def __repr__(self) -> str:
        return "<network factory mlp: MLPPolicy | PlasticMLPPolicy>"

    def __call__(
        self,
        obs_size: int,
        action_size: int,
        width: int = 32,
        depth: int = 2,
        activation: Callable[[Array], Array] = jnp.tanh,
        final_activation: Callable[[Array], Array] = jnp.tanh,
        plasticity: bool | Mapping[str, Any] | None = None,
        *,
        key: PRNGKey,
    ) -> MLPPolicy | PlasticMLPPolicy:
        """An `MLPPolicy`, or with `plasticity` a `PlasticMLPPolicy`.

        Arguments:
            obs_size, action_size, width, depth, activation, final_activation:
                as `MLPPolicy`.
            plasticity: off (None or false: exactly `MLPPolicy(..., key=key)`),
                `true` for backpropamine's defaults, or a table of the plastic
                arguments of `PlasticMLPPolicy` (e.g. `{ layers = [1], hebb_bound
                = 1.0, modulation = "retroactive" }`).
            key: initialisation key.
        """
        table = _plasticity_table(plasticity, "PlasticMLPPolicy")
        sizes = (obs_size, action_size, width, depth, activation, final_activation)
        if table is None:
            return MLPPolicy(*sizes, key=key)
        return PlasticMLPPolicy(*sizes, **table, key=key)

    def effective_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Every option with the value it takes given `options`: the scalar
        defaults, the user's values, and with plasticity on the whole table
        (`layers` listed); plasticity unset stays unset, so a non-plastic MLP's
        config is what it was before plasticity."""
        own = _defaults(self.__call__)
        values: dict[str, Any] = {
            k: v for k, v in own.items() if isinstance(v, bool | int | float)
        }
        values |= options
        table = values.get("plasticity")
        if table is True or isinstance(table, Mapping):
            # the plastic arguments: those PlasticMLPPolicy takes beyond mlp's own
            plastic = _defaults(PlasticMLPPolicy, _NOT_OPTIONS | set(own))
            table = plastic | dict(table if isinstance(table, Mapping) else {})
            if table["layers"] is None:
                table["layers"] = list(range(values["depth"] + 1))
            values["plasticity"] = table
        return {k: _plain(v) for k, v in values.items() if v is not None}


mlp = MLPNet()
"""`[net] name = "mlp"`: `mlp(obs_size, action_size, width=32, depth=2, ...,
plasticity=None, *, key)`."""


__all__ = [
    "DEFAULT_FAN_IN",
    "MLPNet",
    "SparseNet",
    "mlp",
    "sparse_lif",
    "sparse_rate",
]
