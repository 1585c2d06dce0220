"""`eqxevo study plan | tune | run | status | report`."""

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from .._cli import CONTEXT, DEVICES, check_split, devices_mesh, fail
from ..interrupts import StopRequest, exit_code
from ..lock import LockedError


def _load(file: str) -> Any:
    from .spec import StudyError, load

    try:
        return load(file)
    except StudyError as err:
        fail(err)


UNDECIDABLE = click.option(
    "--allow-undecidable",
    is_flag=True,
    help="Go on although a declared comparison cannot reach p < 0.05 with the "
    "study's seeds (by default the command stops, naming it).",
)


def _decidable(spec: Any, allow: bool) -> None:
    """Stop, one line per comparison, when a declared comparison cannot reach
    significance with the study's seeds (unless --allow-undecidable)."""
    from .spec import StudyError
    from .stats import undecidable

    lines = undecidable(spec.compare, len(spec.seeds))
    if lines and not allow:
        fail(
            StudyError(
                "\n".join([*lines, "(--allow-undecidable runs the study anyway)"])
            )
        )
    for line in lines:
        click.echo(f"warning: {line}", err=True)


def _out(study: Any, out: str | None) -> Path:
    return Path(out) if out is not None else Path("studies") / study.name


def _tuned(spec: Any, out: Path) -> Any:
    """The study with its tune's chosen settings (`study tune` wrote them in OUT)."""
    from .spec import StudyError
    from .tune import with_tuned

    try:
        return with_tuned(spec, out)
    except StudyError as err:
        fail(err)


def _again(command: str, file: str, out: str | None) -> str:
    """The command that continues a stopped `study run`/`study tune`."""
    return f"eqxevo study {command} {file}" + (f" --out {out}" if out else "")


def _stop(command: str, file: str, out: str | None) -> StopRequest:
    """The CLI's stop request: a first Ctrl-C/SIGTERM stops after the running
    chunk, every run saved (eqxevo._app.interrupts). Entered before the study is
    loaded: loading may import an environment package that starts JAX."""
    return StopRequest(
        lambda: (
            f"every run keeps its last saved chunk; continue with "
            f"`{_again(command, file, out)}`"
        )
    )


def _interrupted(
    command: str, file: str, out: str | None, stop: StopRequest
) -> NoReturn:
    click.echo(
        f"\ninterrupted; every run keeps its last chunk. Continue with the same "
        f"command ({_again(command, file, out)}).",
        err=True,
    )
    sys.exit(exit_code(stop.signum) if stop.signum is not None else 130)


@click.group(context_settings=CONTEXT)
def study() -> None:
    """Run seeds x axes x arms of one experiment as a study.

    A study file is an experiment TOML plus a [study] table: its seeds, axes (a
    full factorial over any config keys) and arms (named ablations, several keys
    at once). docs/studies.md is the reference; examples/studies/ has examples.

    \b
    Examples:
      eqxevo study plan examples/studies/l4_plasticity.toml
      eqxevo study run examples/studies/l4_plasticity.toml --out studies/l4
      eqxevo study status studies/l4 --json
      eqxevo study report studies/l4
    """


def _file_and_out(out_help: str) -> Any:
    """The FILE argument and --out option of `study plan` and `study run`."""

    def decorate(command: Any) -> Any:
        command = click.option(
            "--out", type=click.Path(file_okay=False), help=out_help
        )(command)
        return click.argument("file", type=click.Path(exists=True, dir_okay=False))(
            command
        )

    return decorate


@study.command(context_settings=CONTEXT)
@_file_and_out("Output folder, to report runs done (default: studies/<name>).")
@click.option(
    "--measure",
    is_flag=True,
    help="Compile each program and time two generations of one run, for a time "
    "estimate (costs one compilation per program).",
)
@click.option(
    "--power",
    is_flag=True,
    help="The seeds each declared comparison needs to find its effect with "
    "power 0.8, from the tuned arms' spread over the tuning seeds (after "
    "`eqxevo study tune`).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@UNDECIDABLE
def plan(
    file: str,
    out: str | None,
    measure: bool,
    power: bool,
    as_json: bool,
    allow_undecidable: bool,
) -> None:
    """Show a study's cells, runs and compiled programs.

    FILE's cells, runs, how they group into compiled programs, and an
    estimate of memory and time. Builds every run (so every error shows), runs
    nothing unless --measure. With [study.tune], the cells carry the tune's
    chosen settings once `eqxevo study tune` has run.

    \b
    Examples:
      eqxevo study plan examples/studies/l4_plasticity.toml --measure
      eqxevo study plan study.toml --out studies/s --power
    """
    from .estimate import describe_plan
    from .power import power_lines, power_table
    from .spec import StudyError
    from .tune import read_chosen, tune_dir

    spec = _load(file)
    _decidable(spec, allow_undecidable)
    path = _out(spec, out)
    chosen = read_chosen(path) if spec.tune is not None else {}
    if chosen:
        spec = _tuned(spec, path)
    if power and not chosen:
        fail(
            StudyError(
                f"--power needs a finished tune in {tune_dir(path)} (the spread of "
                f"the tuned arms): run `eqxevo study tune {file} --out {path}`"
                + ("" if spec.tune else "; the study declares no [study.tune]")
            )
        )
    try:
        text, data = describe_plan(spec, path, measure=measure)
    except StudyError as err:
        fail(err)
    if spec.tune is not None and not chosen:
        text += "\nnot tuned yet: the cells show the arms' own settings"
    if power:
        rows = power_table(spec, chosen)
        data["power"] = rows
        text += "\n" + "\n".join(
            ["power:", *(f"  {line}" for line in power_lines(rows))]
        )
    click.echo(json.dumps(data, indent=2) if as_json else text)


@study.command(context_settings=CONTEXT)
@_file_and_out("Output folder (default: studies/<name>).")
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm", "submitit-local"]),
    default="local",
    show_default=True,
    help="local: every program in this process. slurm: one SLURM job per "
    "program, as a job array through submitit ([study.slurm] sets resources). "
    "submitit-local: the same jobs as subprocesses on this machine.",
)
@click.option("--quiet", is_flag=True, help="No progress output.")
@DEVICES
@click.option(
    "--force-resubmit",
    is_flag=True,
    help="slurm: submit again the runs of earlier jobs whose state neither sacct "
    "nor squeue gives (by default the command stops: they may still be running).",
)
@UNDECIDABLE
def run(
    file: str,
    out: str | None,
    executor: str,
    quiet: bool,
    devices: int,
    force_resubmit: bool,
    allow_undecidable: bool,
) -> None:
    """Run every unfinished run of a study file.

    Each run gets a run directory under OUT/runs/, as `eqxevo run` keeps one.

    Running the same command again continues a study that was stopped (Ctrl-C,
    SIGTERM, a kill, a pre-empted job) with the same results, and does nothing
    for a finished one.

    \b
    Examples:
      eqxevo study run examples/studies/l4_plasticity.toml
      eqxevo study run study.toml --out /scratch/me/study --executor slurm
      eqxevo study run study.toml --devices 4
    """
    from ..checkpoint import CheckpointError
    from .executor import LocalExecutor, SubmititExecutor, run_study
    from .spec import StudyError

    stop = _stop("run", file, out)
    try:
        # Until a chunk is saved a signal exits at once; after, the first one
        # stops after the running chunk (eqxevo._app.interrupts).
        with stop:
            # On a CPU, before JAX starts (loading the study may import an
            # environment package that starts it, as gymnax does): cores as
            # devices.
            mesh = devices_mesh(devices) if executor == "local" else None
            spec = _load(file)
            _decidable(spec, allow_undecidable)
            path = _out(spec, out)
            spec = _tuned(spec, path)
            check_split(
                devices,
                sorted(
                    {
                        (
                            f"cell {r.cell.name!r}: ",
                            r.experiment.strategy.population_size,
                        )
                        for r in spec.runs
                    }
                ),
            )
            chosen: Any = LocalExecutor(stop, mesh)
            if executor != "local":  # each job builds its mesh from its own devices
                cluster = "slurm" if executor == "slurm" else "local"
                chosen = SubmititExecutor(
                    cluster, spec.slurm, force_resubmit=force_resubmit, devices=devices
                )
            result = run_study(spec, path, chosen, quiet=quiet, compilation_cache=True)
    except KeyboardInterrupt:
        _interrupted("run", file, out, stop)
    except (StudyError, CheckpointError, LockedError) as err:
        fail(err)
    click.echo(
        f"{result['done']}/{result['runs']} runs complete in {path}; "
        f"report: eqxevo study report {path}"
    )


@study.command(context_settings=CONTEXT)
@_file_and_out("Output folder (default: studies/<name>); the tune goes in OUT/tune.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@DEVICES
def tune(file: str, out: str | None, quiet: bool, devices: int) -> None:
    """Choose each arm's search settings on the tuning seeds.

    FILE's [study.tune] gives the tuning seeds (disjoint from study.seeds), the
    trial budget per arm, the batch of trials run at once and each arm's search
    space. Optuna proposes; every trial runs on the tuning seeds; the best trial
    of each arm is written to OUT/tune/chosen.json, and `eqxevo study run` then
    evaluates the arms with those settings on the study's own seeds.

    Running the same command again continues a tune that was stopped (Ctrl-C,
    SIGTERM, a kill, a pre-empted job) with the same trials and the same
    choice, and does nothing for a finished one.

    \b
    Examples:
      eqxevo study tune examples/studies/bandit_plasticity.toml --out studies/bandit
      eqxevo study tune study.toml --devices 4
    """
    from ..checkpoint import CheckpointError
    from .executor import LocalExecutor
    from .spec import StudyError
    from .tune import tune as run_tune

    stop = _stop("tune", file, out)
    try:
        with stop:  # before JAX starts, as in `study run`
            mesh = devices_mesh(devices)
            spec = _load(file)
            path = _out(spec, out)
            chosen = run_tune(
                spec,
                path,
                LocalExecutor(stop, mesh),
                quiet=quiet,
                compilation_cache=True,
            )
    except KeyboardInterrupt:
        _interrupted("tune", file, out, stop)
    except (StudyError, CheckpointError, LockedError) as err:
        fail(err)
    for arm, entry in chosen["arms"].items():
        settings = ", ".join(f"{k} = {v!r}" for k, v in entry["settings"].items())
        click.echo(
            f"{arm}: trial {entry['trial']} of {chosen['trials']}, held-out "
            f"{entry['score']:.4g}: {settings}"
        )
    click.echo(
        f"chosen settings in {path}/tune/chosen.json; next: eqxevo study run "
        f"{file} --out {path}"
    )


@study.command(context_settings=CONTEXT)
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
def status(out: str, as_json: bool) -> None:
    """Show where a study stands: runs done, programs.

    The cells, the runs and how many are done, the compiled programs, and the
    generations run of all.

    \b
    Example:
      eqxevo study status studies/l4-plasticity --json
    """
    from .spec import StudyError
    from .status import status as study_status

    try:
        result = study_status(out)
    except StudyError as err:
        fail(err)
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    generations = result["generations"]
    click.echo(
        f"study {result['study']}: {result['cells']} cells, {result['runs']} runs, "
        f"{result['done']} done, {result['programs']} programs; generations "
        f"{generations['done']}/{generations['total']}"
    )
    if result["running"]:
        click.echo(f"being run by {result['running']}")
    for cell in result["per_cell"]:
        click.echo(f"  {cell['cell']}: {cell['done']}/{cell['runs']}")


@study.command(context_settings=CONTEXT)
@click.argument("out", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--to",
    type=click.Path(file_okay=False),
    help="Folder for the report (default: OUT/report).",
)
def report(out: str, to: str | None) -> None:
    """Write the study's report: tables, comparisons, figures.

    In OUT/report (or --to): cells.csv, summary.csv, comparisons.csv, the
    figures and report.md, comparing cells on held-out fitness.

    \b
    Example:
      eqxevo study report studies/l4-plasticity
    """
    from .report import write_report
    from .spec import StudyError

    try:
        path = write_report(out, to)
    except StudyError as err:
        fail(err)
    click.echo(str(path))


__all__ = ["study"]
