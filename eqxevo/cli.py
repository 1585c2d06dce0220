"""`eqxevo` command line: run, resume and plot experiments; list strategies.

Every command goes through `eqxevo.experiment`, which calls the same
`eqxevo.evolve` as the Python API and the benchmark.
"""

import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import click

from . import config as config_module
from .checkpoint import CheckpointError
from .config import ConfigError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(err: Exception) -> None:
    raise click.ClickException(str(err)) from err


def _mesh(devices: int) -> Any:
    """A population mesh over `devices` devices (None for one); on a CPU each
    core becomes a device, which must happen before JAX starts."""
    if devices == 1:
        return None
    import jax

    from .sharding import population_mesh, use_cpu_devices

    use_cpu_devices(devices)
    available = jax.devices()
    if len(available) < devices:
        raise click.BadParameter(
            f"{devices} devices requested; this machine has {len(available)}",
            param_hint="--devices",
        )
    return population_mesh(available[:devices])


def _sigterm_as_interrupt() -> None:
    """SIGTERM (a cluster's preemption notice) checkpoints like Ctrl-C does."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)


@click.group(context_settings=CONTEXT)
@click.version_option(package_name="eqxevo")
def main() -> None:
    """eqxevo: neuroevolution with Equinox genomes and evosax strategies.

    \b
    Examples:
      eqxevo run                              # the default experiment (L0 chemotaxis)
      eqxevo run exp.toml --set run.generations=50 --num-seeds 4
      eqxevo resume runs/chemotaxis-sparse_rate-snes-20261122-120000
      eqxevo plot runs/chemotaxis-sparse_rate-snes-20261122-120000
      eqxevo strategies
    """


RUN_HELP = """Run an experiment: CONFIG.toml, or the default (L0 chemotaxis, sparse rate
network, SNES preset, P=256, T=1000).

Writes a run directory with config.toml, metrics.jsonl, fitness.png,
best_genome.eqx, summary.json and checkpoints/. Ctrl-C (or SIGTERM) checkpoints
and stops; `eqxevo resume RUN_DIR` then continues bit-for-bit.

\b
Examples:
  eqxevo run
  eqxevo run experiment.toml --num-seeds 4
  eqxevo run --set env.name=foraging --set run.lifetime=5000 --set run.generations=50

\b
Config keys (TOML tables [env], [net], [strategy], [run]) and defaults:
""" + config_module.describe()


@main.command(context_settings=CONTEXT, help=RUN_HELP)
@click.argument("config", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key, e.g. --set run.generations=50 (repeatable).",
)
@click.option(
    "--num-seeds", type=click.IntRange(1), help="Independent runs in one program."
)
@click.option(
    "--out",
    default="runs",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder that receives the run directory.",
)
@click.option("--name", help="Run directory name (default: env-net-strategy-time).")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--devices",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Devices to split each generation over (on a CPU: cores, each made a "
    "JAX device). Results do not depend on it.",
)
def run(
    config: str | None,
    overrides: tuple[str, ...],
    num_seeds: int | None,
    out: str,
    name: str | None,
    quiet: bool,
    devices: int,
) -> None:

    items = list(overrides) + ([f"run.num_seeds={num_seeds}"] if num_seeds else [])
    try:
        experiment = config_module.load(config, items)
    except ConfigError as err:
        _fail(err)
        return
    if experiment.strategy.population_size % devices:
        raise click.BadParameter(
            f"strategy.population_size = {experiment.strategy.population_size} "
            f"does not split over {devices} devices; use a multiple of {devices}",
            param_hint="--devices",
        )
    mesh = _mesh(devices)
    from . import experiment as experiment_module

    if name is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        env = experiment.env.name.replace(":", "-").replace("/", "-")
        name = (
            f"{env}-{experiment.net.name}-{Path(experiment.strategy.name).stem}-{stamp}"
        )
    run_dir = Path(out) / name
    _sigterm_as_interrupt()
    try:
        summary = experiment_module.run(experiment, run_dir, quiet=quiet, mesh=mesh)
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted; checkpoint saved. Continue with: eqxevo resume {run_dir}",
            err=True,
        )
        sys.exit(130)
    except (ConfigError, CheckpointError, experiment_module.RunDirError) as err:
        _fail(err)
        return
    _report(run_dir, summary)


def _report(run_dir: Path, summary: dict[str, Any]) -> None:
    click.echo(
        f"best fitness {summary['best_fitness']:.5g} after {summary['generations']} "
        f"generations ({summary['wall_time_s']:.1f} s, "
        f"{summary['agent_steps_per_s']:.3g} agent-steps/s)\nrun directory: {run_dir}"
    )


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change run.generations (or chunk/checkpoint settings), e.g. to extend a run.",
)
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option(
    "--devices",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Devices to split each generation over (results do not depend on it).",
)
def resume(run_dir: str, overrides: tuple[str, ...], quiet: bool, devices: int) -> None:
    """Continue RUN_DIR from its newest checkpoint, bit-for-bit.

    \b
    Example:
      eqxevo resume runs/my-run
      eqxevo resume runs/my-run --set run.generations=400   # run longer
    """
    mesh = _mesh(devices)
    from . import experiment as experiment_module

    _sigterm_as_interrupt()
    try:
        summary = experiment_module.resume(
            Path(run_dir), overrides, quiet=quiet, mesh=mesh
        )
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted; checkpoint saved. Continue with: eqxevo resume {run_dir}",
            err=True,
        )
        sys.exit(130)
    except (ConfigError, CheckpointError, experiment_module.RunDirError) as err:
        _fail(err)
        return
    _report(Path(run_dir), summary)


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--steps",
    default=None,
    type=click.IntRange(1),
    help="Lifetime steps to draw for the trajectory (default: run.lifetime).",
)
def plot(run_dir: str, steps: int | None) -> None:
    """Draw RUN_DIR's fitness curves (mean and spread over seeds) and the best
    agent's trajectory.

    \b
    Example:
      eqxevo plot runs/my-run
    """
    from . import experiment as experiment_module
    from .metrics import MetricsLog
    from .plots import plot_fitness

    path = Path(run_dir)
    records = MetricsLog(path / "metrics.jsonl").read()
    if not records:
        _fail(ValueError(f"{path} has no metrics.jsonl records to plot"))
    written = [plot_fitness(records, path / "fitness.png")]
    if (path / "best_genome.eqx").exists():
        try:
            written.append(experiment_module.plot_best(path, steps))
        except (ConfigError, NotImplementedError) as err:
            click.echo(f"no trajectory plot: {err}", err=True)
    for p in written:
        click.echo(str(p))


@main.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def strategies(as_json: bool) -> None:
    """List every evosax algorithm and shipped preset usable by name.

    \b
    Example:
      eqxevo strategies
    """
    from .registry import strategies as list_strategies

    rows = list_strategies()
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in rows], indent=2))
        return
    width = max(len(r.name) for r in rows)
    titles = {"preset": "eqxevo presets", "evosax": "evosax algorithms (defaults)"}
    for kind, title in titles.items():
        click.echo(f"\n{title}:")
        for r in rows:
            if r.kind == kind:
                click.echo(f"  {r.name:<{width}}  {r.family:<12}  {r.description}")


@main.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
)
@click.pass_context
def bench(ctx: click.Context) -> None:
    """Benchmarks: milestones, baselines, scaling (see `eqxevo bench --help`)."""
    from .bench.cli import main as bench_main

    sys.exit(bench_main(list(ctx.args)))


from .study.cli import study as _study  # noqa: E402  (`eqxevo study ...`)

main.add_command(_study)

if __name__ == "__main__":
    main()
