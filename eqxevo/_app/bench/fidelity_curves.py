"""Multi-fidelity on L0: test fitness per generation and per agent-step spent."""

from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo._src._types import PRNGKey
from eqxevo._src.evolve import Chunk, evolve
from eqxevo._src.fidelity import MultiFidelity
from eqxevo._src.rollout import rollout
from eqxevo._src.runs import initial_state

from ..experiment.build import build
from .milestones import milestone_experiment

FULL = {"generations": 120, "eval_every": 10, "seeds": 3, "test_episodes": 64}
QUICK = {"generations": 4, "eval_every": 2, "seeds": 2, "test_episodes": 4}
TEST_KEY = 12345
"""Held-out lifetimes: `split(key(TEST_KEY), test_episodes)`, never seen in search."""


def fidelity_curves(
    *,
    quick: bool = False,
    generations: int | None = None,
    eval_every: int | None = None,
    seeds: int | None = None,
    test_episodes: int | None = None,
    proxy_fraction: float = 0.1,
    num_promoted: int | None = None,
    key: PRNGKey | None = None,
) -> dict[str, Any]:
    """Test fitness against generations and agent-steps, full vs multi-fidelity.

    Sizes default to `QUICK` or `FULL`; `num_promoted` to a quarter of the
    population. Returns the settings, the agent-steps per generation of each
    variant and their ratio, the final test fitness per seed, and `rows`: one
    per variant, seed and evaluation point (`generation`, `agent_steps`,
    `test_fitness`, `best`: the best fitness of that generation).
    """
    sizes = QUICK if quick else FULL
    generations = generations or sizes["generations"]
    eval_every = eval_every or sizes["eval_every"]
    seeds = seeds or sizes["seeds"]
    test_episodes = test_episodes or sizes["test_episodes"]
    key = jr.key(1000) if key is None else key

    built = build(milestone_experiment("L0", quick=quick))
    env, params = built.env, built.env_params
    population_size = built.strategy.population_size
    full_steps = built.experiment.run.lifetime
    proxy_steps = max(1, round(full_steps * proxy_fraction))
    k = num_promoted or population_size // 4

    def lifetime(steps: int) -> Any:
        # reward per step: a proxy lifetime scores on the full lifetime's scale
        def mean_reward(genome: Any, genome_key: PRNGKey) -> Any:
            total, summary = rollout(genome_key, genome, env, params, steps)
            return total / steps, summary

        return mean_reward

    variants = {
        "full": lifetime(full_steps),
        "multi_fidelity": MultiFidelity(
            lifetime(proxy_steps),
            lifetime(full_steps),
            num_promoted=k,
            proxy_steps=proxy_steps,
            full_steps=full_steps,
        ),
    }
    strategy = built.strategy
    test_keys = jr.split(jr.key(TEST_KEY), test_episodes)
    full_fn = variants["full"]

    @eqx.filter_jit
    def test_fitness(states: Any) -> jax.Array:
        """Each seed's search mean, on the held-out lifetimes: `(seeds,)`."""
        means = eqx.filter_vmap(strategy.mean)(states)
        return eqx.filter_vmap(
            lambda genome: jnp.mean(
                jax.vmap(lambda k: full_fn(genome, k)[0])(test_keys)
            )
        )(means)

    start = initial_state(key, strategy, num_seeds=seeds)
    rows: list[dict[str, Any]] = []
    for name, fitness_fn in variants.items():
        curve = _Curve(name, test_fitness, population_size * full_steps, rows)
        # generation 0: the starting mean, before any generation has a best
        curve.record(0, start, np.full(seeds, np.nan))
        evolve(
            key,
            strategy,
            fitness_fn,
            num_generations=generations,
            chunk_size=eval_every,
            num_seeds=seeds,
            callback=curve,
        )
    per_generation = {
        "full": population_size * full_steps,
        "multi_fidelity": variants["multi_fidelity"].agent_steps(population_size),
    }
    final = {
        name: [
            r["test_fitness"]
            for r in rows
            if r["variant"] == name and r["generation"] == generations
        ]
        for name in variants
    }
    return {
        "workload": "L0 (chemotaxis, sparse rate network)",
        "population_size": population_size,
        "full_steps": full_steps,
        "proxy_steps": proxy_steps,
        "num_promoted": k,
        "generations": generations,
        "eval_every": eval_every,
        "seeds": seeds,
        "test_episodes": test_episodes,
        "agent_steps_per_generation": per_generation,
        "agent_steps_ratio": per_generation["full"] / per_generation["multi_fidelity"],
        "final_test_fitness": final,
        "rows": rows,
    }


class _Curve:
    """`evolve`'s callback: every chunk, the seeds' test fitness and steps spent."""

    def __init__(
        self, name: str, test_fitness: Any, full_cost: int, rows: list[dict[str, Any]]
    ):
        self.name, self.test_fitness, self.rows = name, test_fitness, rows
        self.full_cost = full_cost  # agent-steps of a single-fidelity generation
        self.spent: np.ndarray | None = None

    def __call__(self, chunk: Chunk) -> None:
        history = chunk.history
        steps = history.get("agent_steps")
        # only a multi-fidelity fitness reports its agent-steps per generation
        if steps is None:
            steps = np.full(history["best"].shape, self.full_cost, np.int64)
        per_seed = np.sum(steps, axis=-1).astype(np.int64)
        self.spent = per_seed if self.spent is None else self.spent + per_seed
        self.record(chunk.generation, chunk.state, history["best"][:, -1])

    def record(self, generation: int, states: Any, best: np.ndarray) -> None:
        values = np.asarray(self.test_fitness(states))
        spent = np.zeros(len(values), np.int64) if self.spent is None else self.spent
        for seed, value in enumerate(values):
            self.rows.append(
                {
                    "variant": self.name,
                    "seed": seed,
                    "generation": generation,
                    "agent_steps": int(spent[seed]),
                    "test_fitness": float(value),
                    "best": float(best[seed]),
                }
            )


def plot_fidelity(result: dict[str, Any], path: Path) -> Path:
    """Test fitness against generations (left) and agent-steps spent (right).

    Drawn on matplotlib's Agg canvas: no pyplot, no change of backend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = result["rows"]
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    colours = {"full": "tab:blue", "multi_fidelity": "tab:orange"}
    for name, colour in colours.items():
        seeds = sorted({r["seed"] for r in rows if r["variant"] == name})
        for seed in seeds:
            mine = [r for r in rows if r["variant"] == name and r["seed"] == seed]
            label = name.replace("_", "-") if seed == seeds[0] else None
            for ax, x in zip(axes, ("generation", "agent_steps"), strict=True):
                ax.plot(
                    [r[x] for r in mine],
                    [r["test_fitness"] for r in mine],
                    color=colour,
                    alpha=0.8,
                    label=label,
                )
    axes[0].set_xlabel("generation")
    axes[1].set_xlabel("agent-steps spent")
    axes[0].set_ylabel("test fitness of the search mean (full lifetime)")
    axes[0].legend()
    fig.suptitle(
        f"{result['workload']}, P={result['population_size']}, "
        f"T={result['full_steps']}, proxy T={result['proxy_steps']}, "
        f"k={result['num_promoted']}"
    )
    fig.savefig(path, dpi=120)
    return path


__all__ = ["FULL", "QUICK", "fidelity_curves", "plot_fidelity"]
