"""Evolve an MLP chemotaxis agent on L0 and compare it with the Braitenberg baseline.

    python examples/l0_vs_braitenberg.py            # the run in docs/environments.md

An `MLPPolicy` (2 log-concentration inputs, one hidden layer, 2 motor commands)
is evolved with a preset strategy; its fitness is the mean reward per step over
`--episodes` lifetimes of T = 1000 steps (each genome, each generation, fresh
lifetimes). `--seeds` independent runs share one compiled program
(`evolve(num_seeds=K)`). Every run's final search distribution mean
(`strategy.mean`) and its best-so-far genome are then scored on `--eval-seeds`
held-out lifetimes (key 1, the lifetimes `examples/baselines.py` scores the
baselines on), next to the tuned Braitenberg vehicle (`BraitenbergAgent()`'s
defaults). Pictures of both agents in one lifetime go to `--out`.
"""

import argparse
import pathlib
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxevo
from eqxevo import rollout
from eqxevo.agents import BraitenbergAgent
from eqxevo.envs import Chemotaxis
from eqxevo.experiment import render_policy
from eqxevo.nets import MLPPolicy

NUM_STEPS = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="cma_es")
    parser.add_argument("--population", type=int, default=64)
    parser.add_argument("--generations", type=int, default=60)
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--eval-seeds", type=int, default=256)
    parser.add_argument("--out", default="runs/l0_vs_braitenberg")
    args = parser.parse_args()

    env = Chemotaxis()
    params = env.default_params()

    def fitness(genome, key):
        keys = jr.split(key, args.episodes)
        total, summary = jax.vmap(lambda k: rollout(k, genome, env, params, NUM_STEPS))(
            keys
        )
        return jnp.mean(total) / NUM_STEPS, {
            "mean_distance": jnp.mean(summary["mean_distance"])
        }

    genome = MLPPolicy(2, 2, width=args.width, depth=1, key=jr.key(0))
    strategy = eqxevo.Strategy(args.strategy, genome, args.population, maximize=True)
    print(
        f"evolving MLPPolicy(2, 2, width={args.width}, depth=1) "
        f"({strategy.num_params} parameters) with {strategy.name}, "
        f"P={args.population}, T={NUM_STEPS}, {args.episodes} lifetimes per genome, "
        f"{args.generations} generations, {args.seeds} seeds",
        flush=True,
    )
    start = time.perf_counter()

    def progress(chunk):
        history = chunk.history
        g = int(history["generation"][0, -1])
        best = np.array2string(history["best"][:, -1], precision=3)
        mean = np.array2string(history["mean"][:, -1], precision=3)
        elapsed = time.perf_counter() - start
        print(f"generation {g + 1:4d}  best {best}  mean {mean}  {elapsed:6.1f} s")

    result = eqxevo.evolve(
        jr.key(2024),
        strategy,
        fitness,
        num_generations=args.generations,
        chunk_size=10,
        num_seeds=args.seeds,
        callback=progress,
    )
    evolve_time = time.perf_counter() - start

    eval_keys = jr.split(jr.key(1), args.eval_seeds)

    @eqx.filter_jit
    def score(agent):
        total, _ = jax.vmap(lambda k: rollout(k, agent, env, params, NUM_STEPS))(
            eval_keys
        )
        return total / NUM_STEPS

    def describe(values):
        return f"{float(np.mean(values)):.3f} +- {float(np.std(values)):.3f}"

    braitenberg = BraitenbergAgent()
    baseline = score(braitenberg)
    print(f"\nheld-out lifetimes: {args.eval_seeds} (key 1); mean reward per step")
    print(
        f"Braitenberg (gain {float(braitenberg.gain):g}, "
        f"base {float(braitenberg.base_speed):g}): {describe(baseline)}"
    )
    means = []
    for k in range(args.seeds):
        state_k = jax.tree.map(lambda x, k=k: x[k], result.state)
        best_k = jax.tree.map(
            lambda x, k=k: x[k] if eqx.is_array(x) else x, result.best_genome
        )
        mean_genome = strategy.mean(state_k)
        mean_score, best_score = score(mean_genome), score(best_k)
        means.append(float(np.mean(mean_score)))
        wins = float(np.mean(np.asarray(mean_score) > np.asarray(baseline)))
        print(
            f"seed {k}: distribution mean {describe(mean_score)} (beats Braitenberg "
            f"on {100 * wins:.0f}% of lifetimes); best-so-far {describe(best_score)}"
        )
        if k == 0:
            champion = mean_genome
    total_time = time.perf_counter() - start
    print(f"evolve wall time {evolve_time:.1f} s; total {total_time:.1f} s")
    print(
        f"evolved (mean over seeds) {np.mean(means):.3f} vs Braitenberg "
        f"{float(np.mean(baseline)):.3f}: "
        + ("evolved wins" if min(means) > float(np.mean(baseline)) else "NOT beaten")
    )

    out = pathlib.Path(args.out)
    key = eval_keys[0]
    for name, agent in (("evolved", champion), ("braitenberg", braitenberg)):
        path = render_policy(key, agent, env, params, NUM_STEPS, out / f"l0_{name}.png")
        print(f"picture: {path}")


if __name__ == "__main__":
    main()
