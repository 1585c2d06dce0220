"""`eqxevo` command line: run, resume, plot and evaluate experiments; list
strategies.

Every command goes through `eqxevo.experiment`, which calls the same
`eqxevo.evolve` as the Python API and the benchmark.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from . import config as config_module
from .checkpoint import CheckpointError
from .config import ConfigError
from .metrics import SinkError

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _fail(err: Exception) -> None:
    raise click.ClickException(str(err)) from err


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _mesh(devices: int) -> Any:
    """A population mesh over `devices` devices (None for one); on a CPU each
    core becomes a device, which must happen before JAX starts."""
    if devices == 1:
        return None
    import jax

    from .sharding import population_mesh, use_cpu_devices

    started = False
    try:
        use_cpu_devices(devices)
    except RuntimeError:  # JAX already started (in-process use): keep its devices
        started = True
    available = jax.devices()
    if started:
        limit, what = len(available), "JAX devices in this process (JAX had started)"
    elif available[0].platform == "cpu":
        limit, what = _cores(), "CPU cores"
    else:
        limit, what = len(available), f"{available[0].platform.upper()} devices"
    if devices > limit or len(available) < devices:
        raise click.BadParameter(
            f"--devices {devices}: this machine has {limit} {what}; allowed: 1 to "
            f"{limit}",
            param_hint="--devices",
        )
    return population_mesh(available[:devices])


def _newest_checkpoint(run_dir: Path) -> int | None:
    """The newest checkpoint folder's generation (by name; not verified)."""
    folder = run_dir / "checkpoints"
    steps = [int(p.name) for p in folder.glob("*") if p.name.isdigit()]
    return max(steps) if steps else None


def _stop_request(run_dir: Path | None) -> Any:
    """SIGINT/SIGTERM handling from the command's first line (before JAX starts):
    until the run has finished a chunk, a signal exits at once, truthfully."""
    from .interrupts import StopRequest

    def describe() -> str:
        newest = None if run_dir is None else _newest_checkpoint(run_dir)
        if newest is None:
            return "no checkpoint yet: nothing to resume"
        return f"checkpoint at generation {newest} saved; `eqxevo resume {run_dir}`"

    return StopRequest(describe)


def _run_errors() -> tuple[type[Exception], ...]:
    from .experiment import ResourceError, RunDirError

    return (ConfigError, CheckpointError, RunDirError, ResourceError, SinkError)


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
      eqxevo eval runs/chemotaxis-sparse_rate-snes-20261122-120000 --episodes 128
      eqxevo strategies
    """


RUN_HELP = """Run an experiment: CONFIG.toml, or the default (L0 chemotaxis, sparse rate
network, SNES preset, P=256, T=1000).

Writes a run directory with config.toml (every resolved value: `eqxevo run
RUN_DIR/config.toml` repeats the run), metrics.jsonl, fitness.png,
best_genome.eqx, summary.json (totals over every resume) and verified
checkpoints/. After compiling it prints XLA's memory estimate (and stops if the
run cannot fit); after the first chunk, the projected wall time. The first Ctrl-C
(or SIGTERM) stops after the running chunk with a checkpoint (exit 130/143); a
second quits at once. `eqxevo resume RUN_DIR` then continues bit-for-bit.

\b
Examples:
  eqxevo run
  eqxevo run experiment.toml --num-seeds 4
  eqxevo run --set env.name=foraging --set run.lifetime=5000 --set run.generations=50
  eqxevo run --set strategy.name=SV_CMA_ES --set strategy.kwargs.num_populations=4
  eqxevo run --set 'net.options.plasticity={ learning_rate = 0.01 }' --tensorboard
"""


class _RunCommand(click.Command):
    """`eqxevo run`: the config keys, networks, environments and strategies are
    listed after the options, built only when --help asks (it imports evosax)."""

    def format_epilog(self, ctx: click.Context, formatter: Any) -> None:
        from .experiment import catalogue

        formatter.write(
            "\nConfig keys (TOML tables [env], [net], [strategy], [run], [sinks]); "
            "defaults are TOML literals, as --set takes them:\n"
        )
        formatter.write(config_module.describe() + "\n\n")
        formatter.write(catalogue() + "\n")


@main.command(context_settings=CONTEXT, help=RUN_HELP, cls=_RunCommand)
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
    "JAX device; at most the machine's). Results do not depend on it.",
)
@click.option(
    "--tensorboard",
    is_flag=True,
    help="Also write TensorBoard event files (sinks.tensorboard = true).",
)
@click.option(
    "--wandb",
    is_flag=True,
    help="Also log to Weights & Biases, offline unless sinks.wandb_mode = "
    '"online" (sinks.wandb = true).',
)
def run(
    config: str | None,
    overrides: tuple[str, ...],
    num_seeds: int | None,
    out: str,
    name: str | None,
    quiet: bool,
    devices: int,
    tensorboard: bool,
    wandb: bool,
) -> None:
    with _stop_request(None) as stop:
        _run(
            config,
            overrides,
            num_seeds,
            out,
            name,
            quiet,
            devices,
            tensorboard,
            wandb,
            stop,
        )


def _run(
    config: str | None,
    overrides: tuple[str, ...],
    num_seeds: int | None,
    out: str,
    name: str | None,
    quiet: bool,
    devices: int,
    tensorboard: bool,
    wandb: bool,
    stop: Any,
) -> None:
    items = list(overrides) + ([f"run.num_seeds={num_seeds}"] if num_seeds else [])
    items += ["sinks.tensorboard=true"] if tensorboard else []
    items += ["sinks.wandb=true"] if wandb else []
    try:
        experiment = config_module.load(config, items)
    except ConfigError as err:
        _fail(err)
        return
    mesh = _mesh(devices)
    if experiment.strategy.population_size % devices:
        raise click.BadParameter(
            f"strategy.population_size = {experiment.strategy.population_size} "
            f"does not split over {devices} devices; use a multiple of {devices}",
            param_hint="--devices",
        )
    from . import experiment as experiment_module

    if name is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        env = experiment.env.name.replace(":", "-").replace("/", "-")
        name = (
            f"{env}-{experiment.net.name}-{Path(experiment.strategy.name).stem}-{stamp}"
        )
    run_dir = Path(out) / name
    try:
        summary = experiment_module.run(
            experiment, run_dir, quiet=quiet, mesh=mesh, stop=stop
        )
    except experiment_module.RunInterrupted as interrupted:
        click.echo(interrupted.message, err=True)
        sys.exit(interrupted.exit_code)
    except _run_errors() as err:
        _fail(err)
        return
    _report(run_dir, summary)


def _heldout_lines(heldout: Any) -> list[str]:
    """summary.json's held-out entry in words (one line per seed and genome)."""
    entries = heldout if isinstance(heldout, list) else [heldout]
    lines = []
    for seed, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        where = f"seed {seed}, " if len(entries) > 1 else ""
        for genome, what in (("mean", "distribution mean"), ("best", "best genome")):
            held = entry.get(genome)
            if not held or held.get("mean") is None:
                continue
            low, high = held.get("ci_low"), held.get("ci_high")
            half = "" if low is None or high is None else f" ± {(high - low) / 2:.3g}"
            lines.append(
                f"held-out fitness of the {what} ({where}generation "
                f"{entry.get('generation')}): {held['mean']:.5g}{half} (95% CI, "
                f"{held.get('episodes')} lifetimes)"
            )
    return lines


def _report(run_dir: Path, summary: dict[str, Any]) -> None:
    for line in _heldout_lines(summary.get("heldout")):
        click.echo(line)
    best = summary.get("best_fitness")
    shown = "n/a" if best is None else f"{best:.5g}"
    segments = summary.get("num_segments", 1)
    click.echo(
        f"best training fitness {shown} after {summary['generations']} generations "
        f"({summary.get('wall_time_s', 0.0):.1f} s"
        + (f" over {segments} segments" if segments > 1 else "")
        + f", {summary.get('agent_steps_per_s', 0.0):.3g} agent-steps/s)\n"
        f"run directory: {run_dir}"
    )


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change run.generations, run.chunk_size, run.chunk_seconds, "
    "run.checkpoint_every, run.keep_checkpoints, run.batch_size or sinks.*, e.g. to "
    "extend a run.",
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
    """Continue RUN_DIR from its newest good checkpoint, bit-for-bit.

    Checkpoints are verified (structure, shapes, dtypes, checksum); a damaged
    newest one is skipped with a one-line note and the run resumes from the
    newest good one. summary.json adds this segment to the run's totals.

    \b
    Example:
      eqxevo resume runs/my-run
      eqxevo resume runs/my-run --set run.generations=400   # run longer
    """
    with _stop_request(Path(run_dir)) as stop:
        mesh = _mesh(devices)
        from . import experiment as experiment_module

        try:
            summary = experiment_module.resume(
                Path(run_dir), overrides, quiet=quiet, mesh=mesh, stop=stop
            )
        except experiment_module.RunInterrupted as interrupted:
            click.echo(interrupted.message, err=True)
            sys.exit(interrupted.exit_code)
        except _run_errors() as err:
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
    try:
        title = experiment_module.run_title(
            config_module.load(path / "config.toml"), path
        )
    except ConfigError:
        title = path.name
    written = [plot_fitness(records, path / "fitness.png", title=title)]
    if (path / "best_genome.eqx").exists():
        try:
            written.append(experiment_module.plot_best(path, steps))
        except (ConfigError, NotImplementedError) as err:
            click.echo(f"no trajectory plot: {err}", err=True)
    for p in written:
        click.echo(str(p))


@main.command("eval", context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--genome",
    type=click.Choice(["best", "mean"]),
    default="best",
    show_default=True,
    help="best: the best genome found (best_genome.eqx); mean: the distribution "
    "mean (mean_genome.eqx; not for population-based algorithms).",
)
@click.option(
    "--episodes",
    type=click.IntRange(1),
    help="Held-out lifetimes (default: the run's run.eval_episodes).",
)
@click.option(
    "--seed",
    type=click.IntRange(0),
    help="Evaluate on the lifetimes a run with run.seed = SEED holds out (default: "
    "this run's own, those its held-out evaluations used).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "--render",
    type=click.Path(dir_okay=False),
    help="Also draw the genome living the first held-out lifetime to this PNG "
    "(arena environments).",
)
def eval_command(
    run_dir: str,
    genome: str,
    episodes: int | None,
    seed: int | None,
    as_json: bool,
    render: str | None,
) -> None:
    """Evaluate RUN_DIR's saved genome on held-out lifetimes: mean ± 95% CI.

    The lifetimes come from a key stream selection never uses (the run's own
    held-out stream by default: the result then equals the run's final
    held-out record in summary.json); episode e is the same lifetime for every
    --episodes N > e.

    \b
    Examples:
      eqxevo eval runs/my-run
      eqxevo eval runs/my-run --genome mean --episodes 256 --json
      eqxevo eval runs/my-run --seed 7 --render lifetime.png
    """
    from . import experiment as experiment_module

    try:
        evaluation, built, loaded, key = experiment_module.eval_run(
            Path(run_dir), genome=genome, num_episodes=episodes, seed=seed
        )
    except (ConfigError, experiment_module.RunDirError) as err:
        _fail(err)
        return
    result = evaluation.result
    half = (result.ci_high - result.ci_low) / 2
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_dir": str(run_dir),
                    "genome": genome,
                    "stream": evaluation.stream,
                    "run_seed": evaluation.run_seed,
                    "generations": evaluation.generations,
                    "episodes": result.num_episodes,
                    "num_nonfinite": result.num_nonfinite,
                    "mean": result.mean,
                    "ci_low": result.ci_low,
                    "ci_high": result.ci_high,
                    "std": result.std,
                },
                indent=2,
            )
        )
    else:
        click.echo(
            f"held-out fitness over {result.num_episodes} lifetimes: {result.mean!r} "
            f"± {half:.4g} (95% CI [{result.ci_low:.6g}, {result.ci_high:.6g}])"
        )
    if render:
        import jax.random as jr

        try:
            path = experiment_module.render_lifetime(
                built,
                loaded,
                jr.fold_in(key, 0),
                render,
                title=f"{genome} genome of {Path(run_dir).name}: held-out lifetime 0",
            )
        except NotImplementedError as err:
            _fail(err)
            return
        click.echo(f"lifetime drawn: {path}", err=as_json)


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
