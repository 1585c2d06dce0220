"""Scale benchmarks: population sharding, multi-fidelity, micro-batching.

Three measurements, all through `eqxevo.evolve` / `eqxevo.evaluate` (one way
to run):

    python scripts/bench_scale.py sharding        # agent-steps/s on 1 vs 2 devices
    python scripts/bench_scale.py multifidelity   # agent-steps and fitness curves
    python scripts/bench_scale.py memory          # micro-batching: memory vs batch

The device count of a JAX process is fixed at start, so every measurement runs
in a child process with `XLA_FLAGS=--xla_force_host_platform_device_count=N`
(`--devices`). Results go to `--out` (CSV, JSON, PNG) and to stdout.

Workload: `--workload l0` (default) is the L0 milestone (chemotaxis, the sparse
rate network of `eqxevo bench`), through `eqxevo.rollout`. `--workload standin`
is the stand-in written before L0 existed: a holonomic point agent in a 2-D
arena finds a source by the gradient of `C(p) = exp(-|p - source| / 0.5)`,
sensed with noise at four points around it (log-concentration), moving at most
0.01 per step; reward per step
`exp(-distance / 0.25)`; fitness is the lifetime's mean reward. The policy is a
dense recurrent rate network of 64 neurons (`--policy rnn`, ~4.4k parameters)
or an MLP 3-32-32-2 (`--policy mlp`). Every figure is labelled with the
workload.
"""

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# -- workloads (imported in the child, after the device count is set) -----------


def build_workload(args: argparse.Namespace) -> tuple[Any, Any, bool]:
    """`(genome, lifetime(genome, key, steps) -> (fitness, aux), maximize)`."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    if args.workload == "l0":
        from eqxevo.bench.milestones import milestone_experiment
        from eqxevo.experiment import build
        from eqxevo.rollout import rollout

        # the L0 milestone's genome: sparse rate network, N = 64, K = 8
        built = build(milestone_experiment("L0"))
        env, params, genome = built.env, built.env_params, built.genome

        def l0(genome: Any, key: Any, steps: int) -> Any:
            total, summary = rollout(key, genome, env, params, steps)
            return total / steps, summary  # mean reward: proxy and full compare

        return genome, l0, True

    class RatePolicy(eqx.Module):
        """Stand-in network: dense recurrent rate units, tanh."""

        w_rec: jax.Array
        w_in: jax.Array
        bias: jax.Array
        w_out: jax.Array

        def __init__(self, num_obs: int, num_neurons: int, *, key: Any):
            k1, k2, k3 = jr.split(key, 3)
            self.w_rec = jr.normal(k1, (num_neurons, num_neurons)) / num_neurons
            self.w_in = jr.normal(k2, (num_neurons, num_obs)) / math.sqrt(num_obs)
            self.bias = jnp.zeros(num_neurons)
            self.w_out = jr.normal(k3, (2, num_neurons)) / math.sqrt(num_neurons)

        def __call__(self, obs: jax.Array, h: jax.Array) -> tuple[jax.Array, Any]:
            h = jnp.tanh(self.w_rec @ h + self.w_in @ obs + self.bias)
            return jnp.tanh(self.w_out @ h), h

        def initial(self) -> jax.Array:
            return jnp.zeros(self.bias.shape)

    class MLP(eqx.Module):
        mlp: eqx.nn.MLP

        def __init__(self, num_obs: int, *, key: Any):
            self.mlp = eqx.nn.MLP(num_obs, 2, 32, 2, activation=jnp.tanh, key=key)

        def __call__(self, obs: jax.Array, h: jax.Array) -> tuple[jax.Array, Any]:
            return jnp.tanh(self.mlp(obs)), h

        def initial(self) -> jax.Array:
            return jnp.zeros(())

    num_obs = 3
    if args.policy == "rnn":
        genome = RatePolicy(num_obs, args.neurons, key=jr.key(0))
    else:
        genome = MLP(num_obs, key=jr.key(0))
    offsets = 0.05 * jnp.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])

    def standin(genome: Any, key: Any, steps: int) -> Any:
        # STAND-IN for L0 (see the module docstring).
        source_key, noise_key = jr.split(key)
        angle_key, distance_key = jr.split(source_key)
        angle = jr.uniform(angle_key, (), minval=0.0, maxval=2 * math.pi)
        distance = jr.uniform(distance_key, (), minval=0.5, maxval=0.9)
        source = distance * jnp.stack([jnp.cos(angle), jnp.sin(angle)])

        def step(carry: Any, _: Any) -> Any:
            t, position, h, total = carry
            sensors = position + offsets
            concentration = jnp.exp(-jnp.linalg.norm(sensors - source, axis=1) / 0.5)
            noise = 0.005 * jr.normal(jr.fold_in(noise_key, t), (4,))
            log_c = jnp.log(jnp.maximum(concentration + noise, 1e-3))
            obs = jnp.stack(
                [
                    (log_c[0] - log_c[1]) * 10.0,
                    (log_c[2] - log_c[3]) * 10.0,
                    jnp.mean(log_c),
                ]
            )
            action, h = genome(obs, h)
            position = jnp.clip(position + 0.01 * action, -1.0, 1.0)
            reward = jnp.exp(-jnp.linalg.norm(position - source) / 0.25)
            return (t + 1, position, h, total + reward), None

        start = (jnp.int32(0), jnp.zeros(2), genome.initial(), jnp.zeros(()))
        (_, position, _, total), _ = jax.lax.scan(step, start, None, length=steps)
        return total / steps, {"distance": jnp.linalg.norm(position - source)}

    return genome, standin, True


def traces_workload(neurons: int) -> tuple[Any, Any]:
    """Memory workload: a rate network whose lifetime carries an N x N trace."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    class Plastic(eqx.Module):
        w: jax.Array
        w_in: jax.Array

        def __init__(self, n: int, *, key: Any):
            k1, k2 = jr.split(key)
            self.w = jr.normal(k1, (n, n)) / n
            self.w_in = jr.normal(k2, (n, 2))

    def lifetime(genome: Any, key: Any, steps: int = 20) -> Any:
        n = genome.w.shape[0]

        def step(carry: Any, _: Any) -> Any:
            t, h, trace = carry
            obs = jr.normal(jr.fold_in(key, t), (2,))
            h = jnp.tanh((genome.w + 0.01 * trace) @ h + genome.w_in @ obs)
            # the eligibility trace: per genome, N x N floats for the lifetime
            trace = 0.9 * trace + jnp.outer(h, h)
            return (t + 1, h, trace), None

        start = (jnp.int32(0), jnp.ones(n) / n, jnp.zeros((n, n)))
        (_, h, trace), _ = jax.lax.scan(step, start, None, length=steps)
        return jnp.sum(h) + 1e-3 * jnp.sum(trace)

    return Plastic(neurons, key=jr.key(0)), lifetime


# -- children: one measurement in a process with a fixed device count -----------


def load() -> float:
    return os.getloadavg()[0]


def child_throughput(args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.random as jr

    import eqxevo

    genome, lifetime, maximize = build_workload(args)
    mesh = eqxevo.population_mesh() if args.num_devices > 1 else None
    strategy = eqxevo.Strategy("snes", genome, args.population, maximize=maximize)
    steps = args.steps
    fitness_fn = lambda g, k: lifetime(g, k, steps)
    gens = args.generations

    def run(key: Any) -> Any:
        return eqxevo.evolve(
            key,
            strategy,
            fitness_fn,
            num_generations=gens,
            chunk_size=gens,
            mesh=mesh,
            batch_size=args.batch_size,
        )

    start = time.perf_counter()
    run(jr.key(0))  # compiles
    compile_and_first = time.perf_counter() - start
    walls, loads = [], []
    for r in range(args.repeats):
        before = load()
        start = time.perf_counter()
        run(jr.key(r + 1))
        walls.append(time.perf_counter() - start)
        loads.append((before + load()) / 2)
    agent_steps = args.population * steps * gens
    return {
        "devices": len(jax.devices()),
        "mesh": None if mesh is None else mesh.size,
        "workload": args.workload,
        "policy": "sparse_rate" if args.workload == "l0" else args.policy,
        "population": args.population,
        "steps": steps,
        "generations": gens,
        "num_params": strategy.num_params,
        "walls_s": walls,
        "median_wall_s": statistics.median(walls),
        "agent_steps_per_s": agent_steps / statistics.median(walls),
        "first_call_s": compile_and_first,
        "load_1min": loads,
    }


def child_multifidelity(args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np

    import eqxevo

    genome, lifetime, maximize = build_workload(args)
    mesh = eqxevo.population_mesh() if args.num_devices > 1 else None
    strategy = eqxevo.Strategy("snes", genome, args.population, maximize=maximize)
    full_steps = args.steps
    proxy_steps = max(1, round(args.steps * args.proxy_fraction))
    k = args.promoted or args.population // 4
    full_fn = lambda g, key: lifetime(g, key, full_steps)
    variants = {
        "full": full_fn,
        "multi_fidelity": eqxevo.MultiFidelity(
            lambda g, key: lifetime(g, key, proxy_steps),
            full_fn,
            num_promoted=k,
            proxy_steps=proxy_steps,
            full_steps=full_steps,
        ),
    }
    # Test fitness: the search mean, full lifetimes on fixed held-out episodes.
    test_keys = jr.split(jr.key(12345), args.test_episodes)

    @jax.jit
    def test_fitness(state: Any) -> Any:
        mean = strategy.mean(state)
        values = jax.vmap(lambda key: full_fn(mean, key)[0])(test_keys)
        return jnp.mean(values)

    rows = []
    timing = {}
    for name, fitness_fn in variants.items():
        for seed in range(args.seeds):
            key = jr.key(1000 + seed)
            state = None
            spent = 0
            generation = 0
            start = time.perf_counter()
            rows.append(
                {
                    "variant": name,
                    "seed": seed,
                    "generation": 0,
                    "agent_steps": 0,
                    "test_fitness": float(
                        test_fitness(strategy.init(jr.split(key)[0]))
                    ),
                    "best": math.nan,
                }
            )
            while generation < args.generations:
                n = min(args.eval_every, args.generations - generation)
                result = eqxevo.evolve(
                    key,
                    strategy,
                    fitness_fn,
                    num_generations=n,
                    chunk_size=n,
                    state=state,
                    mesh=mesh,
                )
                state = result.state
                generation += n
                h = result.history
                per_generation = (
                    h["agent_steps"]
                    if "agent_steps" in h
                    else np.full(n, args.population * full_steps)
                )
                spent += int(np.sum(per_generation))
                rows.append(
                    {
                        "variant": name,
                        "seed": seed,
                        "generation": generation,
                        "agent_steps": spent,
                        "test_fitness": float(test_fitness(state)),
                        "best": float(h["best"][-1]),
                    }
                )
            timing.setdefault(name, []).append(time.perf_counter() - start)
    per_generation = {
        "full": args.population * full_steps,
        "multi_fidelity": variants["multi_fidelity"].agent_steps(args.population),
    }
    return {
        "workload": args.workload,
        "policy": "sparse_rate" if args.workload == "l0" else args.policy,
        "population": args.population,
        "full_steps": full_steps,
        "proxy_steps": proxy_steps,
        "num_promoted": k,
        "devices": len(jax.devices()),
        "agent_steps_per_generation": per_generation,
        "agent_steps_ratio": per_generation["full"] / per_generation["multi_fidelity"],
        "wall_s_per_run": timing,
        "rows": rows,
        "load_1min": load(),
    }


def child_memory(args: argparse.Namespace) -> dict[str, Any]:
    import resource

    import jax
    import jax.random as jr

    import eqxevo

    genome, lifetime = traces_workload(args.neurons)
    batch_size = None if args.batch_size in (None, 0) else args.batch_size
    strategy = eqxevo.Strategy("snes", genome, args.population)
    population, _ = strategy.ask(jr.key(1), strategy.init(jr.key(0)))
    run = jax.jit(
        lambda p, k: eqxevo.evaluate(k, lifetime, p, batch_size=batch_size)[0]
    )
    compiled = run.lower(population, jr.key(2)).compile()
    analysis = compiled.memory_analysis()
    compiled(population, jr.key(2)).block_until_ready()
    start = time.perf_counter()
    for _ in range(3):
        compiled(population, jr.key(2)).block_until_ready()
    wall = (time.perf_counter() - start) / 3
    return {
        "population": args.population,
        "neurons": args.neurons,
        "trace_bytes_per_genome": args.neurons**2 * 4,
        "batch_size": batch_size,
        "temp_bytes": None if analysis is None else analysis.temp_size_in_bytes,
        "argument_bytes": None if analysis is None else analysis.argument_size_in_bytes,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "wall_s": wall,
    }


CHILDREN = {
    "_throughput": child_throughput,
    "_multifidelity": child_multifidelity,
    "_memory": child_memory,
}


def spawn(mode: str, num_devices: int, args: argparse.Namespace, **extra: Any) -> Any:
    """Run `mode` in a fresh process with `num_devices` host devices; its JSON."""
    argv = [sys.executable, __file__, mode, "--num-devices", str(num_devices)]
    options = {**vars(args), **extra}
    for name in (
        "workload",
        "policy",
        "population",
        "steps",
        "generations",
        "repeats",
        "neurons",
        "seeds",
        "eval_every",
        "proxy_fraction",
        "promoted",
        "test_episodes",
        "batch_size",
    ):
        value = options.get(name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={num_devices}"
    ).strip()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{mode} on {num_devices} devices failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- parents ---------------------------------------------------------------


def sharding(args: argparse.Namespace) -> None:
    results = []
    # Interleave device counts so slow drifts in machine load hit both alike.
    for _ in range(args.rounds):
        for n in args.devices:
            result = spawn("_throughput", n, args)
            results.append(result)
            print(
                f"devices={n}: {result['agent_steps_per_s']:.3g} agent-steps/s "
                f"(median of {args.repeats}: {result['median_wall_s']:.3f} s for "
                f"{result['generations']} generations; load "
                f"{min(result['load_1min']):.2f}-{max(result['load_1min']):.2f})",
                flush=True,
            )
    by_devices: dict[int, list[float]] = {}
    for r in results:
        by_devices.setdefault(r["mesh"] or 1, []).append(r["agent_steps_per_s"])
    summary = {n: statistics.median(v) for n, v in sorted(by_devices.items())}
    base = summary.get(1)
    for n, rate in summary.items():
        speedup = f"  speedup {rate / base:.2f}x" if base else ""
        print(f"median over rounds, {n} device(s): {rate:.3g} agent-steps/s{speedup}")
    write_json(args, "sharding", {"runs": results, "median_by_devices": summary})


def multifidelity(args: argparse.Namespace) -> None:
    result = spawn("_multifidelity", args.devices[-1], args)
    rows = result.pop("rows")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "multifidelity_curve.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    per = result["agent_steps_per_generation"]
    print(
        f"agent-steps per generation: full {per['full']}, multi-fidelity "
        f"{per['multi_fidelity']} ({result['agent_steps_ratio']:.2f}x fewer)"
    )
    final: dict[str, list[float]] = {}
    for row in rows:
        if row["generation"] == args.generations:
            final.setdefault(row["variant"], []).append(row["test_fitness"])
    for name, values in final.items():
        spread = statistics.stdev(values) if len(values) > 1 else math.nan
        print(
            f"final test fitness, {name}: mean {statistics.mean(values):.4f} "
            f"std {spread:.4f} over {len(values)} seeds ({values})"
        )
    result["final_test_fitness"] = final
    write_json(args, "multifidelity", result)
    plot_curves(rows, result, out / "multifidelity_curve.png")


def memory(args: argparse.Namespace) -> None:
    results = []
    for batch_size in args.batch_sizes:
        r = spawn("_memory", 1, args, batch_size=batch_size)
        results.append(r)
        print(
            f"batch_size={r['batch_size']}: temp {r['temp_bytes'] / 2**20:.1f} MiB, "
            f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, {r['wall_s']:.3f} s",
            flush=True,
        )
    write_json(args, "memory", {"runs": results})


def write_json(args: argparse.Namespace, name: str, payload: Any) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"command": " ".join(sys.argv), **payload}
    (out / f"bench_scale_{name}.json").write_text(json.dumps(payload, indent=1))


def plot_curves(rows: list[dict[str, Any]], result: dict[str, Any], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no PNG (the CSV has the curves)")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    colours = {"full": "tab:blue", "multi_fidelity": "tab:orange"}
    for name in ("full", "multi_fidelity"):
        seeds = sorted({r["seed"] for r in rows if r["variant"] == name})
        for seed in seeds:
            mine = [r for r in rows if r["variant"] == name and r["seed"] == seed]
            label = name.replace("_", "-") if seed == seeds[0] else None
            for ax, x in zip(axes, ("generation", "agent_steps"), strict=True):
                ax.plot(
                    [r[x] for r in mine],
                    [r["test_fitness"] for r in mine],
                    color=colours[name],
                    alpha=0.8,
                    label=label,
                )
    axes[0].set_xlabel("generation")
    axes[1].set_xlabel("agent-steps spent")
    axes[0].set_ylabel("test fitness of the search mean (full lifetime)")
    axes[0].legend()
    fig.suptitle(
        f"{result['workload']} workload ({result['policy']}), "
        f"P={result['population']}, "
        f"T={result['full_steps']}, proxy T={result['proxy_steps']}, "
        f"k={result['num_promoted']}"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "mode", choices=["sharding", "multifidelity", "memory", *CHILDREN]
    )
    parser.add_argument("--workload", choices=["standin", "l0"], default="l0")
    parser.add_argument("--policy", choices=["rnn", "mlp"], default="rnn")
    parser.add_argument("--neurons", type=int, default=64)
    parser.add_argument("--population", type=int, default=256)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--num-devices", type=int, default=1)  # children
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--proxy-fraction", type=float, default=0.1)
    parser.add_argument("--promoted", type=int, default=None)
    parser.add_argument("--test-episodes", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=[0, 64, 16, 4]
    )  # 0: unbatched
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench_scale"))
    args = parser.parse_args()
    if args.mode in CHILDREN:
        print(json.dumps(CHILDREN[args.mode](args)))
        return
    {"sharding": sharding, "multifidelity": multifidelity, "memory": memory}[args.mode](
        args
    )


if __name__ == "__main__":
    main()
