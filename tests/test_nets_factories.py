"""`sparse_rate`, `sparse_lif` and the effective options a config.toml records."""

import jax.random as jr
import pytest
from helpers import tree_equal

from eqxevo.nets import MLPPolicy, sparse_lif, sparse_rate

OBS, ACT = 3, 2

# Every option of the factories, as a user can set it in [net.options]: a new
# option of a factory or of its policy class must show up here too.
TOPOLOGY = {"num_neurons", "fan_in", "num_edges", "self_connections", "plasticity"}
RATE = TOPOLOGY | {"layout", "tau", "dt", "weight_scale"}
LIF = TOPOLOGY | {"layout", "tau", "dt", "weight_scale", "threshold", "reset"}
LIF |= {"refractory_period", "readout_tau", "input_scale"}


def _toml_writable(value) -> bool:
    if isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, list):
        return all(_toml_writable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _toml_writable(v) for k, v in value.items())
    return False


@pytest.mark.parametrize(
    "factory, options, keys",
    [(sparse_rate, {}, RATE), (sparse_lif, {"plasticity": True}, LIF)],
    ids=["sparse_rate", "sparse_lif"],
)
def test_effective_options_build_the_same_network(factory, options, keys):
    effective = factory.effective_options(options)
    assert set(effective) == keys
    assert effective["fan_in"] == 8 and effective["num_edges"] == 64 * 8
    assert effective["layout"] == "auto"  # "automatic" keeps its written value
    assert _toml_writable(effective)
    plasticity = effective["plasticity"]
    if options:
        assert plasticity["learning_rate"] == 0.01  # the rule's whole table
        assert plasticity["weight_bounds"] == [-2.0, 2.0]
    else:
        assert plasticity is False
    key = jr.key(0)
    assert tree_equal(
        factory(OBS, ACT, **effective, key=key), factory(OBS, ACT, **options, key=key)
    )


@pytest.mark.parametrize(
    "factory, options",
    [
        (sparse_rate, {}),
        (sparse_rate, {"connection_prob": 0.2, "num_neurons": 20}),
        (sparse_rate, {"fan_in": 3, "self_connections": True, "layout": "gather"}),
        (
            sparse_rate,
            {"plasticity": {"trace_dtype": "float16", "weight_bounds": (-1.0, 1.0)}},
        ),
        (sparse_lif, {"plasticity": {"modulation": "neuron", "modulator": 5}}),
        (sparse_lif, {"input_ids": (0, 2, 4), "tau": 4.0, "num_edges": 600}),
    ],
)
def test_effective_options_are_their_own_effective_options(factory, options):
    effective = factory.effective_options(options)
    assert factory.effective_options(effective) == effective
    assert _toml_writable(effective)
    key = jr.key(1)
    assert tree_equal(
        factory(OBS, ACT, **effective, key=key), factory(OBS, ACT, **options, key=key)
    )


@pytest.mark.parametrize("p, self_connections", [(0.2, False), (0.05, True)])
def test_effective_num_edges_is_the_topology_s(p, self_connections):
    options = {"connection_prob": p, "self_connections": self_connections}
    effective = sparse_rate.effective_options(options | {"num_neurons": 30})
    assert "fan_in" not in effective  # a probability, not a fan-in
    net = sparse_rate(OBS, ACT, num_neurons=30, **options, key=jr.key(2))
    assert effective["num_edges"] == net.layout.num_edges == net.weights.shape[0]


def test_the_registry_asks_a_constructor_for_its_effective_options():
    # A network with derived options says them through its `effective_options`
    # hook; any other constructor gets its scalar defaults and the user's values.
    from eqxevo._src.registry import effective_options

    assert effective_options(sparse_rate, {}) == sparse_rate.effective_options({})
    got = effective_options(MLPPolicy, {"width": 4})
    assert got == {"width": 4, "depth": 2}


def test_effective_options_refuse_bad_connectivity():
    with pytest.raises(ValueError, match="fan_in or connection_prob, not both"):
        sparse_rate.effective_options({"fan_in": 4, "connection_prob": 0.1})
