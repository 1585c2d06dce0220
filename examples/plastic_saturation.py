"""How many plastic weights sit at their bound during a long L4 lifetime?

Runs the L4 example's plastic network (examples/l4_long_horizon.toml) for one
lifetime of `--steps` steps, for the initial genome and genomes drawn around it
(SNES's first population), under a reward-modulation setting, and prints the
fraction of plastic weights at the +-2 bound (time-averaged over the lifetime,
and at its end) and the mean |m|. With `--runs`, the best genomes
of finished runs instead (a study's plastic arm, say), each in its own run's
environment. docs/studies.md has the tables.

    python examples/plastic_saturation.py --steps 100000
    python examples/plastic_saturation.py --steps 100000 --old   # m = raw reward
    python examples/plastic_saturation.py --runs studies/l4-plasticity/runs/plastic/*
"""

import argparse
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from eqxevo import experiment
from eqxevo.experiment import load_genome


def lifetime(policy, env, params, key, steps, every=100):
    """Run one lifetime; sample the weights every `every` steps."""
    lo, hi = policy.rule.weight_bounds
    mask = policy.layout.native_mask()
    reset_key, policy_key, run_key = jr.split(key, 3)
    obs, env_state = env.reset(reset_key, params)
    state = policy.initial_state(policy_key)

    def at_bound(state):
        w = state.plastic.weights
        hit = ((w <= lo) | (w >= hi)) & mask
        return hit.sum() / mask.sum()

    def step(carry, t):
        obs, env_state, state = carry
        action, state = policy(obs, state)
        obs, env_state, reward, _, info = env.step(
            jr.fold_in(run_key, t), env_state, action, params
        )
        state = policy.reinforce(reward, state)
        del info
        return (obs, env_state, state), jnp.abs(state.plastic.modulation)

    def block(carry, t0):
        carry, m = jax.lax.scan(step, carry, t0 + jnp.arange(every))
        return carry, (at_bound(carry[2]), m.mean())

    carry = (obs, env_state, state)
    carry, (fraction, m) = jax.lax.scan(block, carry, jnp.arange(0, steps, every))
    return fraction.mean(), fraction[-1], m.mean()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--genomes", type=int, default=8)
    parser.add_argument(
        "--old",
        action="store_true",
        help="m = raw reward (baseline_decay=None, reward_bound=None): the rule "
        "before the fix",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--runs", nargs="+", default=[], metavar="RUN_DIR", help="finished runs"
    )
    args = parser.parse_args()
    if args.runs:
        loaded = [load_genome(path) for path in args.runs]
        built = loaded[0][0]
        # every array leaf batched: each seed has its own topology too
        genomes = jax.tree.map(
            lambda *g: jnp.stack(g) if eqx.is_array(g[0]) else g[0],
            *(genome for _, genome in loaded),
        )
        report(built, genomes, args.runs, args.steps, eqx.is_array)
        return
    exp = experiment.load("examples/l4_long_horizon.toml", args.set)
    if args.old:
        options = dict(exp.net.options)
        options["plasticity"] = {
            **options["plasticity"],
            "baseline_decay": None,
            "reward_bound": None,
        }
        exp = dataclasses.replace(
            exp, net=dataclasses.replace(exp.net, options=options)
        )
    built = experiment.build(exp)
    strategy = built.strategy
    population, _ = strategy.ask(jr.key(1), strategy.init(jr.key(0)))
    genomes = jax.tree.map(
        lambda p, g: (
            jnp.concatenate([g[None], p[: args.genomes - 1]])
            if eqx.is_inexact_array(g)
            else g
        ),
        population,
        built.genome,
    )
    names = ["initial"] + [f"sample {i}" for i in range(1, args.genomes)]
    report(built, genomes, names, args.steps, eqx.is_inexact_array)


def report(built, genomes, names, steps, batched) -> None:
    """Run each genome's lifetime (vmapped over the `batched` leaves) and print
    one row per genome."""
    evolvable, static = eqx.partition(genomes, batched)
    run = eqx.filter_jit(
        jax.vmap(
            lambda g, k: lifetime(
                eqx.combine(g, static), built.env, built.env_params, k, steps
            )
        )
    )
    keys = jr.split(jr.key(2), len(names))
    fraction, final, m = jax.device_get(run(evolvable, keys))
    eta = jax.device_get(genomes.rule.learning_rate)
    print("  genome      eta  at bound (mean over lifetime)  at bound (end)  mean |m|")
    for i, name in enumerate(names):
        print(
            f"{name:>8}  {eta[i]:+7.3f}  {fraction[i]:30.2f}  {final[i]:14.2f}  "
            f"{m[i]:8.3f}"
        )


if __name__ == "__main__":
    main()
