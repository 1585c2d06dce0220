"""`eqxevo`: the command line (run, resume, plot, eval, strategies, bench, study)."""

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from . import config as config_module
from ._cli import CONTEXT, DEVICES, Group, check_split, devices_mesh, fail
from .checkpoint import CheckpointError
from .config import ConfigError
from .interrupts import command_started
from .metrics import SinkError


def _stop_request(run_dir: Path | None) -> Any:
    """SIGINT/SIGTERM handling from the command's first line (before JAX starts):
    until the run has finished a chunk, a signal exits at once, truthfully."""
    from .experiment.rundir import RunDir
    from .interrupts import StopRequest

    def describe() -> str:
        newest = None if run_dir is None else RunDir(run_dir).newest_checkpoint()
        if newest is None:
            return "no checkpoint yet: nothing to resume"
        return f"checkpoint at generation {newest} saved; `eqxevo resume {run_dir}`"

    return StopRequest(describe)


def _run_errors() -> tuple[type[Exception], ...]:
    from .experiment.resources import ResourceError
    from .experiment.rundir import RunDirError
    from .lock import LockedError

    return (
        ConfigError,
        CheckpointError,
        RunDirError,
        ResourceError,
        SinkError,
        LockedError,
    )


@click.group(context_settings=CONTEXT, cls=Group)
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
      eqxevo strategies snes
      eqxevo study run examples/studies/l4_plasticity.toml
      eqxevo bench --quick
    """
    # The process guard (eqxevo/__main__.py) names the command in its message.
    command_started(click.get_current_context().invoked_subcommand)


_QUIET = click.option("--quiet", is_flag=True, help="No progress output.")

RUN_HELP = """Run an experiment (a TOML file, or the default).

The default is L0 chemotaxis: a sparse rate network, the SNES preset, P=256,
T=1000. The run directory gets config.toml (every effective value: `eqxevo run
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
    """`eqxevo run`: the config keys, networks and environments are listed after
    the options (built only when --help asks)."""

    def format_epilog(self, ctx: click.Context, formatter: Any) -> None:
        from .catalogue import catalogue

        formatter.write(
            "\nConfig keys (TOML tables [env], [net], [strategy], [run], [qd], "
            "[sinks]); defaults are TOML literals, as --set takes them:\n"
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
@_QUIET
@DEVICES
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
    items = list(overrides) + ([f"run.num_seeds={num_seeds}"] if num_seeds else [])
    items += ["sinks.tensorboard=true"] if tensorboard else []
    items += ["sinks.wandb=true"] if wandb else []
    # Signals are taken over before anything heavy is imported, so a Ctrl-C
    # while JAX starts or compiles exits at once with a true message.
    with _stop_request(None) as stop:
        try:
            experiment = config_module.load(config, items)
        except ConfigError as err:
            fail(err)
        mesh = devices_mesh(devices)
        check_split(devices, [("", experiment.strategy.population_size)])
        if name is None:
            stamp = time.strftime("%Y%m%d-%H%M%S")
            env = experiment.env.name.replace(":", "-").replace("/", "-")
            method = config_module.method_name(experiment)
            name = f"{env}-{experiment.net.name}-{method}-{stamp}"
        run_dir = Path(out) / name
        from .experiment.run import run_experiment

        summary = _drive(
            run_experiment, experiment, run_dir, quiet=quiet, mesh=mesh, stop=stop
        )
    _report(run_dir, summary)


def _drive(fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """`fn(*args, **kwargs)` (a run or a resume): a stop by signal exits with its
    status and one line, an error with one line."""
    from .experiment.run import RunInterrupted

    try:
        return fn(*args, **kwargs)
    except RunInterrupted as interrupted:
        click.echo(interrupted.message, err=True)
        sys.exit(interrupted.exit_code)
    except _run_errors() as err:
        fail(err)


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
    if summary.get("qd_score") is not None:  # a MAP-Elites run's archive
        click.echo(
            f"archive: QD score {summary['qd_score']:.5g}, coverage "
            f"{100 * summary['coverage']:.1f}%, best elite {summary['max_fitness']:.5g}"
        )
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
    help="Change a key that keeps the trajectory: "
    + ", ".join(config_module.RESUMABLE_CHANGES).replace("sinks.", "sinks.*")
    + " (e.g. run.generations=400 to run longer).",
)
@_QUIET
@DEVICES
def resume(run_dir: str, overrides: tuple[str, ...], quiet: bool, devices: int) -> None:
    """Continue a run from its newest good checkpoint, bit for bit.

    Checkpoints are verified (structure, shapes, dtypes, checksum); a damaged
    newest one is skipped with a one-line note and the run resumes from the
    newest good one. summary.json adds this segment to the run's totals.

    \b
    Examples:
      eqxevo resume runs/my-run
      eqxevo resume runs/my-run --set run.generations=400   # run longer
    """
    with _stop_request(Path(run_dir)) as stop:
        mesh = devices_mesh(devices)
        from .experiment.run import resume_run

        summary = _drive(
            resume_run, Path(run_dir), overrides, quiet=quiet, mesh=mesh, stop=stop
        )
    _report(Path(run_dir), summary)


@main.command(context_settings=CONTEXT)
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--steps",
    default=None,
    type=click.IntRange(1),
    help="Lifetime steps to draw for the trajectory (default: run.lifetime, at "
    "most 5000).",
)
def plot(run_dir: str, steps: int | None) -> None:
    """Draw a run's fitness curves and its best agent's path.

    fitness.png: mean and spread over seeds per generation, with the held-out
    evaluations and, where the task has a headroom certificate (`eqxevo
    certify`), its certified memoryless bound and best learner or oracle as
    bands; trajectory.png: the best genome living one lifetime (arena
    environments); archive.png: a MAP-Elites run's archive, from its newest
    checkpoint.

    \b
    Example:
      eqxevo plot runs/my-run
    """
    from .experiment.certify import certificate_bands
    from .experiment.review import plot_archive, plot_best
    from .experiment.rundir import RunDir, RunDirError

    directory = RunDir(run_dir)
    try:
        experiment = directory.read_config()
    except (ConfigError, RunDirError):
        experiment = None  # the curves need no config; the title names the folder
    try:
        bands = [] if experiment is None else certificate_bands(experiment)
        written = [directory.plot(experiment, bands)]
    except RunDirError as err:
        fail(err)
    if (directory.path / "best_genome.eqx").exists():
        try:
            written.append(plot_best(directory.path, steps))
        except (ConfigError, RunDirError, NotImplementedError) as err:
            click.echo(f"no trajectory plot: {err}", err=True)
    if experiment is not None and experiment.qd.archive != "off":
        try:
            archive = plot_archive(directory.path)
        except (ConfigError, RunDirError, CheckpointError) as err:
            click.echo(f"no archive plot: {err}", err=True)
        else:
            written += [archive] if archive is not None else []
    for path in written:
        click.echo(str(path))


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
@click.option(
    "--lesion",
    type=click.Choice(["plasticity", "memory"]),
    help="Evaluate the genome lesioned: plasticity cut (its weights stay those it "
    "is born with; alpha = 0), or memory wiped (its recurrent activity reset "
    "before every step). The references are not lesioned.",
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
    lesion: str | None,
    as_json: bool,
    render: str | None,
) -> None:
    """Score a run's saved genome on held-out lifetimes.

    Prints the mean fitness with its 95% CI, then the environment's reference
    agents on the same lifetimes and the normalised score (0: the best
    reference without memory, 1: the best learner or oracle), with a warning
    when the genome is below the best without memory. The lifetimes come from a key
    stream selection never uses: by default the run's own held-out stream, so
    the result equals the run's final held-out record in summary.json (runs of
    a study included); episode e is the same lifetime for every --episodes N > e.

    \b
    Examples:
      eqxevo eval runs/my-run
      eqxevo eval runs/my-run --genome mean --episodes 256 --json
      eqxevo eval runs/my-run --seed 7 --render lifetime.png
      eqxevo eval runs/my-plastic-run --lesion plasticity
    """
    from eqxevo._src.nets.base import LesionError

    from .experiment.resources import ResourceError
    from .experiment.review import eval_run
    from .experiment.rundir import RunDirError

    try:
        evaluation, built, loaded = eval_run(
            Path(run_dir),
            genome=genome,
            num_episodes=episodes,
            seed=seed,
            lesion=lesion,
        )
    except (ConfigError, RunDirError, ResourceError, LesionError) as err:
        fail(err)
    result = evaluation.result
    if as_json:
        fields = {
            "run_dir": str(run_dir),
            "genome": genome,
            "lesion": lesion,
            "stream": evaluation.stream,
            "run_seed": evaluation.run_seed,
            "generations": evaluation.generations,
            "episodes": result.num_episodes,
            "num_nonfinite": result.num_nonfinite,
            "mean": result.mean,
            "ci_low": result.ci_low,
            "ci_high": result.ci_high,
            "std": result.std,
            **evaluation.reference_fields(),
        }
        click.echo(json.dumps(fields, indent=2))
    else:
        half = (result.ci_high - result.ci_low) / 2
        cut = f" ({lesion} lesioned)" if lesion else ""
        click.echo(
            f"held-out fitness{cut} over {result.num_episodes} lifetimes: "
            f"{result.mean!r} "
            f"± {half:.4g} (95% CI [{result.ci_low:.6g}, {result.ci_high:.6g}])"
        )
        for line in evaluation.reference_lines():
            click.echo(line)
    if render:
        import jax.random as jr

        from .experiment.review import render_lifetime

        try:
            path = render_lifetime(
                built,
                loaded,
                jr.fold_in(evaluation.key, 0),
                render,
                title=f"{genome} genome of {Path(run_dir).name}: held-out lifetime 0",
            )
        except NotImplementedError as err:
            fail(err)
        click.echo(f"lifetime drawn: {path}", err=as_json)


@main.command(context_settings=CONTEXT)
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def strategies(name: str | None, as_json: bool) -> None:
    """List the algorithms and presets, or show one's parameters.

    Without NAME: every evosax algorithm and shipped preset usable as
    [strategy] name. With NAME: its family, its [strategy.params] fields and
    its [strategy.kwargs] constructor arguments.

    \b
    Examples:
      eqxevo strategies
      eqxevo strategies CMA_ES
      eqxevo strategies snes --json
    """
    from eqxevo._src.registry import lookup_strategy, strategies as list_strategies

    from .catalogue import strategy_help

    if name is not None:
        try:
            text = strategy_help(name)
            spec = lookup_strategy(name)
        except ValueError as err:
            fail(err)
        if as_json:
            rows = [r.__dict__ for r in list_strategies() if r.name == spec.name]
            click.echo(json.dumps(rows[0] if rows else {"name": spec.name}, indent=2))
        else:
            click.echo(text)
        return
    rows = list_strategies()
    if as_json:
        click.echo(json.dumps([r.__dict__ for r in rows], indent=2))
        return
    width = max(len(r.name) for r in rows)
    titles = {"preset": "eqxevo presets", "evosax": "evosax algorithms (defaults)"}
    for i, (kind, title) in enumerate(titles.items()):
        click.echo(("\n" if i else "") + f"{title}:")
        for r in rows:
            if r.kind == kind:
                click.echo(f"  {r.name:<{width}}  {r.family:<12}  {r.description}")
    click.echo("\n`eqxevo strategies NAME` shows one's params and kwargs.")


def _add_subcommands() -> None:
    from .bench.cli import bench
    from .certify_cli import certify
    from .study.cli import study

    main.add_command(bench)
    main.add_command(certify)
    main.add_command(study)


_add_subcommands()
