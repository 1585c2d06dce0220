import pytest
from click.testing import CliRunner
from helpers import final_state, small_experiment as small, tree_equal

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._app.cli import main
from eqxevo._app.config import ConfigError


@pytest.mark.parametrize(
    ("override", "match"),
    [
        (
            "env.name=chemotaxix",
            r"env.name = 'chemotaxix' is unknown \(did you mean 'chemotaxis'\?\); "
            "built in: ",
        ),
        ("net.name=transformer", r"net.name = 'transformer' is unknown"),
        (
            "env.params.colour=1.0",
            r"env.params.colour is not a parameter of Chemotaxis",
        ),
        ("net.options.widht=3", r"net.options: cannot build mlp: .*widht"),
        (
            "strategy.name=CMA-ES",
            r"strategy 'CMA-ES': algorithm='CMA-ES'.*'CMA_ES'",
        ),
        (
            "env.name=no.such.module:Env",
            r"env.name = 'no.such.module:Env' cannot be imported",
        ),
    ],
)
def test_build_errors_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        experiment.build(small(override))


def test_env_params_overrides_reach_the_environment():
    built = experiment.build(small("env.params.sensor_noise=0.25"))
    assert float(built.env_params.sensor_noise) == 0.25


def test_config_toml_records_every_resolved_value_and_reproduces_the_run(tmp_path):
    exp = small(
        "env.params.sensor_noise=0.02",
        "strategy.params.std_init=0.05",
        "run.generations=4",
    )
    experiment.run_experiment(exp, tmp_path / "a", quiet=True)
    written = config.load(tmp_path / "a/config.toml")
    assert written.net.options == {"width": 8, "depth": 1}
    assert written.env.params["sensor_noise"] == 0.02
    assert written.env.params["max_speed"] == 0.01  # a default, written out
    assert written.strategy.params["std_init"] == 0.05
    assert "lr_std_init" in written.strategy.params  # SNES's derived default
    assert written.run.chunk_seconds == 0.0 and written.sinks.tensorboard is False
    # `eqxevo run RUN_DIR/config.toml` repeats the run exactly
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(tmp_path / "a/config.toml"),
            "--out",
            str(tmp_path),
            "--name",
            "b",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    for name in ("metrics.jsonl", "config.toml"):
        assert (tmp_path / "a" / name).read_text() == (
            tmp_path / "b" / name
        ).read_text()
    like = experiment.build(written).initial_state()
    assert tree_equal(
        final_state(tmp_path / "a", like)[1], final_state(tmp_path / "b", like)[1]
    )


@pytest.mark.parametrize(
    "items",
    [
        ["net.name=sparse_rate", "net.options.num_neurons=12"],
        [
            "net.name=sparse_lif",
            "net.options.num_neurons=12",
            "net.options.plasticity=true",
            "env.name=foraging",
        ],
        ["net.name=recurrent", "strategy.name=CMA_ES", "env.name=long_horizon"],
        ["strategy.name=SimpleGA", "strategy.params.crossover_rate=0.3"],
        ["strategy.name=Sep_CMA_ES", "strategy.params.std_min=0.001"],
    ],
    ids=["sparse_rate", "sparse_lif-plastic", "recurrent-cma", "ga", "sep_cma"],
)
def test_the_effective_config_is_a_fixed_point_and_builds_the_same_objects(items):
    built = experiment.build(config.load(None, ["strategy.population_size=8", *items]))
    again = experiment.build(built.experiment)
    assert again.experiment == built.experiment
    assert config.load(None, []) != built.experiment  # something was written out
    assert tree_equal(again.genome, built.genome)
    assert tree_equal(again.strategy.params, built.strategy.params)
    assert tree_equal(again.env_params, built.env_params)


def test_unset_options_are_written_with_the_value_they_take():
    written = experiment.build(config.load(None, [])).experiment
    assert written.net.options["fan_in"] == 8  # unset: the factory's default
    assert written.net.options["num_neurons"] == 64
    assert written.net.options["plasticity"] is False
    assert written.env.options["traced_param_checks"] is False


def test_every_scalar_strategy_param_is_a_traced_array():
    # evosax's CMA_ES keeps std_min, std_max and c_mean as Python floats: built
    # from a config they become arrays, so a study axis over one shares the
    # program, and `eqxevo run` and a study's run compile the same program.
    import dataclasses

    import jax

    for name in ("CMA_ES", "Sep_CMA_ES", "SimpleGA", "snes"):
        params = experiment.build(small(f"strategy.name={name}")).strategy.params
        for field in dataclasses.fields(params):
            value = getattr(params, field.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                raise AssertionError(f"{name}: {field.name} = {value!r}")
            if isinstance(value, jax.Array):
                assert value.dtype in ("float32", "int32", "bool"), field.name
