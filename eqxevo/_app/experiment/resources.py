"""What a run needs and has: XLA's memory estimate of a chunk against the devices'
memory, and the projected time it prints.
"""

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from eqxevo._src.memory import available_memory, format_bytes

from .build import Built


class ResourceError(RuntimeError):
    """The run does not fit the device's memory (XLA's estimate, or its refusal)."""


def memory_estimate(compiled: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled program, in bytes per device:
    arguments, outputs, temporaries and the `total` live at once."""
    stats = compiled.memory_analysis()
    if stats is None:
        return {}
    out = {
        "arguments": int(stats.argument_size_in_bytes),
        "outputs": int(stats.output_size_in_bytes),
        "temporaries": int(stats.temp_size_in_bytes),
        "aliased": int(stats.alias_size_in_bytes),
    }
    out["total"] = (
        out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
    )
    return out


def chunk_bytes(compiled: Any, mesh: Mesh | None) -> int | None:
    """Bytes a chunk needs on the host (CPU devices share its memory) or on each
    GPU, from XLA's estimate; None when XLA gives none."""
    estimate = memory_estimate(compiled)
    if not estimate:
        return None
    devices = 1 if mesh is None else mesh.devices.size
    # XLA estimates one device; CPU "devices" are cores sharing one memory.
    return estimate["total"] * (devices if jax.default_backend() == "cpu" else 1)


def too_big(built: Built, needed: int, mesh: Mesh | None) -> str:
    """What to say when a run needs `needed` bytes: the estimate, the memory
    available, and what to change.

    `run.batch_size` is not advised: a chunk's memory is the population's
    (genomes, noise, strategy state, all P x D), which it does not bound; a
    lifetime's own state is small next to a genome (tests/test_faults.py).
    """
    available, where = available_memory(mesh)
    e = built.experiment
    p = e.strategy.population_size
    d = built.strategy.num_params
    population = (
        p * d * np.dtype(built.strategy.layout.dtype).itemsize * e.run.num_seeds
    )
    return (
        f"this run needs about {format_bytes(needed)} (XLA's memory analysis of one "
        f"chunk of generations) but {where} has {format_bytes(available or 0)} "
        f"available. Lower strategy.population_size (now {p}; the population alone "
        f"is {format_bytes(population)}: {p} genomes x {d} parameters) or split "
        "over more devices (--devices)"
    )


def check_fits(built: Built, needed: int, mesh: Mesh | None) -> None:
    """Raise `ResourceError` when `needed` bytes exceed the memory available."""
    available, _ = available_memory(mesh)
    if available is not None and needed > available:
        raise ResourceError(too_big(built, needed, mesh))


def state_bytes(built: Built) -> int:
    """Bytes of the strategy state a run starts from (P genomes for a
    population-based algorithm), computed without allocating it."""
    shapes = jax.eval_shape(built.initial_state)
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))


def exhausted(err: BaseException) -> bool:
    """Whether an XLA error says the device ran out of memory."""
    return "RESOURCE_EXHAUSTED" in str(err) or "Out of memory" in str(err)


__all__ = [
    "ResourceError",
    "check_fits",
    "chunk_bytes",
    "exhausted",
    "memory_estimate",
    "state_bytes",
    "too_big",
]
