from click.testing import CliRunner

from eqxevo.cli import main


def test_run_default_experiment_improves_on_a_constant_predictor():
    result = CliRunner().invoke(main, ["run", "--generations", "40", "--quiet"])
    assert result.exit_code == 0, result.output
    line = result.output.strip().splitlines()[-1]
    mse = float(line.split("error ")[1].split()[0])
    constant = float(line.split("scores ")[1].rstrip(")"))
    assert mse < constant


def test_strategies_lists_presets_and_evosax_algorithms():
    result = CliRunner().invoke(main, ["strategies"])
    assert result.exit_code == 0
    assert "snes" in result.output and "CMA_ES" in result.output


def test_unknown_strategy_is_a_clear_error():
    result = CliRunner().invoke(
        main, ["run", "--strategy", "CMA-ES", "--generations", "1"]
    )
    assert result.exit_code == 2  # a usage error, not a traceback
    assert "--strategy" in result.output and "'CMA_ES'" in result.output


def test_every_command_has_help_with_an_example():
    for command in ([], ["run"], ["strategies"]):
        result = CliRunner().invoke(main, [*command, "--help"])
        assert result.exit_code == 0
        assert "Example" in result.output
