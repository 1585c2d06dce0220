"""`report.md`: every measured figure against its target, met or "missed by N x"."""

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .brax_sides import BRAX_COLUMNS
from .cartpole import CARTPOLE_COLUMNS
from .common import fmt, table
from .determinism import DETERMINISM_COLUMNS
from .kernels import KERNEL_COLUMNS, MEMORY_COLUMNS
from .milestones import BREAKDOWN_COLUMNS
from .pallas import PALLAS_COLUMNS
from .prng import THREEFRY_COLUMNS
from .qd_arm import QD_COLUMNS
from .scaling import BATCHING_COLUMNS, DEVICE_COLUMNS


def _target(
    name: str, value: float | int | None, bound: float | int, above: bool
) -> dict:
    if value is None:
        return {"target": name, "value": None, "status": "not measured"}
    met = value >= bound if above else value <= bound
    if met:
        status = "met"
    else:
        factor = bound / value if above else value / bound
        # three decimals where two would round a miss to "1.00x"
        status = (
            f"missed by {factor:.2f}x"
            if factor >= 1.005
            else f"missed by {factor:.3f}x"
        )
    return {"target": name, "value": value, "status": status}


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of the issue with its measured value and status."""
    rows = []
    milestones = {r["milestone"]: r for r in results.get("milestones", [])}
    l0 = milestones.get("L0", {})
    ratios = {b["baseline"]: b["evolve_over_baseline"] for b in l0.get("baselines", [])}
    rows.append(
        _target("evolve / hand-fused JAX >= 0.95", ratios.get("hand_fused"), 0.95, True)
    )
    cpu = {
        b["baseline"]: b.get("evolve_over_baseline_cpu")
        for b in l0.get("baselines", [])
    }
    rows.append(
        _target(
            "evolve / hand-fused JAX >= 0.95, in CPU time",
            cpu.get("hand_fused"),
            0.95,
            True,
        )
    )
    rows.append(
        _target(
            "evolve / Python loop, jitted step >= 30",
            ratios.get("python_step_loop"),
            30,
            True,
        )
    )
    rows.append(
        _target(
            "evolve / NumPy vectorised >= 8", ratios.get("numpy_vectorised"), 8, True
        )
    )
    rows.append(
        _target(
            "evolve / per-genome jitted scan >= 2",
            ratios.get("python_scan_loop"),
            2,
            True,
        )
    )
    sides = {r["side"]: r.get("eqxevo_over_side") for r in results.get("cartpole", [])}
    rows.append(
        _target(
            "CartPole: eqxevo / evosax GymnaxProblem >= 1.5",
            sides.get("evosax GymnaxProblem"),
            1.5,
            True,
        )
    )
    rows.append(
        _target(
            "CartPole: eqxevo / EvoJAX SimManager >= 1.5",
            sides.get("EvoJAX SimManager"),
            1.5,
            True,
        )
    )
    t_rows = [r for r in results.get("scaling", []) if r["varied"] == "lifetime"]
    compile_ratio = memory_ratio = None
    if len(t_rows) >= 2:
        # the shortest and longest lifetimes of the T curve
        short, long = t_rows[0], t_rows[-1]
        compile_ratio = long["compile_s"] / max(short["compile_s"], 1e-9)
        if "temp_bytes" in short and "temp_bytes" in long:
            memory_ratio = (long["temp_bytes"] + long["argument_bytes"]) / max(
                short["temp_bytes"] + short["argument_bytes"], 1
            )
        name = f"T={long['lifetime']}/T={short['lifetime']}"
        rows.append(_target(f"compile time {name} <= 1.2", compile_ratio, 1.2, False))
        rows.append(
            _target(f"planned memory {name} (flat: <= 1.05)", memory_ratio, 1.05, False)
        )
    cache = results.get("cache")
    rows.append(
        _target(
            "warm persistent-cache compile / cold <= 0.2",
            cache.get("warm_over_cold_compile") if cache else None,
            0.2,
            False,
        )
    )
    for name, goal in (("L0", 2e6), ("L2", 1e6), ("L4", 5e5)):
        record = milestones.get(name)
        if not record:
            continue
        sharded = record.get("sharded", {})
        figure = sharded.get("agent_steps_per_s", record["agent_steps_per_s"])
        label = f"{name} agent-steps/s, all cores >= {goal:.0e}".replace("e+0", "e")
        if record.get("quick"):
            label += " (quick sizes: not comparable)"
        rows.append(_target(label, figure, goal, True))
    if sharded_l0 := l0.get("sharded", {}).get("agent_steps_per_s"):
        devices_used = l0["sharded"].get("num_devices", "all")
        rows.append(
            _target(
                f"L0 sharded ({devices_used} devices) / 1 device >= 1.8",
                sharded_l0 / l0["agent_steps_per_s"],
                1.8,
                True,
            )
        )
    devices = results.get("devices")
    if devices:
        speedups = [r["speedup"] for r in devices["median_by_devices"] if r["speedup"]]
        most = max(r["devices"] for r in devices["median_by_devices"])
        rows.append(
            _target(
                f"L0 speed-up on {most} devices >= 1.8",
                max(speedups) if most > 1 else None,
                1.8,
                True,
            )
        )
    fidelity = results.get("fidelity")
    if fidelity:
        rows.append(
            _target(
                "multi-fidelity: agent-steps per generation, full / multi >= 2.5",
                fidelity["agent_steps_ratio"],
                2.5,
                True,
            )
        )
    traces = results.get("traces")
    if traces:
        worst = max(
            (
                r["relative_rms_error"]
                for r in traces
                if r["rounding"] == "stochastic" and r["trace_dtype"] == "float16"
            ),
            default=None,
        )
        rows.append(
            _target(
                "float16 trace drift (stochastic rounding) <= 1%", worst, 0.01, False
            )
        )
    rows += _qd_targets(results.get("qd"))
    return rows


def _qd_targets(qd: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Issue 41's goals on the planar arm, as ratios of the sides' IQMs and of
    their generations per second (`qd_arm`)."""
    if not qd:
        return []
    side = {r["side"]: r for r in qd}
    ours, theirs = side["eqxevo MAP-Elites"], side["QDax MAP-Elites"]
    cma = side["eqxevo CMA-ME"]
    return [
        _target(
            f"QD arm: MAP-Elites {what}, eqxevo / QDax (IQM) >= 1",
            ours[f"{key}_iqm"] / theirs[f"{key}_iqm"],
            1.0,
            True,
        )
        for what, key in (("QD score", "qd_score"), ("coverage", "coverage"))
    ] + [
        _target(
            "QD arm: MAP-Elites generations/s, eqxevo / QDax >= 1",
            ours["over_qdax"],
            1.0,
            True,
        ),
        _target(
            "QD arm: QD score, CMA-ME / MAP-Elites (IQM) >= 1",
            cma["qd_score_iqm"] / ours["qd_score_iqm"],
            1.0,
            True,
        ),
    ]


def write_report(results: dict[str, Any], out: Path) -> str:
    """Write `report.md` and `results.json` to `out`; return the report text."""
    machine = results["machine"]
    lines = [
        "# eqxevo benchmark report",
        "",
        f"Machine: {machine['device_kind']} ({machine['backend']}, "
        f"{machine['num_devices']} device(s); child processes of sharded figures: "
        f"{machine.get('child_devices', machine['num_devices'])}), "
        f"{machine['cpu_count']} CPUs, "
        f"jax {machine['jax']}, load average {machine['load_average']}."
        + (
            " Quick mode: small sizes, figures not comparable."
            if results["quick"]
            else ""
        ),
        "",
        "## Targets",
        "",
        table(targets(results), ["target", "value", "status"]),
    ]
    for part, section in _sections().items():
        if results.get(part):
            lines += ["", *section(results[part])]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    return text


def _sections() -> dict[str, Callable[[Any], list[str]]]:
    """Per part, in the report's order: its section, from the part's results
    (each table's columns live beside the function that makes its records)."""

    def one_table(title: str, columns: Sequence[str], key: str | None = None) -> Any:
        # a section that is one table of the part's records (or of `key` in them)
        return lambda value: _section(
            title, table(value if key is None else value[key], columns)
        )

    threefry = "L0: unrolled threefry (`eqxevo.fast_cpu_prng`) vs JAX's default "
    return {
        "milestones": _milestones,
        "breakdown": one_table("Where an L0 step goes (one device)", BREAKDOWN_COLUMNS),
        "kernels": one_table(
            "Kernels per lifetime step (optimised HLO, by compile option)",
            KERNEL_COLUMNS,
        ),
        # L0 only: no milestone column
        "threefry": one_table(
            threefry + "CPU lowering (child processes)", THREEFRY_COLUMNS[1:]
        ),
        "memory": _memory,
        "cartpole": one_table("CartPole", CARTPOLE_COLUMNS),
        "brax": one_table("Brax (agent-steps/s, wall)", BRAX_COLUMNS),
        "qd": one_table(
            "Quality-diversity on the planar arm (IQM [95% BCa] over the runs)",
            QD_COLUMNS,
        ),
        "bits": _bits,
        "determinism": one_table(
            "The same key twice, per layout (evaluate; agent-steps/s, wall)",
            DETERMINISM_COLUMNS,
        ),
        "pallas": one_table(
            "Fused Pallas kernel vs XLA layouts (agent-steps/s, wall)", PALLAS_COLUMNS
        ),
        "cache": _cache,
        "devices": one_table(
            "Devices (L0, each count in a child process)",
            DEVICE_COLUMNS,
            key="median_by_devices",
        ),
        "fidelity": _fidelity,
        "batching": one_table(
            "Micro-batching (planned memory per block size)", BATCHING_COLUMNS
        ),
    }


def _section(title: str, *body: str) -> list[str]:
    return [f"## {title}", "", *body]


def _milestones(milestones: list[dict[str, Any]]) -> list[str]:
    rows = [
        {
            **m,
            "sharded_agent_steps_per_s": m.get("sharded", {}).get("agent_steps_per_s"),
            "planned_MiB": (
                (
                    m["evaluation_program"]["argument_bytes"]
                    + m["evaluation_program"]["temp_bytes"]
                )
                / 2**20
                if m.get("evaluation_program")
                else None
            ),
        }
        for m in milestones
    ]
    columns = [
        "milestone",
        "population_size",
        "lifetime",
        "layout",
        "compile_s",
        "generation_s",
        "call_overhead_s",
        "agent_steps_per_s",
        "sharded_agent_steps_per_s",
        "peak_bytes",
        "planned_MiB",
    ]
    lines = _section("Milestones", table(rows, columns))
    baselines = [
        {
            "milestone": m["milestone"],
            **b,
            # a Python loop is checked against `evaluate`, a fused program `evolve`
            "same_fitness": b.get("matches_evaluate", b.get("matches_evolve")),
        }
        for m in milestones
        for b in m.get("baselines", [])
    ]
    if baselines:
        columns = [
            "milestone",
            "baseline",
            "agent_steps_per_s",
            "measured_on",
            "same_fitness",
            "evolve_over_baseline",
            "evolve_over_baseline_cpu",
        ]
        lines += [
            "",
            *_section(
                "Baselines (same process, population, lifetime and episodes)",
                table(baselines, columns),
            ),
        ]
    return lines


def _memory(memory: dict[str, Any]) -> list[str]:
    donation = memory["donation"]
    return _section(
        "L4 planned memory per genome (XLA memory analysis)",
        table(memory["per_genome"], MEMORY_COLUMNS),
        "",
        f"One L4 `evolve` chunk at P={donation['population_size']}: donating "
        f"the strategy-state carry saves {donation['saved_bytes']} of "
        f"{donation['plain']['planned_bytes']} planned bytes "
        f"({fmt(100 * donation['saved_fraction'])}%).",
    )


def _bits(bits: list[dict[str, Any]]) -> list[str]:
    same = sum(r["differing_leaves"] == "none" for r in bits)
    columns = [
        "milestone",
        "lifetime",
        "episodes",
        "variant",
        "fitness_identical",
        "differing_leaves",
    ]
    return _section(
        "Bits across batch sizes and device counts",
        f"{same} of {len(bits)} evaluations identical to the whole-population, "
        "one-device evaluation in every leaf (fitness and aux); see "
        "docs/reproducibility.md.",
        "",
        table(bits, columns),
    )


def _cache(c: dict[str, Any]) -> list[str]:
    return _section(
        "Persistent compilation cache (child processes)",
        f"compile cold {fmt(c['cold']['compile_s'])} s, warm "
        f"{fmt(c['warm']['compile_s'])} s; start-up (import + first generation) "
        f"warm/cold {fmt(c['warm_over_cold_start'])}.",
    )


def _fidelity(fidelity: dict[str, Any]) -> list[str]:
    per = fidelity["agent_steps_per_generation"]
    finals = {
        name: f"{sum(v) / len(v):.4f} over {len(v)} seeds"
        for name, v in fidelity["final_test_fitness"].items()
        if v
    }
    return _section(
        "Multi-fidelity (L0)",
        f"Agent-steps per generation: full {per['full']}, multi-fidelity "
        f"{per['multi_fidelity']} ({fmt(fidelity['agent_steps_ratio'])}x "
        f"fewer). Test fitness after {fidelity['generations']} generations: "
        + "; ".join(f"{name} {value}" for name, value in finals.items())
        + ".",
    )


__all__ = ["targets", "write_report"]
