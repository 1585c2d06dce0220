"""Smoke tests of the benchmark functions (tiny sizes; no timing is asserted)."""

import jax.random as jr
import pytest

from eqxevo import bench


def test_layout_throughput_reports_a_complete_record():
    record = bench.layout_throughput(
        layout="gather",
        num_neurons=16,
        fan_in=2,
        population_size=4,
        num_steps=5,
        plastic=True,
        trace_dtype="bfloat16",
        repeats=1,
        key=jr.key(0),
    )
    assert record["layout"] == "gather" and record["auto"] in (
        "segment",
        "gather",
        "dense",
    )
    assert record["steps_per_s"] > 0 and record["cpu_steps_per_s"] > 0
    # 32 edges: f32 weights + bf16 traces, plus neuron state and scalars
    assert record["trace_bytes"] == 32 * 2
    assert record["state_bytes"] > 32 * 6


def test_best_and_auto_picks_the_fastest_layout_per_point():
    records = [
        {
            "num_neurons": 64,
            "fan_in": 8,
            "plastic": False,
            "layout": name,
            "cpu_steps_per_s": speed,
        }
        for name, speed in (("segment", 2.0), ("gather", 3.0), ("dense", 1.0))
    ]
    records.append(
        {
            "num_neurons": 64,
            "fan_in": 8,
            "plastic": False,
            "layout": "dense",
            "skipped": "memory",
        }
    )
    (row,) = bench.best_and_auto(records)
    assert row["best"] == "gather"
    assert row["auto_over_best"] == pytest.approx(
        {"segment": 2 / 3, "gather": 1.0, "dense": 1 / 3}[row["auto"]]
    )


def test_trace_drift_measures_stochastic_rounding_against_float32():
    nearest = bench.trace_drift(
        trace_dtype="bfloat16", rounding="nearest", num_steps=300, key=jr.key(0)
    )
    stochastic = bench.trace_drift(
        trace_dtype="bfloat16", rounding="stochastic", num_steps=300, key=jr.key(0)
    )
    assert nearest["decay_test"] == 1.0  # round-to-nearest stalls
    assert abs(stochastic["decay_test"] - stochastic["decay_exact"]) < 0.05
    exact = stochastic["accumulate_exact"]
    assert abs(stochastic["accumulate_test"] - exact) < 0.05 * exact
    assert stochastic["relative_rms_error"] < 0.1
    with pytest.raises(ValueError, match="rounding"):
        bench.trace_drift(
            trace_dtype="float16", rounding="up", num_steps=1, key=jr.key(0)
        )


def test_quick_layout_grid_is_small():
    assert len(bench.layout_grid(quick=True)) <= 2
    full = bench.layout_grid(quick=False)
    assert {p["num_neurons"] for p in full} == set(bench.LAYOUT_SIZES)


def test_report_says_by_how_much_a_target_is_missed(tmp_path):
    from eqxevo.bench.report import targets, write_report

    results = {
        "machine": {
            "device_kind": "cpu",
            "backend": "cpu",
            "num_devices": 1,
            "cpu_count": 2,
            "jax": "x",
            "load_average": [0, 0, 0],
        },
        "quick": False,
        "milestones": [
            {
                "milestone": "L0",
                "agent_steps_per_s": 1e6,
                "baselines": [
                    {"baseline": "hand_fused", "evolve_over_baseline": 0.5},
                    {"baseline": "python_step_loop", "evolve_over_baseline": 100.0},
                ],
            }
        ],
        "cartpole": [{"side": "EvoJAX SimManager", "eqxevo_over_side": 3.0}],
    }
    rows = {r["target"]: r["status"] for r in targets(results)}
    assert rows["evolve / hand-fused JAX >= 0.95"] == "missed by 1.90x"
    assert rows["evolve / Python loop, jitted step >= 30"] == "met"
    assert rows["evolve / NumPy vectorised >= 8"] == "not measured"
    assert rows["CartPole: eqxevo / EvoJAX SimManager >= 1.5"] == "met"
    assert rows["L0 agent-steps/s, all cores >= 2e6"] == "missed by 2.00x"
    text = write_report(results, tmp_path)
    assert "missed by 1.90x" in text and (tmp_path / "report.md").exists()


def test_milestones_are_experiments_with_the_issue_sizes():
    sizes = {
        name: (
            bench.milestone_experiment(name).strategy.population_size,
            bench.milestone_experiment(name).run.lifetime,
        )
        for name in ("L0", "L2", "L4")
    }
    assert sizes == {"L0": (256, 1000), "L2": (256, 5000), "L4": (128, 20000)}
    assert bench.milestone_experiment("L4").net.options["plasticity"]
    with pytest.raises(ValueError, match="milestone must be one of"):
        bench.milestone_experiment("L9")
