"""CartPole: eqxevo against evosax's GymnaxProblem and EvoJAX's SimManager.

The sides and what they share: docs/performance.md, "How the harness measures".
"""

import contextlib
import functools
import logging
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.random as jr

from eqxevo._src.sharding import population_mesh

from ..config import from_dict
from ..experiment.build import build
from .common import SIDE_COLUMNS, compare_sides, evosax_loop, time_call
from .milestones import time_evolve

HIDDEN = 32

CARTPOLE_COLUMNS = ["side", *SIDE_COLUMNS]
"""The columns of the CartPole table (`cartpole_comparison`'s records)."""


def eqxevo_cartpole(
    population_size: int,
    num_steps: int,
    *,
    num_generations: int,
    repeats: int,
    sharded: bool = True,
) -> dict[str, Any]:
    experiment = from_dict(
        {
            "env": {"name": "gymnax:CartPole-v1"},
            "net": {"name": "mlp", "options": {"width": HIDDEN, "depth": 2}},
            "strategy": {"name": "snes", "population_size": population_size},
            # one episode per lifetime, as GymnaxProblem and EvoJAX evaluate
            "run": {"lifetime": num_steps, "reset_on_done": False},
        }
    )
    built = build(experiment)
    mesh, devices = None, 1
    if sharded and jax.device_count() > 1 and population_size % jax.device_count() == 0:
        mesh, devices = population_mesh(), jax.device_count()
    timing = time_evolve(
        built, num_generations=num_generations, repeats=repeats, mesh=mesh
    )
    return {
        "side": "eqxevo" if sharded else "eqxevo, one device",
        "devices": devices,
        **timing,
        "agent_steps_per_s": population_size * num_steps / timing["generation_s"],
    }


def evosax_cartpole(
    population_size: int, num_steps: int, *, num_generations: int, repeats: int
) -> dict[str, Any]:
    from evosax.algorithms import SNES
    from evosax.problems import GymnaxProblem
    from evosax.problems.networks import MLP, categorical_output_fn

    policy = MLP(layer_sizes=(HIDDEN, HIDDEN, 2), output_fn=categorical_output_fn)
    problem = GymnaxProblem("CartPole-v1", policy, episode_length=num_steps)
    key = jr.key(0)
    solution = problem.sample(key)
    strategy = SNES(population_size=population_size, solution=solution)
    generations = evosax_loop(strategy, problem, key, solution)
    first, wall, _ = time_call(lambda: generations(num_generations), repeats)
    generation_s = wall / num_generations
    return {
        "side": "evosax GymnaxProblem",
        "devices": 1,
        "compile_s": max(first - wall, 0.0),
        "generation_s": generation_s,
        "agent_steps_per_s": population_size * num_steps / generation_s,
    }


@contextlib.contextmanager
def _jax_tree_map_alias() -> Iterator[None]:
    """Lend EvoJAX `jax.tree_map` while its calls run.

    EvoJAX 0.2.17 merges its per-device results with `jax.tree_map`, which JAX
    0.10 removed. The alias exists only inside this block (and `eqxevo bench`
    runs the CartPole comparison in a child process of its own).
    """
    if hasattr(jax, "tree_map"):
        yield
        return
    jax.tree_map = jax.tree.map  # pyright: ignore[reportAttributeAccessIssue]
    try:
        yield
    finally:
        del jax.tree_map  # pyright: ignore[reportAttributeAccessIssue]


def evojax_cartpole(
    population_size: int, num_steps: int, *, num_generations: int, repeats: int
) -> dict[str, Any]:
    from evojax.algo import PGPE
    from evojax.policy.mlp import MLPPolicy
    from evojax.sim_mgr import SimManager
    from evojax.task.cartpole import CartPoleSwingUp

    quiet = logging.getLogger("evojax-bench")
    quiet.setLevel(logging.ERROR)
    train = CartPoleSwingUp(max_steps=num_steps, harder=False, test=False)
    valid = CartPoleSwingUp(max_steps=num_steps, harder=False, test=True)
    policy = MLPPolicy(
        input_dim=train.obs_shape[0],
        hidden_dims=[HIDDEN, HIDDEN],
        output_dim=train.act_shape[0],
        logger=quiet,
    )
    solver = PGPE(
        pop_size=population_size, param_size=policy.num_params, seed=0, logger=quiet
    )
    sim = SimManager(
        n_repeats=1,
        test_n_repeats=1,
        pop_size=population_size,
        n_evaluations=1,
        policy_net=policy,
        train_vec_task=train,
        valid_vec_task=valid,
        seed=0,
        logger=quiet,
    )

    def generations(count: int) -> Any:
        scores = None
        with _jax_tree_map_alias():
            for _ in range(count):
                params = solver.ask()
                scores, _ = sim.eval_params(params=params, test=False)
                solver.tell(fitness=scores)
        return scores

    start = time.perf_counter()
    jax.block_until_ready(generations(3))
    first = time.perf_counter() - start
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(generations(num_generations))
        walls.append((time.perf_counter() - start) / num_generations)
    generation_s = sorted(walls)[len(walls) // 2]
    return {
        "side": "EvoJAX SimManager",
        "devices": jax.local_device_count(),
        "compile_s": max(first - 3 * generation_s, 0.0),
        "generation_s": generation_s,
        "agent_steps_per_s": population_size * num_steps / generation_s,
    }


def cartpole_comparison(
    *, quick: bool = False, repeats: int = 3
) -> list[dict[str, Any]]:
    """All three sides; each record gets `eqxevo_over_side` (eqxevo's speed-up)."""
    population_size, num_steps = (32, 100) if quick else (256, 500)
    generations = 2 if quick else 3
    sides = (
        ("eqxevo", eqxevo_cartpole),
        ("evosax GymnaxProblem", evosax_cartpole),
        ("EvoJAX SimManager", evojax_cartpole),
    )
    rows = compare_sides(
        [
            (
                side,
                functools.partial(
                    fn,
                    population_size,
                    num_steps,
                    num_generations=generations,
                    repeats=repeats,
                ),
            )
            for side, fn in sides
        ]
    )
    for row in rows:
        row["population_size"], row["lifetime"] = population_size, num_steps
    if jax.device_count() > 1:
        # the one-device figure too: evosax's problem cannot use more
        one = eqxevo_cartpole(
            population_size,
            num_steps,
            num_generations=generations,
            repeats=repeats,
            sharded=False,
        )
        one["population_size"], one["lifetime"] = population_size, num_steps
        rows.insert(1, one)
    ours = rows[0].get("agent_steps_per_s")
    for row in rows:
        if ours and row.get("agent_steps_per_s"):
            row["eqxevo_over_side"] = ours / row["agent_steps_per_s"]
    return rows


__all__ = [
    "CARTPOLE_COLUMNS",
    "cartpole_comparison",
    "eqxevo_cartpole",
    "evojax_cartpole",
    "evosax_cartpole",
]
