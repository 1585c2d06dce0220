"""The persistent compilation cache: a cold start against a warm one."""

import tempfile
import time
from typing import Any

from eqxevo._src.evolve import Chunk, evolve

from ..config import from_dict
from ..experiment.build import build
from . import spawn
from .scaling import FULL_BASE, QUICK_BASE, l0_table


def first_generations(sizes: dict[str, int]) -> dict[str, float]:
    """Build the L0 experiment of `sizes` and time two one-generation runs."""
    start = time.perf_counter()
    built = build(from_dict(l0_table(**sizes)))
    build_s = time.perf_counter() - start
    ready: list[float] = []

    def note(chunk: Chunk) -> bool:
        ready.append(chunk.seconds)
        return False

    # two one-generation chunks of one program: compile + run, then run
    evolve(
        built.key,
        built.strategy,
        built.fitness,
        num_generations=2,
        chunk_size=1,
        callback=note,
    )
    times = [ready[0], ready[1] - ready[0]]
    return {
        "build_s": build_s,
        "first_generation_s": times[0],
        "steady_generation_s": times[1],
    }


def compilation_cache(*, quick: bool = False) -> dict[str, Any]:
    """A cold start and a warm start (same cache directory) of one L0 generation.

    Returns `cold` and `warm` records (`import_s`: the child's start-up and the
    experiment's build; `first_generation_s`, `steady_generation_s`,
    `compile_s` = first - steady; `process_s`), and the warm/cold ratios of
    compile time and of start-up to the end of the first generation.
    """
    sizes = QUICK_BASE if quick else FULL_BASE
    runs = {}
    with tempfile.TemporaryDirectory(prefix="eqxevo-cache-") as cache:
        # cache every program, however small and quick to compile
        config = {
            "jax_compilation_cache_dir": cache,
            "jax_persistent_cache_min_compile_time_secs": 0.0,
            "jax_persistent_cache_min_entry_size_bytes": -1,
        }
        for name in ("cold", "warm"):
            child = spawn.call(
                "eqxevo._app.bench.cache:first_generations",
                {"sizes": sizes},
                jax_config=config,
            )
            record = dict(child.result)
            record["import_s"] = child.startup_s + record.pop("build_s")
            record["process_s"] = child.process_s
            record["compile_s"] = max(
                record["first_generation_s"] - record["steady_generation_s"], 0.0
            )
            runs[name] = record
    return {
        **sizes,
        "cold": runs["cold"],
        "warm": runs["warm"],
        "warm_over_cold_compile": runs["warm"]["compile_s"]
        / max(runs["cold"]["compile_s"], 1e-9),
        "warm_over_cold_start": (
            runs["warm"]["import_s"] + runs["warm"]["first_generation_s"]
        )
        / (runs["cold"]["import_s"] + runs["cold"]["first_generation_s"]),
    }


__all__ = ["compilation_cache", "first_generations"]
