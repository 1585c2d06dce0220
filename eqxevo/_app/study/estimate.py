"""`eqxevo study plan`: cells, runs, programs, and estimates of memory (from shapes)
and time (measured, or from the runs already complete).
"""

from pathlib import Path
from typing import Any

from eqxevo._src.evolve import Chunk, evolve

from ..metrics import format_seconds
from .group import Program, plan
from .runner import read_summary, run_dir
from .spec import Study


def measure_program(program: Program) -> dict[str, float]:
    """Seconds of compilation (roughly) and of one generation of one run.

    One `evolve` call of two one-generation chunks: the first chunk's time
    includes the compilation, the second reuses the program and is timed alone
    (`Chunk.seconds` is when a chunk's results were ready).
    """
    first = Program(program.index, program.members[:1])
    keys, strategy, fitness = first.stacked()
    ready: list[float] = []

    def on_chunk(chunk: Chunk) -> bool:
        ready.append(chunk.seconds)
        return False

    evolve(
        keys,
        strategy,
        fitness,
        num_generations=2,
        runs=1,
        callback=on_chunk,
        # The run's options (batch size, episodes ...), in one-generation chunks.
        options=first.members[0].built.options(),
        chunk_size=1,
        chunk_seconds=None,
        align=None,
    )
    generation = ready[1] - ready[0]
    return {"compile_s": max(ready[0] - generation, 0.0), "generation_s": generation}


def _from_runs(program: Program, out: Path) -> float | None:
    """Agent-steps per second of the program's complete runs (None if none)."""
    steps = seconds = 0.0
    for member in program.members:
        summary = read_summary(run_dir(out, member.run))
        if summary.get("complete") and summary.get("wall_time_s"):
            steps += summary["agent_steps"]
            seconds += summary["wall_time_s"]
    return steps / seconds if seconds else None


def describe_plan(
    study: Study, out: Path, *, measure: bool = False
) -> tuple[str, dict[str, Any]]:
    """The plan as text and as JSON-ready data."""
    programs = plan(study)
    measured = {p.index: measure_program(p) for p in programs} if measure else {}
    lines = [
        f"study {study.name}: {len(study.cells)} cells x {len(study.seeds)} seeds "
        f"= {len(study.runs)} runs in {len(programs)} compiled programs",
        "",
        "cells:",
    ]
    lines += [f"  {c.name}" for c in study.cells]
    lines.append("")
    data: dict[str, Any] = {
        "study": study.name,
        "cells": [c.name for c in study.cells],
        "runs": len(study.runs),
        "programs": [],
    }
    total_seconds: float | None = 0.0
    for p in programs:
        exp = p.experiment
        memory = p.memory_bytes()
        entry: dict[str, Any] = {
            "index": p.index,
            "runs": [r.id for r in p.runs],
            "cells": list(p.cells),
            "population": p.members[0].built.strategy.population_size,
            "parameters": p.members[0].built.strategy.num_params,
            "lifetime": exp.run.lifetime,
            "generations": exp.run.generations,
            "agent_steps": p.agent_steps,
            "memory_bytes": memory,
            "seconds": None,
        }
        if p.index in measured:
            m = measured[p.index]
            entry["seconds"] = (
                m["compile_s"]
                + m["generation_s"] * len(p.members) * exp.run.generations
            )
            entry["measured"] = m
        else:
            rate = _from_runs(p, out)
            if rate:
                entry["seconds"] = p.agent_steps / rate
        if entry["seconds"] is None:
            total_seconds = None
        elif total_seconds is not None:
            total_seconds += entry["seconds"]
        data["programs"].append(entry)
        when = (
            "time unknown (pass --measure)"
            if entry["seconds"] is None
            else f"~{format_seconds(entry['seconds'])}"
        )
        lines += [
            f"program {p.index}: {len(p.members)} runs of {', '.join(p.cells)}",
            f"  P={entry['population']}, {entry['parameters']} parameters, "
            f"T={exp.run.lifetime}, {exp.run.generations} generations: "
            f"{p.agent_steps:.3g} agent-steps; memory ~{memory / 2**20:.1f} MiB "
            f"(states + one generation's lifetimes); {when}",
        ]
    data["seconds"] = total_seconds
    lines += [
        "",
        "total: "
        + (
            "time unknown (pass --measure)"
            if total_seconds is None
            else f"~{format_seconds(total_seconds)} on this machine, programs one "
            "after another"
        ),
    ]
    return "\n".join(lines), data


__all__ = ["describe_plan", "measure_program"]
