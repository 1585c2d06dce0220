"""Runs eqxevo's scale scenarios in a fresh process and saves the results.

`tests/test_sharding.py` launches this script with N host devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=N`), or as one of several
processes joined by `jax.distributed`, and compares what it saves with the same
scenarios run in the test process on one device without a mesh:

    python tests/sharding_worker.py OUT.npz
    python tests/sharding_worker.py OUT.npz --coordinator localhost:PORT \\
        --num-processes 2 --process-id I

Every scenario takes the mesh (None for the single-device reference) and returns
a pytree of arrays. One process runs them all on a mesh over all its devices and
on one over its first two; processes joined by `jax.distributed` run
`DISTRIBUTED` on the global mesh. Results are saved under
`"{mesh size}/{scenario}/{leaf}"`; only process 0 writes OUT.npz.
"""

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from helpers import Net, Rosenbrock, noisy_sphere, transcendental

# The same checks as the test suite (conftest): beartype on every eqxevo function,
# strict dtype promotion. The hook stays installed: eqxevo loads some modules on
# first use. Importing eqxevo must not start JAX (initialize_distributed below).
from jaxtyping import install_import_hook

install_import_hook("eqxevo", "beartype.beartype")
import eqxevo  # noqa: E402
from eqxevo import evaluate  # noqa: E402

POPULATION = 8  # divisible by 1, 2 and 4 devices


def lifetime(genome: eqx.nn.MLP, key: jax.Array, steps: int) -> Any:
    """A tiny L0-like lifetime: an MLP steers a noisy point towards the origin."""

    def step(carry, step_key):
        position, total = carry
        action = genome(jnp.concatenate([position, jnp.sin(position)]))
        position = position + 0.1 * action + 0.01 * jr.normal(step_key, (2,))
        return (position, total - jnp.sum(position**2)), None

    start = jnp.ones(2)
    (position, total), _ = jax.lax.scan(
        step, (start, jnp.zeros(())), jr.split(key, steps)
    )
    return total / steps, {"distance": jnp.sqrt(jnp.sum(position**2))}


def mlp() -> eqx.nn.MLP:
    return eqx.nn.MLP(4, 2, 8, 1, activation=jnp.tanh, key=jr.key(0))


def multi_fidelity(num_promoted: int = 4) -> eqxevo.MultiFidelity:
    return eqxevo.MultiFidelity(
        lambda g, k: lifetime(g, k, 3),
        lambda g, k: lifetime(g, k, 8),
        num_promoted=num_promoted,
        proxy_steps=3,
        full_steps=8,
    )


def evolve(mesh: Any) -> Any:
    """Sep_CMA_ES with multi-fidelity, two seeds, micro-batches of 3 (the last one
    padded)."""
    strategy = eqxevo.Strategy("Sep_CMA_ES", mlp(), POPULATION, maximize=True)
    result = eqxevo.evolve(
        jr.key(7),
        strategy,
        multi_fidelity(),
        num_generations=3,
        num_seeds=2,
        batch_size=3,
        mesh=mesh,
    )
    return {"state": result.state, "history": result.history}


def evaluate_once(mesh: Any) -> Any:
    """A standalone evaluate (its own shard_map), with per-step noise and aux."""
    strategy = eqxevo.Strategy("snes", mlp(), POPULATION)
    population, _ = strategy.ask(jr.key(1), strategy.init(jr.key(2)))
    return evaluate(jr.key(3), lambda g, k: lifetime(g, k, 8), population, mesh=mesh)


# Every built-in environment and every built-in network (`names.ENVS`,
# `names.NETS`; a test checks both) in six pairs, each environment once and each
# network at least once (sparse_rate twice: plain, and plastic on the reversal
# bandit), small, episodes ending every 10 steps (resets run transcendentals the
# other steps do not). Each pair compiles its own program per mesh, so there are
# as few pairs as there are environments.
BUILTINS = {
    "L0-sparse_rate": ("chemotaxis", "sparse_rate", {"num_neurons": 32, "fan_in": 8}),
    "L2-sparse_lif": ("foraging", "sparse_lif", {"num_neurons": 32, "fan_in": 8}),
    "L4-gru": ("long_horizon", "gru", {"hidden_size": 8}),
    "bandit-mlp": ("bandit", "mlp", {}),
    "reversal_bandit-plastic": (
        "reversal_bandit",
        "sparse_rate",
        {
            "num_neurons": 32,
            "fan_in": 8,
            "plasticity": {"learning_rate": 0.01, "trace_decay": 0.9},
        },
    ),
    "cue_reward-recurrent": ("cue_reward", "recurrent", {}),
}


def builtin(name: str, mesh: Any) -> Any:
    """Two generations of evolve (fitness, selection, state) on one workload;
    per-genome episodes on L0-sparse_rate, shared on the others."""
    from eqxevo._app.config import from_dict
    from eqxevo.experiment import build

    env, net, options = BUILTINS[name]
    built = build(
        from_dict(
            {
                "env": {"name": env, "params": {"episode_length": 10}},
                "net": {"name": net, "options": options},
                "strategy": {"name": "snes", "population_size": POPULATION},
                "run": {"lifetime": 30},
            }
        )
    )
    result = eqxevo.evolve(
        jr.key(4),
        built.strategy,
        built.fitness,
        num_generations=2,
        mesh=mesh,
        episodes="per_genome" if name == "L0-sparse_rate" else "shared",
    )
    return {"state": result.state, "history": result.history}


def strangers(mesh: Any) -> Any:
    """CMA_ES on a genome with an int leaf and a transcendental, noisy fitness
    with aux, as two stacked runs (each its own std_init and key)."""
    strategies = [
        eqxevo.Strategy(
            "CMA_ES", Rosenbrock(5), POPULATION, maximize=True, params={"std_init": s}
        )
        for s in (jnp.float32(0.1), jnp.float32(0.3))
    ]
    runs = eqxevo.evolve(
        jr.split(jr.key(5), 2),
        eqxevo.stack_runs(strategies),
        eqxevo.stack_runs([transcendental, transcendental]),
        num_generations=3,
        runs=2,
        mesh=mesh,
    )
    return {"state": runs.state, "history": runs.history}


def physics(mesh: Any) -> Any:
    """A Brax environment (spring inverted_pendulum: falls end episodes) with
    observation normalisation on, CMA_ES over an MLP, micro-batches of 2."""
    from eqxevo import LifetimeFitness
    from eqxevo._src.nets.factories import mlp as mlp_policy
    from eqxevo.envs import BraxEnv

    env = BraxEnv("inverted_pendulum", backend="spring", episode_length=20)
    genome = mlp_policy(env.obs_size, env.action_size, 8, 1, key=jr.key(0))
    fitness = LifetimeFitness(env, env.default_params(), 30, normalize_obs=True)
    result = eqxevo.evolve(
        jr.key(6),
        eqxevo.Strategy("CMA_ES", genome, POPULATION),
        fitness,
        num_generations=2,
        batch_size=2,
        mesh=mesh,
    )
    return {"state": result.state, "history": result.history}


def qd_lifetime(genome: eqx.nn.MLP, key: jax.Array) -> Any:
    """`lifetime` with the final position's direction as a descriptor."""
    fitness, aux = lifetime(genome, key, 8)
    return fitness, {"descriptor": jnp.tanh(jnp.stack([fitness, aux["distance"]]))}


def map_elites(mesh: Any) -> Any:
    """MAP-Elites (iso+line) on a grid, micro-batches of 3: the archive's bits
    at any device count (ask and tell run whole on every device, as a
    `Strategy`'s do; tests/test_qd_evolve.py has the ES emitters)."""
    from eqxevo.qd import Archive, IsoLineEmitter, MapElites

    strategy = MapElites(
        mlp(), Archive.grid((4, 4), -1.0, 1.0), IsoLineEmitter(POPULATION)
    )
    result = eqxevo.evolve(
        jr.key(8), strategy, qd_lifetime, num_generations=3, batch_size=3, mesh=mesh
    )
    return {"state": result.state, "history": result.history}


# Each program compiles per mesh, and compilation is what these runs cost: every
# algorithm, batching (seeds, runs, micro-batches), fitness kind and genome kind
# appears once, folded into few scenarios (SNES in the built-ins, Sep_CMA_ES in
# `evolve`, CMA_ES in `strangers`).
SCENARIOS: dict[str, Callable[[Any], Any]] = {
    "evolve": evolve,
    "evaluate": evaluate_once,
    **{f"builtin/{name}": functools.partial(builtin, name) for name in BUILTINS},
    "strangers": strangers,
    "physics": physics,
    "map_elites": map_elites,
}

# What processes joined by `jax.distributed` run. Their mesh of 4 devices gives
# each device the same block of the population, so the same per-device program,
# as one process with 4 devices, which runs every scenario; what is new is the
# traffic between processes: states and keys replicated from each process's copy,
# populations split across processes (`evaluate`), fitness gathered back, results
# read on every process. These scenarios move all of it between them (one
# built-in, the one with per-genome episodes, stands for the five).
DISTRIBUTED = ("evolve", "evaluate", "builtin/L0-sparse_rate", "strangers")


def errors(mesh: Any) -> list[str]:
    """The messages for a population and a k that do not split over the mesh."""
    messages = []
    for fitness_fn, size in (
        (noisy_sphere, 2 * mesh.size + 1),
        (multi_fidelity(num_promoted=mesh.size + 1), 4 * mesh.size),
    ):
        strategy = eqxevo.Strategy("snes", Net(key=jr.key(0)), size)
        try:
            eqxevo.evolve(jr.key(0), strategy, fitness_fn, num_generations=1, mesh=mesh)
            messages.append("no error")
        except ValueError as err:
            messages.append(str(err))
    return messages


def flatten(tree: Any) -> list[np.ndarray]:
    """Leaves as NumPy arrays (typed keys as their raw data)."""
    out = []
    for leaf in jax.tree.leaves(tree):
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jax.dtypes.prng_key):
            leaf = jr.key_data(leaf)
        out.append(np.asarray(jax.device_get(leaf)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--coordinator")
    parser.add_argument("--num-processes", type=int)
    parser.add_argument("--process-id", type=int)
    args = parser.parse_args()

    if args.coordinator is not None:
        meshes = [
            eqxevo.initialize_distributed(
                args.coordinator, args.num_processes, args.process_id
            )
        ]
        names = DISTRIBUTED
    else:
        # every scenario on every device; the scenarios of `DISTRIBUTED` also on
        # the first two devices (a 2-device run: blocks of another size)
        meshes = [eqxevo.population_mesh(), eqxevo.population_mesh(jax.devices()[:2])]
        names = tuple(SCENARIOS)
    jax.config.update("jax_numpy_dtype_promotion", "strict")

    arrays: dict[str, np.ndarray] = {}
    for mesh in meshes:
        ran = names if mesh.size == jax.device_count() else DISTRIBUTED
        for name in ran:
            for i, leaf in enumerate(flatten(SCENARIOS[name](mesh))):
                arrays[f"{mesh.size}/{name}/{i}"] = leaf
        arrays[f"{mesh.size}/errors"] = np.asarray(errors(mesh))
    arrays["num_processes"] = np.asarray(jax.process_count())

    if jax.process_index() == 0:
        np.savez(args.out, **arrays)  # pyright: ignore[reportArgumentType]
    if args.coordinator is not None:
        jax.distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main())
