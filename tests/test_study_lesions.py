"""A study's lesion columns: each run's final genome lesioned, on its own held-out
lifetimes, and the report's "Lesions" section."""

import math

import pandas as pd
import pytest
from click.testing import CliRunner

from eqxevo._app.cli import main
from eqxevo._app.study.lesions import lesion_columns, lesion_lines
from eqxevo.experiment import eval_run

TASK = [
    "net.name=recurrent",
    "net.options.hidden_size=4",
    "strategy.population_size=8",
    "run.lifetime=30",
    "run.generations=2",
    "run.eval_episodes=8",
]


def test_a_runs_memory_lesion_is_scored_on_its_own_heldout_lifetimes(tmp_path):
    args = [a for item in TASK for a in ("--set", item)]
    ran = CliRunner().invoke(
        main, ["run", *args, "--out", str(tmp_path / "runs"), "--name", "r", "--quiet"]
    )
    assert ran.exit_code == 0, ran.output
    # the genome's own scores only: the references' programs are not needed
    intact, _, _ = eval_run(
        tmp_path / "runs" / "r", genome="mean", with_references=False
    )
    cells = pd.DataFrame(
        [
            {
                "cell": "rnn",
                "complete": True,
                "run_dir": "runs/r",
                "heldout_genome": "mean",
                "heldout_episodes": 8,
                "heldout_mean": intact.result.mean,
                "no_memory_reference": intact.result.mean - 10.0,
            }
        ]
    )
    out = lesion_columns(tmp_path, cells)
    wiped, _, _ = eval_run(
        tmp_path / "runs" / "r", genome="mean", lesion="memory", with_references=False
    )
    assert out.loc[0, "lesion_memory"] == pytest.approx(wiped.result.mean, rel=0)
    assert math.isnan(out.loc[0, "lesion_plasticity"])  # a recurrent net: none
    lines = lesion_lines(out)
    assert lines[0] == "## Lesions"
    carried = (intact.result.mean - wiped.result.mean) / 10.0
    assert lines[-2] == (
        f"| rnn | {intact.result.mean:.4g} | {wiped.result.mean:.4g} ({carried:.2f}) |"
    )
    assert "memory lesioned (carried)" in lines[-4]
