"""Baseline fitness of the reference agents on L0, L2 and L4.

    python examples/baselines.py                 # the figures in docs/environments.md
    python examples/baselines.py --seeds 64      # quicker

For each environment (default params): the random agent, and the hand-coded
agent (Braitenberg on L0, the homeostatic forager on L2) with its two
parameters (gain, base speed) tuned on a grid over `--tune-seeds` lifetimes
(key 0). On L4 the oracle told the season has its gain and base speed tuned
likewise; with them, the taste learner has its learning rate and jump tuned,
and the reactive taste reflex its taste gain and stay; they are compared with
the same steering without learning (a fixed reflex for resource A). Every agent is then
scored on `--seeds` other lifetimes (key 1; `--l4-seeds` on L4): mean +- std
over lifetimes of the fitness (total reward) and of the mean reward per step.
The tuned parameters are the agents' defaults.
"""

import argparse
import itertools
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo import rollout
from eqxevo.agents import (
    BraitenbergAgent,
    ForagerAgent,
    RandomAgent,
    ReactiveTasteAgent,
    SeasonOracleAgent,
    TasteLearnerAgent,
)
from eqxevo.envs import Chemotaxis, Foraging, LongHorizon, privileged


@eqx.filter_jit
def lifetimes(agent, env, params, key, num_steps, num_seeds):
    """Fitness and summary of `num_seeds` lifetimes, keys split from `key`."""
    keys = jr.split(key, num_seeds)
    return jax.vmap(lambda k: rollout(k, agent, env, params, num_steps))(keys)


@eqx.filter_jit
def grid_scores(make, gains, speeds, env, params, key, num_steps, num_seeds):
    agents = jax.vmap(make)(gains, speeds)
    evolvable, static = eqx.partition(agents, eqx.is_array)

    def score(e):
        fitness, _ = lifetimes(
            eqx.combine(e, static), env, params, key, num_steps, num_seeds
        )
        return jnp.mean(fitness)

    return jax.lax.map(score, evolvable)


def tune(make, env, num_steps, num_seeds, gains, speeds):
    pairs = list(itertools.product(gains, speeds))
    g = jnp.asarray([p[0] for p in pairs], jnp.float32)
    s = jnp.asarray([p[1] for p in pairs], jnp.float32)
    scores = grid_scores(
        make, g, s, env, env.default_params(), jr.key(0), num_steps, num_seeds
    )
    best = int(jnp.argmax(scores))
    return pairs[best], float(scores[best]) / num_steps


def report(name, env_name, agent, env, num_steps, num_seeds, first_death=False):
    start = time.perf_counter()
    fitness, summary = lifetimes(
        agent, env, env.default_params(), jr.key(1), num_steps, num_seeds
    )
    per_step = summary["mean_reward"]
    extra = ""
    if first_death:  # L2: a death ends the episode (steps_alive is survival time)
        extra += f" | {float(jnp.mean(summary['steps_alive'])):.0f}"
    if "mean_died" in summary:
        extra += f" | {float(jnp.mean(summary['mean_died'])) * num_steps:.2f}"
    print(
        f"| {env_name} | {name} | {float(jnp.mean(fitness)):.1f} +- "
        f"{float(jnp.std(fitness)):.1f} | {float(jnp.mean(per_step)):.3f} +- "
        f"{float(jnp.std(per_step)):.3f}{extra} |"
        f"  ({time.perf_counter() - start:.1f} s)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=256)
    parser.add_argument("--tune-seeds", type=int, default=64)
    parser.add_argument("--l4-seeds", type=int, default=64)
    args = parser.parse_args()

    l0, l0_steps = Chemotaxis(), 1000
    (gain, speed), score = tune(
        lambda g, s: BraitenbergAgent(2, g, s),
        l0,
        l0_steps,
        args.tune_seeds,
        gains=(2.0, 4.0, 8.0, 12.0, 16.0, 24.0),
        speeds=(0.3, 0.4, 0.5, 0.6, 0.8, 1.0),
    )
    print(f"L0 Braitenberg tuned: gain={gain}, base_speed={speed} ({score:.3f}/step)")
    l2, l2_steps = Foraging(), 5000
    (f_gain, f_speed), f_score = tune(
        lambda g, s: ForagerAgent(2, g, s),
        l2,
        l2_steps,
        args.tune_seeds,
        gains=(2.0, 4.0, 8.0, 12.0, 16.0, 24.0),
        speeds=(0.4, 0.6, 0.8, 1.0),
    )
    print(f"L2 forager tuned: gain={f_gain}, base_speed={f_speed} ({f_score:.3f}/step)")

    print(f"\nscored on {args.seeds} lifetimes (key 1)\n")
    print("| env | agent | fitness (total reward) | reward per step |")
    print("|---|---|---|---|")
    report("random", "L0, T=1000", RandomAgent(2), l0, l0_steps, args.seeds)
    report(
        f"Braitenberg (gain {gain:g}, base {speed:g})",
        "L0, T=1000",
        BraitenbergAgent(2, gain, speed),
        l0,
        l0_steps,
        args.seeds,
    )
    print("\n| env | agent | fitness | reward per step | first death at | deaths |")
    print("|---|---|---|---|---|---|")
    report("random", "L2, T=5000", RandomAgent(6), l2, l2_steps, args.seeds, True)
    report(
        f"forager (gain {f_gain:g}, base {f_speed:g})",
        "L2, T=5000",
        ForagerAgent(2, f_gain, f_speed),
        l2,
        l2_steps,
        args.seeds,
        True,
    )

    l4, l4_steps = LongHorizon(), 20_000
    told, l4_tune = privileged(l4), args.tune_seeds // 4
    (o_gain, o_speed), o_score = tune(
        lambda g, s: SeasonOracleAgent(g, s),
        told,
        l4_steps,
        l4_tune,
        gains=(4.0, 8.0, 16.0, 32.0),
        speeds=(0.3, 0.6, 1.0),
    )
    print(f"\nL4 oracle tuned: gain={o_gain}, base_speed={o_speed} ({o_score:.4f})")
    (rate, jump), l_score = tune(
        lambda r, j: TasteLearnerAgent(r, 0.0, o_gain, o_speed, l4.digestion, jump=j),
        l4,
        l4_steps,
        l4_tune,
        gains=(0.02, 0.05, 0.1, 0.2),
        speeds=(0.5, 1.0, 2.0),
    )
    print(f"L4 taste learner tuned: learning_rate={rate}, jump={jump} ({l_score:.4f})")
    (taste_gain, stay), r_score = tune(
        lambda t, s: ReactiveTasteAgent(t, s, o_gain, o_speed),
        l4,
        l4_steps,
        l4_tune,
        gains=(0.5, 1.0, 1.5, 2.0, 4.0, 20.0),
        speeds=(0.0, 0.5, 1.0),
    )
    print(f"L4 reactive tuned: taste_gain={taste_gain}, stay={stay} ({r_score:.4f})")
    print("\n| env | agent | fitness | reward per step |")
    print("|---|---|---|---|")
    l4_rows = (
        ("random", RandomAgent(l4.obs_size), l4),
        (
            "fixed reflex for A (no learning)",
            TasteLearnerAgent(0.0, 1.0, o_gain, o_speed, flip=1.0),
            l4,
        ),
        (
            f"reactive taste (gain {taste_gain:g}, stay {stay:g})",
            ReactiveTasteAgent(taste_gain, stay, o_gain, o_speed),
            l4,
        ),
        (
            f"taste learner (rate {rate:g}, jump {jump:g})",
            TasteLearnerAgent(rate, 0.0, o_gain, o_speed, l4.digestion, jump=jump),
            l4,
        ),
        ("told the season", SeasonOracleAgent(o_gain, o_speed), told),
    )
    for name, agent, env in l4_rows:
        report(name, "L4, T=20000", agent, env, l4_steps, args.l4_seeds)


if __name__ == "__main__":
    main()
