"""`eqxevo bench --only bits`: the same bits across batch sizes and device counts?

`python -m eqxevo._app.bench.bit_identity [--quick]` in a process with 4 host
devices (as `run_bits` runs it) prints one JSON record per line."""

import json
import os
import subprocess
import sys
from typing import Any

import click
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src.evaluate import evaluate
from eqxevo._src.sharding import population_mesh

from .._cli import CONTEXT
from ..config import from_dict
from ..experiment.build import build
from .milestones import MILESTONES

POPULATION = 32
DEVICES = 4


def _workloads(quick: bool) -> list[tuple[str, int, dict[str, Any]]]:
    """(milestone, lifetime, env params overrides) to check."""
    if quick:
        # Short lifetimes with an episode every 20 steps: the reset path runs.
        return [(name, 200, {"episode_length": 20}) for name in MILESTONES]
    out = []
    for name, table in MILESTONES.items():
        for lifetime in (table["run"]["lifetime"], 100_000):
            out.append((name, lifetime, {}))
    return out


def _compare(name: str, lifetime: int, params: dict[str, Any]) -> list[dict]:
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
        # device counts this machine has (one GPU: none), else one more block size
        counts = [count for count in (2, DEVICES) if count <= jax.device_count()]
        variants = {
            f"batch_size={size}": run(batch_size=size)
            for size in ((16,) if counts else (16, 8))
        }
        for count in counts:
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
            # relative to the largest reference fitness (0 when bit-identical)
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
                    "device": jax.devices()[0].device_kind,
                }
            )
    return records


@click.command("bits", context_settings=CONTEXT)
@click.option("--quick", is_flag=True, help="Short lifetimes with frequent resets.")
def main(quick: bool) -> None:
    """Print one JSON record per milestone, episode mode and variant."""
    for name, lifetime, params in _workloads(quick):
        for record in _compare(name, lifetime, params):
            print(json.dumps(record), flush=True)


def run_bits(quick: bool) -> list[dict[str, Any]]:
    """Run this module in a fresh process with 4 host devices; its records."""
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "")
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}"
    command = [
        sys.executable,
        "-m",
        "eqxevo._app.bench.bit_identity",
        *(["--quick"] if quick else []),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"bits subprocess failed:\n{done.stderr[-4000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


if __name__ == "__main__":
    main(prog_name="python -m eqxevo._app.bench.bit_identity")
