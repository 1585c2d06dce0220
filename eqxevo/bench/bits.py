"""`eqxevo bench --only bits`: do L0/L2/L4 give the same bits across batch sizes
and device counts, at their milestone lifetimes and at 1e5 steps?

The tests prove the mechanisms at short lifetimes (docs/reproducibility.md);
this part measures the milestone workloads themselves, where a last-bit
difference would have 1e5 steps to grow. One population of each milestone
(P = 32, shared and per-genome episodes) is evaluated whole on one device (the
reference), with `batch_size=16`, and on meshes of 2 and 4 host devices. The
device counts need a fresh process (`--xla_force_host_platform_device_count`),
so the part runs this module as a subprocess:

    python -m eqxevo.bench.bits [--quick]        # prints one JSON record per line
"""

import argparse
import json
import os
import subprocess
import sys
from typing import Any

POPULATION = 32
DEVICES = 4


def _workloads(quick: bool) -> list[tuple[str, int, dict[str, Any]]]:
    """(milestone, lifetime, env params overrides) to check."""
    from .milestones import MILESTONES

    if quick:
        # Short lifetimes with an episode every 20 steps: the reset path runs.
        return [(name, 200, {"episode_length": 20}) for name in MILESTONES]
    out = []
    for name, table in MILESTONES.items():
        for lifetime in (table["run"]["lifetime"], 100_000):
            out.append((name, lifetime, {}))
    return out


def _compare(name: str, lifetime: int, params: dict[str, Any]) -> list[dict]:
    import jax
    import jax.numpy as jnp
    import jax.random as jr
    import numpy as np

    from ..config import from_dict
    from ..evaluate import evaluate
    from ..experiment import build
    from ..sharding import population_mesh
    from .milestones import MILESTONES

    table = {k: dict(v) for k, v in MILESTONES[name].items()}
    table["run"] = {**table["run"], "lifetime": lifetime}
    table["strategy"] = {**table["strategy"], "population_size": POPULATION}
    table["env"] = {**table["env"], "params": params}
    built = build(from_dict(table))
    strategy = built.strategy
    population, _ = strategy.ask(jr.key(0), strategy.init(jr.key(1)))
    records = []
    for episodes in ("shared", "per_genome"):

        def run(episodes: str = episodes, **kwargs: Any) -> Any:
            return evaluate(
                jr.key(2), built.fitness, population, episodes=episodes, **kwargs
            )

        reference = run()
        variants = {"batch_size=16": run(batch_size=16)}
        for count in (2, DEVICES):
            mesh = population_mesh(jax.devices()[:count])
            variants[f"{count} devices"] = run(mesh=mesh)
        for variant, out in variants.items():
            leaves = jax.tree_util.tree_leaves_with_path(out)
            ref_leaves = jax.tree.leaves(reference)
            differ = [
                jax.tree_util.keystr(path)
                for (path, a), b in zip(leaves, ref_leaves, strict=True)
                if not np.array_equal(np.asarray(a), np.asarray(b))
            ]
            fitness_gap = float(
                jnp.max(jnp.abs(out[0] - reference[0]))
                / jnp.maximum(jnp.max(jnp.abs(reference[0])), 1e-30)
            )
            records.append(
                {
                    "milestone": name,
                    "lifetime": lifetime,
                    "episodes": episodes,
                    "variant": variant,
                    "fitness_identical": not fitness_gap,
                    "max_relative_fitness_gap": fitness_gap,
                    "differing_leaves": ",".join(differ) or "none",
                }
            )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eqxevo.bench.bits")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    for name, lifetime, params in _workloads(args.quick):
        for record in _compare(name, lifetime, params):
            print(json.dumps(record), flush=True)
    return 0


def run_bits(quick: bool) -> list[dict[str, Any]]:
    """Run this module in a fresh process with 4 host devices; its records."""
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}"
    command = [
        sys.executable,
        "-m",
        "eqxevo.bench.bits",
        *(["--quick"] if quick else []),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bits subprocess failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main())
