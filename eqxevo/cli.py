"""`eqxevo` command line: run experiments and list strategies.

Every command calls the same `eqxevo.evolve` as the Python API.
"""

import time

import click
import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from .evolve import evolve
from .registry import strategies as list_strategies
from .strategy import Strategy


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.version_option(package_name="eqxevo")
def main() -> None:
    """eqxevo: neuroevolution with Equinox genomes and evosax strategies.

    \b
    Examples:
      eqxevo run                 # the default experiment
      eqxevo strategies          # every algorithm and preset
    """


@main.command()
@click.option(
    "--strategy",
    "algorithm",
    default="snes",
    show_default=True,
    help="An evosax name, a preset name or a preset .toml file.",
)
@click.option(
    "--population-size", default=64, show_default=True, type=click.IntRange(2)
)
@click.option("--generations", default=300, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--quiet", is_flag=True, help="Print only the final result.")
def run(
    algorithm: str, population_size: int, generations: int, seed: int, quiet: bool
) -> None:
    """Run the default experiment: evolve an MLP to fit sin(x) on [-3, 3].

    \b
    Example:
      eqxevo run --strategy cma_es --generations 200
    """
    model_key, run_key = jr.split(jr.key(seed))
    mlp = eqx.nn.MLP(1, 1, 16, 2, activation=jnp.tanh, key=model_key)
    xs = jnp.linspace(-3.0, 3.0, 64)[:, None]
    ys = jnp.sin(xs)

    def fitness(genome: eqx.nn.MLP, key: jax.Array) -> jax.Array:
        del key
        return -jnp.mean((jax.vmap(genome)(xs) - ys) ** 2)

    try:
        strategy = Strategy(algorithm, mlp, population_size, maximize=True)
    except (ValueError, TypeError) as err:
        raise click.BadParameter(str(err), param_hint="--strategy") from err
    click.echo(
        f"evolving an MLP ({strategy.num_params} weights) with {strategy.name}, "
        f"P={population_size}, {generations} generations on {jax.default_backend()}"
    )
    start = time.perf_counter()

    def report(history: dict) -> None:
        if quiet:
            return
        g = int(history["generation"][-1])
        click.echo(
            f"generation {g + 1:5d}/{generations}  best {history['best'][-1]:+.5f}  "
            f"mean {history['mean'][-1]:+.5f}  ({time.perf_counter() - start:.1f}s)"
        )

    result = evolve(
        strategy,
        fitness,
        run_key,
        num_generations=generations,
        chunk_size=max(1, generations // 10),
        callback=report,
    )
    mse = -float(result.best_fitness)
    click.echo(
        f"best mean squared error {mse:.5f} "
        f"(a constant predictor scores {float(jnp.var(ys)):.5f})"
    )


@main.command()
def strategies() -> None:
    """List every evosax algorithm and shipped preset usable by name.

    \b
    Example:
      eqxevo strategies
    """
    rows = list_strategies()
    width = max(len(r.name) for r in rows)
    titles = {"preset": "eqxevo presets", "evosax": "evosax algorithms (defaults)"}
    for kind, title in titles.items():
        click.echo(f"\n{title}:")
        for r in rows:
            if r.kind == kind:
                click.echo(f"  {r.name:<{width}}  {r.family:<12}  {r.description}")
