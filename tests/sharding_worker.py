"""Runs eqxevo's scale scenarios in a fresh process and saves the results.

`tests/test_sharding.py` launches this script with N host devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=N`), or as one of several
processes joined by `jax.distributed`, and compares what it saves with the same
scenarios run in the test process on one device without a mesh:

    python tests/sharding_worker.py OUT.npz
    python tests/sharding_worker.py OUT.npz --coordinator localhost:PORT \\
        --num-processes 2 --process-id I

Every scenario takes the mesh (None for the single-device reference) and returns
a pytree of arrays. Only process 0 writes OUT.npz.
"""

import argparse
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from helpers import Net, noisy_sphere

# The same checks as the test suite (conftest): beartype on every eqxevo function,
# strict dtype promotion. The hook stays installed: eqxevo loads some modules on
# first use. Importing eqxevo must not start JAX (initialize_distributed below).
from jaxtyping import install_import_hook

install_import_hook("eqxevo", "beartype.beartype")
import eqxevo  # noqa: E402
from eqxevo.evaluate import evaluate  # noqa: E402

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


def multi_fidelity() -> eqxevo.MultiFidelity:
    return eqxevo.MultiFidelity(
        lambda g, k: lifetime(g, k, 5),
        lambda g, k: lifetime(g, k, 20),
        num_promoted=4,
        proxy_steps=5,
        full_steps=20,
    )


def run(strategy, fitness_fn, mesh, **kwargs) -> Any:
    result = eqxevo.evolve(strategy, fitness_fn, jr.key(7), mesh=mesh, **kwargs)
    return {"state": result.state, "history": result.history}


SCENARIOS: dict[str, Callable[[Any], Any]] = {
    "evolve_seeds": lambda mesh: run(
        eqxevo.Strategy("simple_ga", Net(key=jr.key(0)), POPULATION),
        noisy_sphere,
        mesh,
        num_generations=3,
        num_seeds=2,
    ),
    "multi_fidelity_batched": lambda mesh: run(
        eqxevo.Strategy("snes", mlp(), POPULATION, maximize=True),
        multi_fidelity(),
        mesh,
        num_generations=3,
        batch_size=3,
    ),
    "evaluate": lambda mesh: evaluate(
        lambda g, k: lifetime(g, k, 20),
        eqxevo.Strategy("snes", mlp(), POPULATION).ask(
            jr.key(1), eqxevo.Strategy("snes", mlp(), POPULATION).init(jr.key(2))
        )[0],
        jr.key(3),
        mesh=mesh,
    ),
}


def flatten(tree: Any) -> list[np.ndarray]:
    """Leaves as NumPy arrays (typed keys as their raw data)."""
    out = []
    for leaf in jax.tree.leaves(tree):
        if jax.dtypes.issubdtype(jnp.asarray(leaf).dtype, jax.dtypes.prng_key):
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
        mesh = eqxevo.initialize_distributed(
            args.coordinator, args.num_processes, args.process_id
        )
    else:
        mesh = eqxevo.population_mesh()
    jax.config.update("jax_numpy_dtype_promotion", "strict")

    arrays: dict[str, np.ndarray] = {}
    for name, scenario in SCENARIOS.items():
        for i, leaf in enumerate(flatten(scenario(mesh))):
            arrays[f"{name}/{i}"] = leaf

    # A population that does not split evenly is refused with a clear error.
    try:
        run(
            eqxevo.Strategy("snes", Net(key=jr.key(0)), 2 * mesh.size + 1),
            noisy_sphere,
            mesh,
            num_generations=1,
        )
        message = "no error"
    except ValueError as err:
        message = str(err)
    arrays["indivisible_error"] = np.asarray(message)
    arrays["num_devices"] = np.asarray(mesh.size)
    arrays["num_processes"] = np.asarray(jax.process_count())

    if jax.process_index() == 0:
        np.savez(args.out, **arrays)  # pyright: ignore[reportArgumentType]
    if args.coordinator is not None:
        jax.distributed.shutdown()


if __name__ == "__main__":
    sys.exit(main())
