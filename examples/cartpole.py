"""Solve gymnax CartPole-v1 with a preset strategy and an MLP, over several seeds.

    python examples/cartpole.py                  # the run in docs/environments.md

Settings are those of tests/test_envs_gymnax.py (one seed there): an
`MLPPolicy(4, 2, width=16, depth=1)` whose two outputs are argmaxed into
CartPole's two actions; fitness is the mean return of `--episodes` episodes of
at most 500 steps (`rollout(..., reset_on_done=False)`); `--seeds`
independent runs of `--strategy` share one program (`evolve(num_seeds=K)`).
Each run's final distribution mean is then scored on 16 evaluation episodes;
CartPole-v1 counts as solved at a mean return >= 475.
"""

import argparse
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

import eqxevo
from eqxevo import rollout
from eqxevo.envs import GymnaxEnv
from eqxevo.nets import MLPPolicy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="snes")
    parser.add_argument("--population", type=int, default=32)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=8)
    args = parser.parse_args()

    env = GymnaxEnv("CartPole-v1")
    params = env.default_params()

    def episode_return(policy, key):
        return rollout(key, policy, env, params, 500, reset_on_done=False)[0]

    def fitness(policy, key):
        keys = jr.split(key, args.episodes)
        return jnp.mean(jax.vmap(lambda k: episode_return(policy, k))(keys))

    policy = MLPPolicy(4, 2, 16, 1, key=jr.key(0))
    strategy = eqxevo.Strategy(args.strategy, policy, args.population, maximize=True)
    start = time.perf_counter()
    result = eqxevo.evolve(
        jr.key(1),
        strategy,
        fitness,
        num_generations=args.generations,
        chunk_size=args.generations,
        num_seeds=args.seeds,
    )
    evolve_time = time.perf_counter() - start
    solutions = eqx.filter_vmap(strategy.mean)(result.state)
    eval_keys = jr.split(jr.key(2), 16)
    returns = eqx.filter_jit(
        eqx.filter_vmap(lambda p: jax.vmap(lambda k: episode_return(p, k))(eval_keys))
    )(solutions)
    means = np.asarray(jnp.mean(returns, axis=1))
    print(
        f"{strategy.name}, P={args.population}, {args.generations} generations, "
        f"{args.episodes} episodes per genome, {args.seeds} seeds "
        f"({strategy.num_params} parameters)"
    )
    print("mean return over 16 evaluation episodes, per seed:", np.round(means, 1))
    print(
        f"solved (>= 475): {int(np.sum(means >= 475))}/{args.seeds}; "
        f"evolve wall time {evolve_time:.1f} s "
        f"({args.seeds * args.population * args.generations * args.episodes} episodes)"
    )


if __name__ == "__main__":
    main()
