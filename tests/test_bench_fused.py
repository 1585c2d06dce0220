"""The Pallas-vs-XLA part of the benchmark (`eqxevo._app.bench.pallas`); nothing timed
is asserted."""

import csv
import math

import jax.random as jr

from eqxevo._app.bench.common import machine_info
from eqxevo._app.bench.pallas import (
    FUSED_LAYOUTS,
    NEEDS_GPU,
    PALLAS_COLUMNS,
    pallas_comparison,
    pallas_grid,
)
from eqxevo._app.bench.parts import Options, run_part
from eqxevo._app.bench.report import write_report

TINY = {
    "model": "rate",
    "num_neurons": 8,
    "fan_in": 2,
    "population_size": 4,
    "num_steps": 3,
    "plastic": True,
    "trace_dtype": "bfloat16",
}


def test_without_a_gpu_every_point_is_reported_not_measured(tmp_path):
    rows = run_part("pallas", Options(out=tmp_path, quick=True), {"backend": "cpu"})
    grid = pallas_grid(quick=True)
    assert len(rows) == len(grid) >= 2
    for row, point in zip(rows, grid, strict=True):
        assert row == {**point, "layout": "pallas", "skipped": NEEDS_GPU}
        assert "steps_per_s" not in row  # interpret mode is never timed
    assert NEEDS_GPU == "needs a GPU: not measured"
    with (tmp_path / "pallas.csv").open() as f:
        written = list(csv.DictReader(f))
    assert [r["skipped"] for r in written] == [NEEDS_GPU] * len(grid)
    assert [int(r["num_neurons"]) for r in written] == [p["num_neurons"] for p in grid]
    machine = machine_info()
    text = write_report({"machine": machine, "quick": True, "pallas": rows}, tmp_path)
    section = text.split("## Fused Pallas kernel vs XLA layouts")[1]
    assert section.count("needs a GPU: not measured") == len(grid)
    assert all(column in section for column in PALLAS_COLUMNS)


def test_on_gpu_every_layout_is_timed_and_the_kernel_checked():
    """The GPU path, forced on CPU at toy size (the kernel in interpret mode)."""
    records = pallas_comparison(platform="gpu", points=[TINY], repeats=1, key=jr.key(0))
    *timed, summary = records
    assert [r["layout"] for r in timed] == list(FUSED_LAYOUTS)
    for r in timed:  # P T agent-steps over the measured wall time
        assert math.isclose(r["steps_per_s"], 4 * 3 / r["wall_s"])
        assert r["trace_dtype"] == "bfloat16"
    assert summary["layout"] == "summary"
    assert summary["best_xla"] in ("segment", "gather", "dense")
    best = summary[f"{summary['best_xla']}_steps_per_s"]
    assert math.isclose(
        summary["pallas_over_best_xla"], summary["pallas_steps_per_s"] / best
    )
    # same genomes, keys and network: the fitness agrees to float32 rounding
    assert 0.0 <= summary["fitness_max_abs_diff"] < 1e-4


def test_numpy_baseline_reads_the_edge_list_of_the_pallas_layout():
    """On a GPU the milestones' "auto" layout is "pallas"; their NumPy baseline
    must read the same edges from it."""
    from eqxevo._app.bench.baselines import _edge_list
    from eqxevo._src.nets.layouts import make_layout
    from eqxevo.nets import Topology

    topology = Topology.random(12, 0.3, num_edges=60, key=jr.key(0))
    want = _edge_list(make_layout(topology, "segment"))
    got = _edge_list(make_layout(topology, "pallas"))
    mask = want[2]
    assert (got[2] == mask).all()
    assert (got[0][mask] == want[0][mask]).all() and (got[1] == want[1]).all()
