"""The benchmark functions at tiny sizes: what they compute, never how fast."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from helpers import Net, noisy_sphere

import eqxevo
from eqxevo import rollout
from eqxevo._app.bench import baselines, spawn
from eqxevo._app.bench.common import machine_info
from eqxevo._app.bench.hlo import loop_body_kernels
from eqxevo._app.bench.kernels import memory_per_genome, milestone_kernels
from eqxevo._app.bench.milestones import milestone_experiment, sample_population
from eqxevo._app.bench.net_sweeps import (
    LAYOUT_SIZES,
    best_and_auto,
    layout_grid,
    layout_throughput,
    trace_drift,
)
from eqxevo._app.bench.scaling import batch_memory
from eqxevo.experiment import build


def test_layout_throughput_reports_a_complete_record():
    record = layout_throughput(
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
    assert record["steps_per_s"] == pytest.approx(4 * 5 / record["wall_s"])
    assert record["cpu_steps_per_s"] == pytest.approx(4 * 5 / record["cpu_s"])
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
    (row,) = best_and_auto(records)
    assert row["best"] == "gather"
    assert row["auto_over_best"] == pytest.approx(
        {"segment": 2 / 3, "gather": 1.0, "dense": 1 / 3}[row["auto"]]
    )


def test_trace_drift_measures_stochastic_rounding_against_float32():
    nearest = trace_drift(
        trace_dtype="bfloat16", rounding="nearest", num_steps=300, key=jr.key(0)
    )
    stochastic = trace_drift(
        trace_dtype="bfloat16", rounding="stochastic", num_steps=300, key=jr.key(0)
    )
    assert nearest["decay_test"] == 1.0  # round-to-nearest stalls
    assert abs(stochastic["decay_test"] - stochastic["decay_exact"]) < 0.05
    exact = stochastic["accumulate_exact"]
    assert abs(stochastic["accumulate_test"] - exact) < 0.05 * exact
    assert stochastic["relative_rms_error"] < 0.1
    with pytest.raises(ValueError, match="rounding"):
        trace_drift(trace_dtype="float16", rounding="up", num_steps=1, key=jr.key(0))


def test_quick_layout_grid_is_small():
    assert len(layout_grid(quick=True)) <= 2
    full = layout_grid(quick=False)
    assert {p["num_neurons"] for p in full} == set(LAYOUT_SIZES)


def test_report_says_by_how_much_a_target_is_missed(tmp_path):
    from eqxevo._app.bench.report import targets, write_report

    results = {
        "machine": machine_info(),
        "quick": False,
        "milestones": [
            {
                "milestone": "L0",
                "agent_steps_per_s": 1e6,
                "baselines": [
                    {
                        "baseline": "hand_fused",
                        "evolve_over_baseline": 0.5,
                        "evolve_over_baseline_cpu": 0.948,
                    },
                    {"baseline": "python_step_loop", "evolve_over_baseline": 100.0},
                ],
            }
        ],
        "cartpole": [{"side": "EvoJAX SimManager", "eqxevo_over_side": 3.0}],
    }
    rows = {r["target"]: r["status"] for r in targets(results)}
    assert rows["evolve / hand-fused JAX >= 0.95"] == "missed by 1.90x"
    # a miss two decimals would show as "1.00x" gets three
    assert rows["evolve / hand-fused JAX >= 0.95, in CPU time"] == "missed by 1.002x"
    assert rows["evolve / Python loop, jitted step >= 30"] == "met"
    assert rows["evolve / NumPy vectorised >= 8"] == "not measured"
    assert rows["CartPole: eqxevo / EvoJAX SimManager >= 1.5"] == "met"
    assert rows["L0 agent-steps/s, all cores >= 2e6"] == "missed by 2.00x"
    text = write_report(results, tmp_path)
    assert "missed by 1.90x" in text and f"jax {jax.__version__}" in text
    assert (tmp_path / "report.md").read_text() == text


def test_report_lists_each_milestones_all_core_goal_and_the_sharded_ratio():
    from eqxevo._app.bench.report import targets

    def record(name, one, sharded=None):
        out = {"milestone": name, "agent_steps_per_s": one, "baselines": []}
        if sharded is not None:
            out["sharded"] = {"num_devices": 2, "agent_steps_per_s": sharded}
        return out

    results = {
        "milestones": [
            record("L0", 1.0e6, 2.5e6),
            record("L2", 4e5, 8e5),
            record("L4", 6e5),  # no sharded figure: the 1-device one counts
        ]
    }
    rows = {r["target"]: r for r in targets(results)}
    assert rows["L0 agent-steps/s, all cores >= 2e6"]["status"] == "met"
    assert rows["L2 agent-steps/s, all cores >= 1e6"]["status"] == "missed by 1.25x"
    assert rows["L4 agent-steps/s, all cores >= 5e5"]["status"] == "met"
    ratio = rows["L0 sharded (2 devices) / 1 device >= 1.8"]
    assert ratio["value"] == 2.5 and ratio["status"] == "met"


def test_milestones_are_experiments_with_the_issue_sizes():
    sizes = {
        name: (
            milestone_experiment(name).strategy.population_size,
            milestone_experiment(name).run.lifetime,
        )
        for name in ("L0", "L2", "L4")
    }
    assert sizes == {"L0": (256, 1000), "L2": (256, 5000), "L4": (128, 20000)}
    assert milestone_experiment("L4").net.options["plasticity"]
    with pytest.raises(ValueError, match="milestone must be one of"):
        milestone_experiment("L9")


def test_report_lists_the_device_and_fidelity_targets():
    from eqxevo._app.bench.report import targets

    results = {
        "devices": {
            "median_by_devices": [
                {"devices": 1, "agent_steps_per_s": 5e5, "speedup": 1.0},
                {"devices": 2, "agent_steps_per_s": 7e5, "speedup": 1.4},
            ]
        },
        "fidelity": {"agent_steps_ratio": 2.86},
    }
    rows = {r["target"]: r for r in targets(results)}
    assert rows["L0 speed-up on 2 devices >= 1.8"]["status"] == "missed by 1.29x"
    fidelity = rows["multi-fidelity: agent-steps per generation, full / multi >= 2.5"]
    assert fidelity["value"] == 2.86 and fidelity["status"] == "met"


# -- the baselines compute what evolve computes ---------------------------------------


@pytest.fixture(scope="module")
def quick_l0():
    built = build(milestone_experiment("L0", quick=True))
    return built, sample_population(built)


def test_numpy_baseline_plays_the_episode_evaluate_gives_every_genome(quick_l0):
    built, population = quick_l0
    env, params, key, steps = built.env, built.env_params, jr.key(3), 30
    expected, _ = eqxevo.evaluate(
        key, lambda g, k: rollout(k, g, env, params, steps)[0], population
    )
    draws = baselines.l0_draws(baselines.episode_key(key), steps)
    totals = baselines.numpy_l0_lifetimes(population, params, draws)
    np.testing.assert_allclose(totals, expected, rtol=1e-4, atol=1e-4 * steps)
    other = baselines.l0_draws(jr.fold_in(key, 1), steps)  # a per-genome episode
    assert not baselines.matches(
        baselines.numpy_l0_lifetimes(population, params, other), expected
    )
    record = baselines.numpy_vectorised(
        population, env, params, key, num_steps=steps, repeats=1
    )
    assert record["matches_evaluate"] is True
    assert record["mean_fitness"] == pytest.approx(float(np.mean(expected)), rel=1e-4)


def test_python_loops_report_that_they_match_evaluate(quick_l0):
    built, population = quick_l0
    env, params = built.env, built.env_params
    for jitted in ("step", "scan"):
        record = baselines.python_loop(
            population,
            env,
            params,
            jr.key(3),
            jitted=jitted,
            num_genomes=2,
            num_steps=5,
        )
        assert record["baseline"] == f"python_{jitted}_loop"
        assert record["matches_evaluate"] is True
        assert record["measured_on"] == "2 genomes x 5 steps"


@pytest.mark.parametrize("genome_keys", [False, True])
def test_hand_fused_runs_evolve_s_schedule_on_shared_episodes(genome_keys):
    # A key-dependent fitness: per-genome episodes would give other values.
    strategy = eqxevo.Strategy("snes", Net(key=jr.key(0)), 8)
    key = jr.key(5)
    fused = baselines.hand_fused_call(
        strategy, noisy_sphere, key, genome_keys=genome_keys
    )
    fused = {"best": np.asarray(fused(3))}
    history = eqxevo.evolve(
        key, strategy, noisy_sphere, num_generations=3, chunk_size=3
    ).history
    np.testing.assert_allclose(fused["best"], history["best"], rtol=1e-5)
    per_genome = eqxevo.evolve(
        key,
        strategy,
        noisy_sphere,
        num_generations=3,
        chunk_size=3,
        episodes="per_genome",
    ).history
    assert not np.allclose(fused["best"], per_genome["best"], rtol=1e-5)


# -- children, curves, memory -------------------------------------------------------


def test_steady_times_alternates_the_calls_and_differences_two_lengths():
    from eqxevo._app.bench.common import steady_times

    order = []

    def call(name, cost):
        def run(n):
            order.append((name, n))
            return jnp.sum(jnp.ones((cost * n,)))  # work grows with n

        return run

    times = steady_times({"a": call("a", 1000), "b": call("b", 2000)}, 3, repeats=2)
    # each compiled at both lengths, then every round times both, in turn
    rounds = [("a", 3), ("a", 6), ("b", 3), ("b", 6)]
    assert order == rounds * 3
    for name in ("a", "b"):
        t = times[name]
        assert set(t) == {
            "compile_s",
            "generation_s",
            "generation_cpu_s",
            "call_overhead_s",
        }
        assert t["generation_s"] > 0 and t["generation_cpu_s"] > 0
        assert t["compile_s"] >= 0 and t["call_overhead_s"] >= 0


def test_spawn_measures_in_a_child_and_leaves_this_process_alone():
    before = jax.device_count()
    child = spawn.call("eqxevo._app.bench.common:machine_info", num_devices=2)
    assert child.result["num_devices"] == 2 and child.result["backend"] == "cpu"
    assert child.process_s >= child.startup_s > 0
    assert jax.device_count() == before
    with pytest.raises(spawn.ChildFailed, match="milestone_experiment on 1 device"):
        spawn.call("eqxevo._app.bench.milestones:milestone_experiment", {"name": "L9"})


def test_importing_the_harness_changes_no_jax_setting():
    script = (
        "import jax; before = dict(jax.config.values)\n"
        "import eqxevo._app.bench.cli, eqxevo._app.bench.parts\n"
        "import eqxevo._app.bench.cartpole, eqxevo._app.bench.cache\n"
        "import eqxevo._app.bench.scaling, eqxevo._app.bench.fidelity_curves\n"
        "import eqxevo._app.bench.spawn, eqxevo._app.bench.pallas\n"
        "import eqxevo._app.bench.gymnax_suite\n"
        "eqxevo._app.bench.cli.bench.make_context('bench', ['--quick'])\n"
        "assert dict(jax.config.values) == before\n"
        "assert not hasattr(jax, 'tree_map')\n"
        "print('unchanged')"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "unchanged"


def test_the_evojax_alias_lives_only_inside_its_block():
    from eqxevo._app.bench.cartpole import _jax_tree_map_alias

    assert not hasattr(jax, "tree_map")
    with _jax_tree_map_alias():
        assert jax.tree_map is jax.tree.map  # pyright: ignore[reportAttributeAccessIssue]
    assert not hasattr(jax, "tree_map")


def test_fidelity_curves_come_from_one_evolve_call_per_variant(monkeypatch):
    from eqxevo._app.bench import fidelity_curves as fidelity

    calls = []
    real = fidelity.evolve

    def counted(*args, **kwargs):
        calls.append(kwargs["num_generations"])
        return real(*args, **kwargs)

    monkeypatch.setattr(fidelity, "evolve", counted)
    result = fidelity.fidelity_curves(
        quick=True, generations=2, eval_every=1, seeds=1, test_episodes=2
    )
    assert calls == [2, 2]  # full, multi-fidelity: no loop over generations
    rows = result["rows"]
    full = [r["agent_steps"] for r in rows if r["variant"] == "full"]
    multi = [r["agent_steps"] for r in rows if r["variant"] == "multi_fidelity"]
    # P = 32, T = 100, proxy T = 10, k = 8
    assert full == [0, 3200, 6400] and multi == [0, 1120, 2240]
    assert result["agent_steps_ratio"] == pytest.approx(3200 / 1120)
    assert [r["generation"] for r in rows] == [0, 1, 2] * 2
    assert all(np.isfinite(r["test_fitness"]) for r in rows)


def test_micro_batching_shrinks_the_planned_memory():
    records = batch_memory(quick=True, batch_sizes=(None, 32, 16), repeats=1)
    assert [r["batch_size"] for r in records] == [None, 32, 16]
    temp = [r["temp_bytes"] for r in records]
    assert temp[0] > temp[1] > temp[2]
    assert records[0]["trace_bytes_per_genome"] == 16 * 16 * 4


def _scan_text(body, init, *extra):
    def run(init, *extra):
        return jax.lax.scan(lambda c, _: (body(c, *extra), None), init, None, length=7)[
            0
        ]

    return jax.jit(run).lower(init, *extra).compile().as_text()


def test_an_elementwise_chain_fuses_to_one_kernel_per_step():
    text = _scan_text(lambda c: jnp.tanh(jnp.sin(c) * 2.0 + 1.0) - c, jnp.ones(8))
    counts = loop_body_kernels(text)
    # the chain, and the scan's counter increment
    assert counts["by_opcode"] == {"fusion": 2}
    assert counts["total"] == 2 and counts["trip_count"] == 7
    assert counts["condition"] == 1 and counts["in_nested_loops"] == 0


def test_non_fusible_ops_count_one_kernel_each():
    chain = loop_body_kernels(_scan_text(lambda c: jnp.sin(c) * 2.0, jnp.ones(8)))
    text = _scan_text(
        lambda c, m: jnp.sort(jnp.sin(c) * 2.0) @ m, jnp.ones(8), jnp.ones((8, 8))
    )
    counts = loop_body_kernels(text)
    assert counts["by_opcode"]["sort"] == 1 and counts["by_opcode"]["dot"] == 1
    assert counts["total"] == chain["total"] + 2


def test_a_nested_loop_counts_its_kernels_once_per_trip():
    def body(c):
        return jax.lax.fori_loop(0, 3, lambda i, x: jnp.sort(x) * 2.0, c)

    counts = loop_body_kernels(_scan_text(body, jnp.ones(8)))
    assert counts["by_opcode"]["sort"] == 3
    assert counts["by_opcode"]["while"] == 1
    assert counts["in_nested_loops"] >= 3 * 2  # sort + the inner loop's counter
    assert counts["total"] == counts["top_level"] + counts["in_nested_loops"]
    assert counts["loops"] == 2 and counts["trip_count"] == 7
    with pytest.raises(ValueError, match="trip count 5"):
        loop_body_kernels(_scan_text(body, jnp.ones(8)), trip_count=5)
    with pytest.raises(ValueError, match="no while loop"):
        loop_body_kernels(jax.jit(jnp.sin).lower(jnp.ones(3)).compile().as_text())
    # a loop in a loop in the body: its kernels count once per trip of both,
    # and once only among the nested ones
    twice = loop_body_kernels(
        _scan_text(
            lambda c: jax.lax.fori_loop(0, 2, lambda i, x: body(x), c), jnp.ones(8)
        )
    )
    assert twice["by_opcode"]["sort"] == 2 * 3
    assert twice["total"] == twice["top_level"] + twice["in_nested_loops"]


def test_milestone_kernels_count_the_lifetime_loop_of_evaluate():
    rows = milestone_kernels(
        "L0", quick=True, options=("default", "copy insertion region analysis")
    )
    assert [r["option"] for r in rows] == ["default", "copy insertion region analysis"]
    for r in rows:
        # a shared episode's loop runs blocks of 10 steps (T = 100): per step
        assert r["steps_per_trip"] == 10
        parts = r["top_level"] + r["in_nested_loops"] + r["in_branches"]
        assert r["kernels_per_step"] == pytest.approx(parts)
        assert r["by_opcode"]["fusion"] > 0
    # region analysis drops copies, and only copies
    default, region = (r["by_opcode"] for r in rows)
    assert region["copy"] < default["copy"]
    assert region["fusion"] == default["fusion"]


def test_bfloat16_traces_plan_fewer_bytes_per_genome_than_float32():
    rows = memory_per_genome(quick=True, trace_dtypes=("float32", "bfloat16"))
    f32, bf16 = (r["bytes_per_genome"] for r in rows)
    assert bf16 < f32
    # the traces' own halving (128 neurons x fan-in 8 edges x 2 bytes), give or
    # take a few bytes of XLA's other temporaries (2,044 on 2026-11-26)
    assert f32 - bf16 >= 0.99 * 128 * 8 * 2
    for r in rows:
        small, large = r["planned_bytes"]
        assert large > small


def test_bits_on_one_device_compare_batch_sizes_instead_of_device_counts(monkeypatch):
    # a one-GPU machine has no 2 or 4 devices to compare: two block sizes instead
    from eqxevo._app.bench.bit_identity import _compare

    monkeypatch.setattr(jax, "device_count", lambda: 1)
    records = _compare("L0", 20, {"episode_length": 10})
    variants = {(r["episodes"], r["variant"]) for r in records}
    assert variants == {
        (episodes, f"batch_size={size}")
        for episodes in ("shared", "per_genome")
        for size in (16, 8)
    }
    assert all(r["differing_leaves"] == "none" for r in records)
    assert {r["device"] for r in records} == {jax.devices()[0].device_kind}


def test_layout_determinism_reports_bits_twice_and_in_blocks_with_the_speed():
    # on CPU every XLA layout is deterministic; on a GPU segment was not (H100)
    from eqxevo._app.bench.determinism import DETERMINISM_COLUMNS, layout_determinism

    (record,) = layout_determinism(quick=True, milestones=("L0",), layouts=("gather",))
    assert set(DETERMINISM_COLUMNS) <= set(record)
    assert record["layout"] == "gather" and record["auto"] is False  # CPU: segment
    assert record["same_key_identical"] and record["two_blocks_identical"]
    assert record["agent_steps_per_s"] > 0
    assert record["device"] == jax.devices()[0].device_kind
