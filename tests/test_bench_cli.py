"""`eqxevo bench`'s command line: its help, its checks, which parts it runs."""

import os

import pytest
from click.testing import CliRunner

from eqxevo._app.bench import cli, parts
from eqxevo._app.bench.cli import bench
from eqxevo._app.bench.parts import DEFAULT_PARTS, PARTS, QUICK_PARTS, Options


@pytest.fixture
def planned(monkeypatch):
    """Run the command without measuring: what it would run, and with what."""
    calls = []

    def run_parts(options, names, meta):
        calls.append((options, list(names)))
        return {}

    monkeypatch.setattr(cli, "run_parts", run_parts)
    return calls


def test_help_opens_with_one_line_and_lists_every_part():
    for flag in ("--help", "-h"):
        result = CliRunner().invoke(bench, [flag])
        assert result.exit_code == 0
        lines = [line.strip() for line in result.output.splitlines()]
        assert lines[2] == "Time eqxevo against hand-written baselines; write a report."
        assert "Examples:" in lines and "Parts (--only PART):" in lines
        listed = lines[lines.index("Parts (--only PART):") + 1 :]
        assert [line.split()[0] for line in listed] == list(PARTS)
        assert all(len(line) <= 100 for line in result.output.splitlines())


def test_the_short_help_fits_the_command_list():
    assert bench.get_short_help_str(limit=80) == (
        "Time eqxevo against hand-written baselines; write a report."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--repeats", "0"], "Error: --repeats must be a positive int; got 0"),
        (["--devices", "0"], "Error: --devices must be a positive int; got 0"),
    ],
)
def test_a_bad_count_is_one_line_naming_the_option(argv, message, planned, tmp_path):
    result = CliRunner().invoke(bench, [*argv, "--out", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output == message + "\n"
    assert planned == []  # nothing ran


def test_an_unknown_part_lists_the_parts():
    result = CliRunner().invoke(bench, ["--only", "speed"])
    assert result.exit_code == 2
    assert "'speed' is not one of 'milestones', 'breakdown'" in result.output


def test_quick_adds_the_ci_parts_and_only_picks_parts(planned, tmp_path):
    runner = CliRunner()
    out = str(tmp_path)
    assert runner.invoke(bench, ["--out", out]).exit_code == 0
    assert runner.invoke(bench, ["--quick", "--out", out]).exit_code == 0
    argv = ["--quick", "--only", "traces", "--only", "cache", "--out", out]
    assert runner.invoke(bench, argv).exit_code == 0
    assert [names for _, names in planned] == [
        DEFAULT_PARTS,
        QUICK_PARTS,
        ["traces", "cache"],
    ]
    assert set(QUICK_PARTS) - set(DEFAULT_PARTS) == {
        "traces",
        "bits",
        "determinism",
        "gymnax",
        "qd",
    }


def test_options_reach_every_part(planned, tmp_path):
    argv = ["--milestone", "L4", "--repeats", "1", "--devices", "3"]
    argv += ["--trace", str(tmp_path / "trace"), "--out", str(tmp_path / "out")]
    assert CliRunner().invoke(bench, argv).exit_code == 0
    assert CliRunner().invoke(bench, ["--out", str(tmp_path / "out")]).exit_code == 0
    (given, _), (default, _) = planned
    assert given == Options(
        out=tmp_path / "out",
        milestone="L4",
        quick=False,
        repeats=1,
        devices=3,
        trace=tmp_path / "trace",
    )
    assert default.devices == (os.cpu_count() or 1) and default.repeats == 3
    assert default.milestone == "all" and default.trace is None
    assert (tmp_path / "out" / "report.md").exists()


def test_a_failed_part_is_reported_after_the_others(monkeypatch, tmp_path):
    from eqxevo._app.bench import pallas as fused

    def broken(**kwargs):
        raise RuntimeError("no kernel today")

    monkeypatch.setattr(fused, "pallas_comparison", broken)
    result = CliRunner().invoke(
        bench, ["--only", "pallas", "--quick", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: failed parts: pallas (tracebacks above)"
    )
    assert (tmp_path / "report.md").exists()


def test_a_part_runs_end_to_end(tmp_path):
    """The one part that measures nothing without a GPU, through the command."""
    result = CliRunner().invoke(
        bench, ["--only", "pallas", "--quick", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "pallas.csv").exists() and (tmp_path / "pallas.json").exists()
    report = (tmp_path / "report.md").read_text()
    assert "## Fused Pallas kernel vs XLA layouts" in report


def test_an_unknown_part_name_is_refused_by_run_part(tmp_path):
    with pytest.raises(ValueError, match="part must be one of 'milestones'"):
        parts.run_part("speed", Options(out=tmp_path), {})
