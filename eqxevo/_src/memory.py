"""The devices' memory: what a run may use, in words a user reads."""

import os

import jax
from jax.sharding import Mesh


def format_bytes(count: int | float) -> str:
    """`512 MB`, `16.2 GB` (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count:.0f} B"


def available_memory(mesh: Mesh | None = None) -> tuple[int | None, str]:
    """Bytes a run may use on its devices, and what they are (None if unknown).

    GPUs report their limit through `memory_stats()`; on a CPU the host's
    available memory (Linux `MemAvailable`) is shared by every CPU device.
    """
    devices = list(mesh.devices.flat) if mesh is not None else jax.devices()[:1]
    # GPUs report their own limit; a CPU reports nothing and shares the host's.
    stats = devices[0].memory_stats() or {}
    if "bytes_limit" in stats:
        free = int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
        return free, f"each {devices[0].device_kind}"
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024, "this host"
    except OSError:
        pass
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return int(pages), "this host"
    except (ValueError, OSError, AttributeError):
        return None, "unknown"


__all__ = ["available_memory", "format_bytes"]
