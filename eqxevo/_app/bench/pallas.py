"""Pallas vs XLA: the fused step kernel against the XLA layouts, same network.

GPU only: elsewhere every point is reported "needs a GPU: not measured".
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo._src._types import PRNGKey
from eqxevo._src.evaluate import evaluate

from .common import add_record
from .net_sweeps import (
    dense_too_large,
    echo_lifetime,
    echo_population,
    layout_throughput,
)

NEEDS_GPU = "needs a GPU: not measured"
FUSED_LAYOUTS: tuple[str, ...] = ("segment", "gather", "dense", "pallas")
# The report's columns: one row per point (a summary, or the "not measured" row).
PALLAS_COLUMNS = [
    "model",
    "num_neurons",
    "fan_in",
    "population_size",
    "plastic",
    "trace_dtype",
    "segment_steps_per_s",
    "gather_steps_per_s",
    "dense_steps_per_s",
    "pallas_steps_per_s",
    "pallas_over_best_xla",
    "fitness_max_abs_diff",
    "skipped",
]


def pallas_grid(quick: bool) -> list[dict[str, Any]]:
    """The points of the comparison: network, population, lifetime, plasticity.

    Full: rate networks N = 64 (K = 8), 256 (K = 32), 1024 (K = 10), without
    plasticity, with float32 traces and with bfloat16 traces (Hebbian,
    reward-modulated), and a spiking (LIF, STDP) network at N = 256; GPU-sized
    populations. Quick: N = 64, K = 8, rate, plastic and not.
    """
    if quick:
        sizes = [(64, 8, 256, 100)]
    else:  # N, K, P, T
        sizes = [(64, 8, 1024, 1000), (256, 32, 1024, 300), (1024, 10, 256, 100)]
    plastic = [(False, "float32"), (True, "float32")]
    if not quick:
        plastic.append((True, "bfloat16"))
    points = [
        {
            "model": "rate",
            "num_neurons": n,
            "fan_in": k,
            "population_size": p,
            "num_steps": t,
            "plastic": is_plastic,
            "trace_dtype": dtype if is_plastic else None,
        }
        for n, k, p, t in sizes
        for is_plastic, dtype in plastic
    ]
    if not quick:
        points += [
            {
                "model": "spiking",
                "num_neurons": 256,
                "fan_in": 32,
                "population_size": 1024,
                "num_steps": 300,
                "plastic": is_plastic,
                "trace_dtype": "float32" if is_plastic else None,
            }
            for is_plastic in (False, True)
        ]
    return points


def fitness_agreement(
    *,
    model: str,
    num_neurons: int,
    fan_in: int,
    population_size: int,
    num_steps: int,
    plastic: bool,
    trace_dtype: str | None,
    key: PRNGKey,
) -> float:
    """Largest |fitness difference| between "pallas" and "gather", same genomes.

    A short lifetime (at most 50 steps) of the same population, keys and
    network; differences are float32 rounding (docs/performance.md).
    """
    policy_key, population_key, eval_key = jr.split(key, 3)
    lifetime = functools.partial(echo_lifetime, num_steps=min(num_steps, 50))
    fitness = {}
    for layout in ("gather", "pallas"):
        _, population = echo_population(
            policy_key,
            population_key,
            population_size,
            model=model,
            num_neurons=num_neurons,
            fan_in=fan_in,
            layout=layout,
            plastic=plastic,
            trace_dtype=trace_dtype or "float32",
        )
        fitness[layout] = evaluate(eval_key, lifetime, population)[0]
    return float(jnp.max(jnp.abs(fitness["pallas"] - fitness["gather"])))


def pallas_comparison(
    *,
    quick: bool = False,
    repeats: int = 3,
    key: PRNGKey,
    platform: str | None = None,
    points: Sequence[dict[str, Any]] | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Per point and layout, agent-steps/s (wall) of one population lifetime.

    On a platform other than GPU every point gives one row, layout "pallas",
    `skipped` = "needs a GPU: not measured", and nothing runs.

    Arguments:
        quick: the CI grid (`pallas_grid`).
        repeats: timed repeats per figure.
        key: the key for networks, populations and lifetimes.
        platform: `"gpu"` times; default `jax.default_backend()`.
        points: instead of `pallas_grid(quick)` (keys as its records).
        log: called with every record as it is made.

    Returns:
        Records as `nets.layout_throughput` makes them (plus `skipped` rows), and
        per point one summary row (`layout` = "summary") with every layout's
        `steps_per_s`, the fastest XLA layout, `pallas_over_best_xla` and the
        pallas/gather fitness agreement.
    """
    platform = platform or jax.default_backend()
    records: list[dict[str, Any]] = []
    for point in pallas_grid(quick) if points is None else points:
        if platform != "gpu":
            # interpret mode would check the kernel, not time it: no figure
            add_record(
                records, {**point, "layout": "pallas", "skipped": NEEDS_GPU}, log
            )
            continue
        # the first compiled run of the kernel checks its results first
        agreement = fitness_agreement(key=key, **point)
        speeds: dict[str, float] = {}
        for layout in FUSED_LAYOUTS:
            skipped = dense_too_large(
                layout, point["num_neurons"], point["population_size"], point["plastic"]
            )
            if skipped:
                record = {**point, "layout": layout, "skipped": skipped}
            else:
                record = layout_throughput(
                    layout=layout,
                    model=point["model"],
                    num_neurons=point["num_neurons"],
                    fan_in=point["fan_in"],
                    population_size=point["population_size"],
                    num_steps=point["num_steps"],
                    plastic=point["plastic"],
                    trace_dtype=point["trace_dtype"] or "float32",
                    repeats=repeats,
                    key=key,
                )
                speeds[layout] = record["steps_per_s"]
            add_record(records, record, log)
        xla = {name: s for name, s in speeds.items() if name != "pallas"}
        best = max(xla, key=lambda name: xla[name]) if xla else None
        summary = {
            **point,
            "layout": "summary",
            **{f"{name}_steps_per_s": s for name, s in speeds.items()},
            "best_xla": best,
            "pallas_over_best_xla": (
                speeds["pallas"] / xla[best]
                if best is not None and "pallas" in speeds
                else None
            ),
            "fitness_max_abs_diff": agreement,
        }
        add_record(records, summary, log)
    return records


__all__ = [
    "FUSED_LAYOUTS",
    "NEEDS_GPU",
    "PALLAS_COLUMNS",
    "fitness_agreement",
    "pallas_comparison",
    "pallas_grid",
]
