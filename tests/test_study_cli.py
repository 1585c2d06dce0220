import json

import pytest
from click.testing import CliRunner
from study_fixtures import finished_study  # noqa: F401

from eqxevo.cli import main


@pytest.mark.parametrize("command", ["plan", "run", "status", "report"])
def test_every_study_command_has_help(command):
    result = CliRunner().invoke(main, ["study", command, "--help"])
    assert result.exit_code == 0 and "Example" in result.output


def test_status_json_counts_cells_runs_done_and_programs(finished_study):  # noqa: F811
    result = CliRunner().invoke(
        main, ["study", "status", str(finished_study.out), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["cells"], data["runs"], data["done"], data["programs"]) == (4, 8, 8, 2)
    assert data["generations"] == {"done": 48, "total": 48}


def test_plan_shows_cells_and_programs_without_running(finished_study):  # noqa: F811
    result = CliRunner().invoke(main, ["study", "plan", str(finished_study.file)])
    assert result.exit_code == 0, result.output
    assert "4 cells x 2 seeds = 8 runs in 2 compiled programs" in result.output
    assert "program 1: 4 runs of wide," in result.output


def test_a_bad_study_file_fails_with_the_message(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[study]\nname = "x"\n[study.axes]\n"run.seed" = [1, 2]\n')
    result = CliRunner().invoke(main, ["study", "run", str(path)])
    assert result.exit_code != 0
    assert "'run.seed' cannot be set in a study" in result.output


def test_plan_measure_times_each_program_through_one_evolve_call(tmp_path):
    # one cell, one seed: one program, compiled and timed (two generations)
    from study_fixtures import TINY, write_study

    text = TINY.replace("seeds = 2", "seeds = [0]").replace("[0.05, 0.3]", "[0.05]")
    text = text.replace('[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', "")
    file = write_study(tmp_path, text)
    result = CliRunner().invoke(
        main, ["study", "plan", str(file), "--measure", "--json"]
    )
    assert result.exit_code == 0, result.output
    (program,) = json.loads(result.output)["programs"]
    measured = program["measured"]
    assert set(measured) == {"compile_s", "generation_s"}
    assert program["seconds"] == pytest.approx(
        measured["compile_s"] + measured["generation_s"] * 6
    )
