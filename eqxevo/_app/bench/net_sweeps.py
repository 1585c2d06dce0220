"""Network benchmarks: layout throughput, memory per genome, trace dtype drift.

The workload is described in docs/performance.md, "How the harness measures".
"""

import functools
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src._types import PRNGKey
from eqxevo._src.evaluate import evaluate
from eqxevo._src.nets.plasticity import (
    HebbianRule,
    STDPRule,
    check_trace_dtype,
    random_bits,
    stochastic_round,
)
from eqxevo._src.nets.propagate import choose_layout
from eqxevo._src.nets.sparse import SparseRatePolicy, SparseSpikingPolicy
from eqxevo._src.nets.topology import Topology

from .common import add_record, time_call

LAYOUT_SIZES: tuple[int, ...] = (64, 256, 1024, 4096)
"""Network sizes N of the full layout sweep."""
LAYOUT_DENSITIES: tuple[float, ...] = (0.01, 0.03, 0.06, 0.125, 0.25)
"""Densities K / N of the full layout sweep."""

DENSE_MAX_BYTES = 2**30
"""Dense stores N^2 values per genome (twice with plasticity): a point whose
population state is larger is skipped (it would not fit comfortably in memory)."""


def echo_lifetime(policy: Any, key: PRNGKey, num_steps: int) -> jax.Array:
    """Total reward of one `num_steps` lifetime in the echo environment.

    The environment costs almost nothing, so the time is the network's:
    obs(t+1) = [a0, a1, a0 a1, 1], reward(t) = a0 (handed to `reinforce`).
    """

    def body(carry: Any, _: None) -> tuple[Any, None]:
        state, obs, total = carry
        action, state = policy(obs, state)
        reward = action[0]
        state = policy.reinforce(reward, state)
        obs = jnp.stack([action[0], action[1], action[0] * action[1], jnp.ones(())])
        return (state, obs, total + reward), None

    init = (policy.initial_state(key), jnp.zeros(4), jnp.zeros(()))
    (_, _, total), _ = jax.lax.scan(body, init, None, length=num_steps)
    return total


def make_population(genome: Any, population_size: int, key: PRNGKey) -> Any:
    """`population_size` perturbed copies of `genome`'s evolvable leaves.

    Static leaves (topology) stay shared, exactly as `Strategy.ask` returns them.
    """
    evolvable, static = eqx.partition(genome, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(evolvable)
    keys = jr.split(key, len(leaves))
    noisy = [
        x[None] + 0.01 * jr.normal(k, (population_size, *x.shape), x.dtype)
        for x, k in zip(leaves, keys, strict=True)
    ]
    return eqx.combine(jax.tree.unflatten(treedef, noisy), static)


def state_bytes(state: Any) -> dict[str, int]:
    """Bytes of one genome's lifetime state: total, and per-edge traces alone."""
    total = sum(x.nbytes for x in jax.tree.leaves(state))
    plastic = getattr(state, "plastic", None)
    trace = 0 if plastic is None else plastic.trace.nbytes
    return {"state_bytes": int(total), "trace_bytes": int(trace)}


def build_policy(
    *,
    model: str,
    num_neurons: int,
    fan_in: int,
    layout: str,
    plastic: bool,
    trace_dtype: str = "float32",
    key: PRNGKey,
) -> Any:
    """The benchmarked network: a sparse rate or spiking policy, 4 in, 2 out."""
    topology_key, policy_key = jr.split(key)
    topology = Topology.fixed_fan_in(num_neurons, fan_in, key=topology_key)
    if model == "rate":
        rule = HebbianRule(trace_dtype=trace_dtype) if plastic else None
        return SparseRatePolicy(
            4, 2, topology, layout=layout, plasticity=rule, key=policy_key
        )
    if model == "spiking":
        rule = STDPRule(trace_dtype=trace_dtype) if plastic else None
        return SparseSpikingPolicy(
            4, 2, topology, layout=layout, plasticity=rule, key=policy_key
        )
    raise ValueError(f"model must be 'rate' or 'spiking'; got {model!r}")


def echo_population(
    policy_key: PRNGKey,
    population_key: PRNGKey,
    population_size: int,
    **network: Any,
) -> tuple[Any, Any]:
    """The benchmarked network and a population of it: `(policy, population)`.

    Arguments:
        policy_key, population_key: keys of `build_policy` and `make_population`.
        population_size: P.
        network: `build_policy`'s other keyword arguments.
    """
    policy = build_policy(key=policy_key, **network)
    return policy, make_population(policy, population_size, population_key)


def dense_too_large(
    layout: str, num_neurons: int, population_size: int, plastic: bool
) -> str | None:
    """Why a dense-layout point is skipped (its state over `DENSE_MAX_BYTES`), or
    None when it is measured."""
    # N^2 float32 weights per genome, and as many traces when plastic
    dense_bytes = population_size * num_neurons**2 * 4 * (2 if plastic else 1)
    if layout == "dense" and dense_bytes > DENSE_MAX_BYTES:
        return f"dense state {dense_bytes / 2**30:.1f} GiB"
    return None


def layout_throughput(
    *,
    layout: str,
    num_neurons: int,
    fan_in: int,
    population_size: int,
    num_steps: int,
    plastic: bool,
    model: str = "rate",
    trace_dtype: str = "float32",
    repeats: int = 3,
    key: PRNGKey,
) -> dict[str, Any]:
    """Agent-steps per second of one population lifetime under `eqxevo.evaluate`.

    Returns a record with the configuration, `compile_s`, `wall_s`, `cpu_s`,
    `steps_per_s` (P T / median wall time), `cpu_steps_per_s` (P T / median
    process CPU time), the layout `"auto"` would pick, and the lifetime-state
    bytes of one genome.
    """
    policy_key, population_key, eval_key, state_key = jr.split(key, 4)
    policy, population = echo_population(
        policy_key,
        population_key,
        population_size,
        model=model,
        num_neurons=num_neurons,
        fan_in=fan_in,
        layout=layout,
        plastic=plastic,
        trace_dtype=trace_dtype,
    )
    fitness = functools.partial(echo_lifetime, num_steps=num_steps)
    compile_s, wall, cpu = time_call(
        lambda: evaluate(eval_key, fitness, population)[0], repeats
    )
    work = population_size * num_steps
    return {
        "model": model,
        "layout": policy.layout.name,
        "auto": choose_layout(
            num_neurons, num_neurons * fan_in, fan_in, plastic=plastic
        ),
        "num_neurons": num_neurons,
        "fan_in": fan_in,
        "num_edges": num_neurons * fan_in,
        "density": fan_in / num_neurons,
        "plastic": plastic,
        "trace_dtype": trace_dtype if plastic else None,
        "population_size": population_size,
        "num_steps": num_steps,
        "compile_s": round(compile_s, 3),
        "wall_s": wall,
        "cpu_s": cpu,
        "steps_per_s": work / wall,
        "cpu_steps_per_s": work / cpu,
        **state_bytes(policy.initial_state(state_key)),
    }


def layout_grid(quick: bool) -> list[dict[str, Any]]:
    """The (N, K, P, T) points of the layout sweep.

    Full: N in {64, 256, 1024, 4096}, fan-in K = round(density N) for densities
    1-25% (at least 1), P and T shrinking with N so each point runs in seconds.
    Quick (CI smoke, < 1 minute): N = 64 at 12.5% density, short lifetimes.
    """
    sizes = (64,) if quick else LAYOUT_SIZES
    densities = (0.125,) if quick else LAYOUT_DENSITIES
    budget = {64: (256, 1000), 256: (128, 300), 1024: (32, 60), 4096: (8, 10)}
    if quick:
        budget = {64: (64, 100)}
    points = []
    for n in sizes:
        population_size, num_steps = budget[n]
        fan_ins = sorted({max(1, round(d * n)) for d in densities})
        for k in fan_ins:
            points.append(
                {
                    "num_neurons": n,
                    "fan_in": k,
                    "population_size": population_size,
                    "num_steps": num_steps,
                }
            )
    return points


def layout_sweep(
    *,
    quick: bool = False,
    layouts: Sequence[str] = ("segment", "gather", "dense"),
    plastic: Sequence[bool] = (False, True),
    repeats: int = 3,
    key: PRNGKey,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Throughput of every layout over the grid, with and without plasticity."""
    records: list[dict[str, Any]] = []
    for point in layout_grid(quick):
        n, p = point["num_neurons"], point["population_size"]
        for is_plastic in plastic:
            for layout in layouts:
                skipped = dense_too_large(layout, n, p, is_plastic)
                if skipped:
                    record = {
                        **point,
                        "layout": layout,
                        "plastic": is_plastic,
                        "skipped": skipped,
                    }
                else:
                    record = layout_throughput(
                        layout=layout,
                        plastic=is_plastic,
                        repeats=repeats,
                        key=key,
                        **point,
                    )
                add_record(records, record, log)
    return records


def best_and_auto(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per grid point: the best layout, `auto`'s pick and its fraction of the best.

    `auto` is recomputed with the current `choose_layout`, so saved records can be
    re-summarised after the rule changes. Ranking uses process CPU time (steadier
    than wall time on a shared machine).
    """
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        if "skipped" in r:
            continue
        k = (r["num_neurons"], r["fan_in"], r["plastic"])
        groups.setdefault(k, []).append(r)
    rows = []
    for (n, k, plastic), group in sorted(groups.items()):
        best = max(group, key=lambda r: r["cpu_steps_per_s"])
        auto = choose_layout(n, n * k, k, plastic=plastic, platform="cpu")
        picked = [r for r in group if r["layout"] == auto]
        ratio = (
            picked[0]["cpu_steps_per_s"] / best["cpu_steps_per_s"] if picked else None
        )
        rows.append(
            {
                "num_neurons": n,
                "fan_in": k,
                "density": k / n,
                "plastic": plastic,
                "best": best["layout"],
                "auto": auto,
                "auto_over_best": ratio,
                **{
                    f"{r['layout']}_cpu_steps_per_s": r["cpu_steps_per_s"]
                    for r in group
                },
            }
        )
    return rows


# -- trace dtype drift --------------------------------------------------------------


def trace_drift(
    *,
    trace_dtype: str,
    rounding: str,
    num_steps: int,
    decay: float = 0.999,
    num_edges: int = 4096,
    key: PRNGKey,
) -> dict[str, Any]:
    """Drift of a 16-bit eligibility trace against float32 over `num_steps` steps.

    The trace follows `e <- decay e + pre * post` with the same pre/post activity
    for every dtype (rates in [-1, 1], temporally correlated: an AR(1) process per
    neuron), so the difference is the storage dtype alone. `rounding` is
    `"nearest"` (plain cast) or `"stochastic"` (what eqxevo does).

    Returns the relative RMS error `|e - e32| / |e32|` and the relative mean bias
    `mean(e - e32) / mean(|e32|)` at the end, plus two scalar tests: a trace
    decaying from 1 (exact `decay^T`) and one accumulating 1e-3 per step (exact
    `1e-3 (1 - decay^T) / (1 - decay)`).
    """
    dtype = check_trace_dtype(trace_dtype)
    if rounding not in ("nearest", "stochastic"):
        raise ValueError(
            f"rounding must be 'nearest' or 'stochastic'; got {rounding!r}"
        )
    act_key, seed_key = jr.split(key)
    seed = jr.bits(seed_key, (), jnp.uint32)
    num_neurons = 64
    src = jr.randint(act_key, (num_edges,), 0, num_neurons)
    dst = jr.randint(jr.fold_in(act_key, 1), (num_edges,), 0, num_neurons)

    def store(value: jax.Array, step: jax.Array) -> jax.Array:
        if dtype == jnp.float32:
            return value
        if rounding == "nearest":
            return value.astype(dtype)
        bits = random_bits(seed, step, value.shape)
        return stochastic_round(value, dtype, bits)

    def body(carry: Any, step: jax.Array) -> tuple[Any, None]:
        x, e32, e16, d16, a16 = carry
        noise = jr.normal(jr.fold_in(act_key, step), (num_neurons,))
        x = 0.95 * x + 0.3 * noise
        rate = jnp.tanh(x)
        increment = rate[src] * rate[dst]
        e32 = decay * e32 + increment
        e16 = store(decay * e16.astype(jnp.float32) + increment, step)
        d16 = store(decay * d16.astype(jnp.float32), step + jnp.uint32(2**31))
        a16 = store(decay * a16.astype(jnp.float32) + 1e-3, step + jnp.uint32(2**30))
        return (x, e32, e16, d16, a16), None

    init = (
        jnp.zeros(num_neurons),
        jnp.zeros(num_edges),
        jnp.zeros(num_edges, dtype),
        jnp.ones((), dtype),
        jnp.zeros((), dtype),
    )
    steps = jnp.arange(num_steps, dtype=jnp.uint32)
    run = jax.jit(lambda init: jax.lax.scan(body, init, steps)[0])
    _, e32, e16, d16, a16 = run(init)
    e32, e16 = (
        np.asarray(e32, np.float64),
        np.asarray(e16.astype(jnp.float32), np.float64),
    )
    exact_decay = decay**num_steps
    exact_accumulate = 1e-3 * (1 - decay**num_steps) / (1 - decay)
    return {
        "trace_dtype": str(dtype),
        "rounding": rounding if dtype != jnp.float32 else "exact",
        "num_steps": num_steps,
        "decay": decay,
        "relative_rms_error": float(np.linalg.norm(e16 - e32) / np.linalg.norm(e32)),
        "relative_bias": float(np.mean(e16 - e32) / np.mean(np.abs(e32))),
        "decay_test": float(d16.astype(jnp.float32)),
        "decay_exact": exact_decay,
        "accumulate_test": float(a16.astype(jnp.float32)),
        "accumulate_exact": exact_accumulate,
    }


def trace_drift_sweep(
    *,
    quick: bool = False,
    key: PRNGKey,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """`trace_drift` for float16/bfloat16 x nearest/stochastic at 1e4 and 1e5 steps."""
    lengths = (1_000,) if quick else (10_000, 100_000)
    records: list[dict[str, Any]] = []
    for num_steps in lengths:
        for dtype in ("float16", "bfloat16"):
            for rounding in ("nearest", "stochastic"):
                record = trace_drift(
                    trace_dtype=dtype, rounding=rounding, num_steps=num_steps, key=key
                )
                add_record(records, record, log)
    return records


__all__ = [
    "DENSE_MAX_BYTES",
    "LAYOUT_DENSITIES",
    "LAYOUT_SIZES",
    "best_and_auto",
    "build_policy",
    "dense_too_large",
    "echo_lifetime",
    "echo_population",
    "layout_grid",
    "layout_sweep",
    "layout_throughput",
    "make_population",
    "state_bytes",
    "trace_drift",
    "trace_drift_sweep",
]
