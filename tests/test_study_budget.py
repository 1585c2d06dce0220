"""eqxevo._app.study.budget against plain NumPy references."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from eqxevo._app.study.budget import (
    budget_lines,
    curve_area,
    curve_columns,
    platform,
    step_budget,
)
from eqxevo._app.study.report import summary_table

CURVE = np.array([1.0, 3.0, 2.0, 6.0, 4.0])


@pytest.mark.parametrize(
    "per_generation, budget", [(1, None), (10, None), (10, 25), (10, 50), (3, 7)]
)
def test_the_curve_area_is_the_mean_fitness_per_step_spent(per_generation, budget):
    # Generation g holds its fitness over the steps it spent: the curve as one
    # value per step, cut at the budget, and averaged.
    per_step = np.repeat(CURVE, per_generation)
    want = per_step[: budget or per_step.size].mean()
    assert curve_area(CURVE, per_generation, budget) == pytest.approx(want, rel=1e-12)


def test_the_curve_area_by_hand():
    assert curve_area(CURVE) == pytest.approx(np.mean(CURVE))  # 3.2
    # 25 steps at 10 a generation: 10 x 1 + 10 x 3 + 5 x 2 over 25
    assert curve_area(CURVE, 10, 25) == pytest.approx(50 / 25)
    assert math.isnan(curve_area(np.array([1.0, np.nan, 2.0])))
    assert curve_area(np.array([1.0, 2.0, np.nan]), 10, 20) == pytest.approx(1.5)
    assert math.isnan(curve_area(np.array([])))
    with pytest.raises(ValueError, match="budget=60 exceeds the 50 steps"):
        curve_area(CURVE, 10, 60)


def test_the_platform_is_what_the_runs_segments_recorded():
    assert platform({"segments": [{"platform": "gpu"}, {"platform": "gpu"}]}) == "gpu"
    assert platform({"segments": [{"platform": "gpu"}, {"platform": "cpu"}]}) == (
        "cpu+gpu"
    )
    assert platform({}) is None


def _study_on_disk(tmp_path):
    """Three runs: two of cell `small` (10 steps a generation, 4 generations), one
    of cell `big` (25 a generation, 4 generations), and one of `big` not
    complete."""
    curves = {
        "small/seed-0": [1.0, 2.0, 3.0, 4.0],
        "small/seed-1": [2.0, 2.0, 2.0, 2.0],
        "big/seed-0": [0.0, 8.0, 8.0, 8.0],
        "big/seed-1": [5.0, 5.0],
    }
    rows = []
    for run, curve in curves.items():
        folder = tmp_path / "runs" / run
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"generation": g, "mean": v}) + "\n"
                for g, v in enumerate(curve)
            )
        )
        per_generation = 10 if run.startswith("small") else 25
        rows.append(
            {
                "cell": run.split("/")[0],
                "run_dir": f"runs/{run}",
                "complete": len(curve) == 4,
                "generations": len(curve),
                "agent_steps": per_generation * len(curve),
                "wall_time_s": 1.5 if run.startswith("small") else 6.0,
                "platform": "cpu",
                "heldout_mean": curve[-1],
            }
        )
    return pd.DataFrame(rows)


def test_curve_columns_compare_every_run_over_the_fewest_steps(tmp_path):
    cells = curve_columns(tmp_path, _study_on_disk(tmp_path))
    assert step_budget(cells) == 40
    np.testing.assert_allclose(cells["curve_auc"][:3], [2.5, 2.0, 6.0])
    # `big` over its first 40 steps: 25 x 0 + 15 x 8
    np.testing.assert_allclose(cells["curve_auc_steps"][:3], [2.5, 2.0, 120 / 40])
    assert cells[["curve_auc", "curve_auc_steps"]].iloc[3].isna().all()

    complete = cells[cells["complete"]]
    summary = summary_table(
        complete, {"heldout_mean": "held-out", "curve_auc": "", "curve_auc_steps": ""}
    )
    assert list(summary["agent_steps_mean"]) == [40, 100]
    assert list(summary["wall_time_s_mean"]) == [1.5, 6.0]
    assert list(summary["platform"]) == ["cpu", "cpu"]
    text = "\n".join(budget_lines(summary, complete))
    assert "| cell | n | agent steps / run | CPU s / run |" in text
    assert "AUC per agent step [95% CI]" in text
    assert "over its first 40 agent steps" in text
    assert "| big | 1 | 100 | 6 | 8 | 6 [n too small] | 3 [n too small] |" in text
