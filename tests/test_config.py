import dataclasses
import tomllib

import hypothesis.strategies as st
import pytest
from hypothesis import given

from eqxevo._app import config
from eqxevo._app.config import ConfigError, Experiment


def test_defaults_are_the_default_experiment():
    e = config.load()
    assert e == Experiment()
    assert (e.env.name, e.net.name, e.strategy.name) == (
        "chemotaxis",
        "sparse_rate",
        "snes",
    )
    assert (e.strategy.population_size, e.run.lifetime) == (256, 1000)


@given(
    generations=st.integers(1, 10**6),
    lifetime=st.integers(1, 10**6),
    init_scale=st.floats(1e-6, 1e3),
    name=st.sampled_from(["snes", "cma_es", "SimpleGA"]),
    noise=st.floats(-1e3, 1e3),
)
def test_toml_round_trip(generations, lifetime, init_scale, name, noise):
    e = config.load(
        None,
        [
            f"run.generations={generations}",
            f"run.lifetime={lifetime}",
            f"strategy.init_scale={init_scale!r}",
            f"strategy.name={name}",
            f"env.params.noise={noise!r}",
        ],
    )
    assert config.from_dict(tomllib.loads(config.dumps(e))) == e


def test_file_and_overrides(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[run]\ngenerations = 7\n[env]\nname = "foraging"\n')
    e = config.load(path, ["run.generations=9", "net.options.num_neurons=32"])
    assert e.run.generations == 9
    assert e.env.name == "foraging"
    assert e.net.options == {"num_neurons": 32}


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "run.generation=5",
            r"unknown key run.generation \(did you mean run.generations\?\)",
        ),
        ("run.generations=0", r"run.generations = 0 is out of range; it must be >= 1"),
        ("run.generations=2.5", r"run.generations must be int; got 2.5"),
        ("run.generations=true", r"run.generations must be int"),
        (
            "strategy.init_scale=0",
            r"strategy.init_scale = 0.0 is out of range; it must be > 0",
        ),
        (
            "strategy.init_scale=inf",
            r"strategy.init_scale = inf is out of range; it must be > 0 and finite",
        ),
        ("run.on_nonfinite=skip", r'allowed: "rank_worst", "raise"'),
        ("colour.x=1", r"unknown key colour; allowed in \[top level\]"),
        ("run=3", r"\[run\] must be a table"),
        ("env.params=3", r"env.params must be a table"),
        ("noequals", r"expected key=value"),
    ],
)
def test_bad_values_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        config.load(None, [override])


def test_unreadable_config_is_a_config_error(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[run\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        config.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        config.load(tmp_path / "missing.toml")


def test_binary_config_is_one_line_naming_the_file(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_bytes(b"\xff\xfe\x00[run]\n")
    with pytest.raises(ConfigError) as info:
        config.load(path)
    assert str(info.value) == (
        f"config {path} is not UTF-8 text (byte 0: b'\\xff'); TOML files are UTF-8"
    )
    assert info.value.__cause__ is None  # no UnicodeDecodeError traceback


def test_configs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Experiment().run.generations = 3  # type: ignore[misc]


def test_describe_lists_every_key():
    text = config.describe()
    for section in ("env", "net", "strategy", "run"):
        for f in dataclasses.fields(getattr(Experiment(), section)):
            assert f"{section}.{f.name}" in text
