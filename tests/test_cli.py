import json
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from helpers import tree_equal

from eqxevo import config, experiment
from eqxevo.checkpoint import Checkpointer
from eqxevo.cli import main

SMALL = [
    "net.name=mlp",
    "net.options.width=8",
    "net.options.depth=1",
    "strategy.population_size=8",
    "run.lifetime=40",
    "run.generations=4",
    "run.chunk_size=2",
]


def sets(items):
    return [arg for item in items for arg in ("--set", item)]


def test_run_resume_and_plot_from_the_command_line(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        main, ["run", *sets(SMALL), "--out", str(tmp_path), "--name", "r", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "best fitness" in result.output
    result = runner.invoke(
        main, ["resume", str(tmp_path / "r"), "--set", "run.generations=6", "--quiet"]
    )
    assert result.exit_code == 0, result.output
    assert "after 6 generations" in result.output
    result = runner.invoke(main, ["plot", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r/trajectory.png").read_bytes()[:4] == b"\x89PNG"


def test_run_errors_are_messages_not_tracebacks(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        main, ["run", "--set", "run.generation=3", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "did you mean run.generations" in result.output
    result = runner.invoke(
        main, ["run", *sets([*SMALL, "strategy.name=CMA-ES"]), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1 and "'CMA_ES'" in result.output
    result = runner.invoke(
        main, ["run", *sets(SMALL), "--devices", "3", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and "does not split over 3 devices" in result.output


def test_strategies_lists_presets_and_evosax_algorithms():
    result = CliRunner().invoke(main, ["strategies"])
    assert result.exit_code == 0
    assert "snes" in result.output and "CMA_ES" in result.output
    rows = json.loads(CliRunner().invoke(main, ["strategies", "--json"]).output)
    assert {"name", "kind", "family"} <= set(rows[0])


def test_every_command_has_help_with_an_example():
    for command in ([], ["run"], ["resume"], ["plot"], ["strategies"]):
        result = CliRunner().invoke(main, [*command, "--help"])
        assert result.exit_code == 0
        assert "Example" in result.output
    assert "run.checkpoint_every" in CliRunner().invoke(main, ["run", "--help"]).output


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_uninterrupted_run(tmp_path):
    items = [
        "net.name=mlp",
        "net.options.width=16",
        "strategy.population_size=32",
        "run.lifetime=1000",
        "run.generations=40",
        "run.chunk_size=2",
        "run.checkpoint_every=4",
    ]
    command = [sys.executable, "-m", "eqxevo.cli", "run", *sets(items), "--quiet"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    killed = subprocess.Popen(
        [*command, "--out", str(tmp_path), "--name", "killed"], env=env
    )
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and killed.poll() is None:
        done = [int(p.name) for p in checkpoints.glob("*") if p.name.isdigit()]
        if done and max(done) >= 8:
            break
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL, "the run finished before it was killed"
    latest = Checkpointer(checkpoints).latest()
    assert latest is not None and latest < 40

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "eqxevo.cli",
            "resume",
            str(tmp_path / "killed"),
            "--quiet",
            # the rest on both cores: results do not depend on the devices
            "--devices",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    full = subprocess.run(
        [*command, "--out", str(tmp_path), "--name", "full"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert full.returncode == 0, full.stderr

    # Fitness statistics and the strategy state are bit-identical across device
    # counts; an aux summary computed inside the lifetime (L0's mean distance)
    # may differ in the last bit, as XLA:CPU contracts multiply-adds differently
    # in the sharded program (docs/performance.md, "Determinism").
    killed_log = [
        json.loads(line)
        for line in (tmp_path / "killed/metrics.jsonl").read_text().splitlines()
    ]
    full_log = [
        json.loads(line)
        for line in (tmp_path / "full/metrics.jsonl").read_text().splitlines()
    ]
    assert len(killed_log) == len(full_log) == 40
    for a, b in zip(killed_log, full_log, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if k.startswith("aux."):
                assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-12), k
            else:
                assert a[k] == b[k], k
    like = experiment.build(config.load(tmp_path / "full/config.toml")).initial_state()
    states = []
    for name in ("killed", "full"):
        ckpt = Checkpointer(tmp_path / name / "checkpoints")
        states.append(ckpt.restore(like, ckpt.experiment(40))[1])
        ckpt.close()
    assert tree_equal(*states)
