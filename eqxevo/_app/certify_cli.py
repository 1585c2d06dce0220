"""`eqxevo certify`: a task's headroom certificate, from an experiment config."""

import dataclasses
import json
from pathlib import Path

import click

from . import config as config_module
from ._cli import CONTEXT, fail
from .config import ConfigError
from .interrupts import StopRequest
from .lock import LockedError

QUICK: dict[str, int] = {
    "population_size": 32,
    "generations": 20,
    "seeds": 1,
    "lifetimes": 1,
}
"""`--quick`: a search to see that a certificate can be made, not to trust."""


@click.command(context_settings=CONTEXT)
@click.argument("config", required=False, type=click.Path(exists=True))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key, e.g. --set env.params.swap_prob=0.5 (repeatable).",
)
@click.option(
    "--episodes",
    type=click.IntRange(2),
    default=256,
    show_default=True,
    help="Held-out lifetimes every policy is scored on.",
)
@click.option(
    "--seed",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="The certificate's seed (search and held-out lifetimes).",
)
@click.option("--population", type=click.IntRange(2), help="Search population.")
@click.option("--generations", type=click.IntRange(1), help="Search generations.")
@click.option("--seeds", type=click.IntRange(1), help="Search seeds per setting.")
@click.option(
    "--lifetimes",
    type=click.IntRange(1),
    help="Lifetimes per fitness evaluation in the search (noisy tasks want more).",
)
@click.option("--width", type=click.IntRange(1), help="The memoryless MLP's width.")
@click.option("--depth", type=click.IntRange(0), help="The memoryless MLP's depth.")
@click.option(
    "--quick",
    is_flag=True,
    help="A small search (P=32, 20 generations, one seed per setting): checks "
    "that the certificate can be made; its floor is not to be trusted.",
)
@click.option(
    "--cache",
    type=click.Path(file_okay=False),
    help="Certificates folder (default: $EQXEVO_CERTIFICATES, else "
    "~/.cache/eqxevo/certificates).",
)
@click.option("--force", is_flag=True, help="Make it again even if cached.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--quiet", is_flag=True, help="No progress output.")
def certify(
    config: str | None,
    overrides: tuple[str, ...],
    episodes: int,
    seed: int,
    population: int | None,
    generations: int | None,
    seeds: int | None,
    lifetimes: int | None,
    width: int | None,
    depth: int | None,
    quick: bool,
    cache: str | None,
    force: bool,
    as_json: bool,
    quiet: bool,
) -> None:
    """Certify a task's headroom: how much room it leaves for memory.

    Scores random, the best memoryless policy found (the environment's
    memoryless references and MLPs of the current observation evolved with
    several search settings) and the best learner or oracle on the same
    held-out lifetimes, and prints h = (learner - best memoryless) / (learner -
    random) with its 95% bootstrap interval. The task is CONFIG's environment,
    params and lifetime (CONFIG: an experiment TOML or a run directory; default
    the default experiment's). Cached with its provenance: `eqxevo eval` and
    `eqxevo study report` normalise against the certified memoryless bound.

    \b
    Examples:
      eqxevo certify examples/l4_long_horizon.toml
      eqxevo certify runs/my-run --episodes 512
      eqxevo certify --set env.name=bandit --set run.lifetime=100 --quick
    """
    with StopRequest(lambda: "certificate not made: nothing written"):
        from eqxevo._src.certificate import CertificateError
        from eqxevo._src.memoryless_search import DEFAULT_BUDGET

        from .experiment.certify import certify_experiment
        from .experiment.rundir import RunDirError

        path = None if config is None else Path(config)
        if path is not None and path.is_dir():
            path = path / "config.toml"
        try:
            experiment = config_module.load(path, list(overrides))
            changes = {
                "population_size": population,
                "generations": generations,
                "seeds": seeds,
                "lifetimes": lifetimes,
                "width": width,
                "depth": depth,
            }
            base = DEFAULT_BUDGET
            if quick:
                base = dataclasses.replace(base, **QUICK)
            given = {k: v for k, v in changes.items() if v is not None}
            budget = dataclasses.replace(base, **given)

            def progress(line: str) -> None:
                if not quiet:
                    click.echo(line, err=True)

            stored, made = certify_experiment(
                experiment,
                budget=budget,
                num_episodes=episodes,
                seed=seed,
                root=cache,
                force=force,
                progress=progress,
            )
        except (
            ConfigError,
            CertificateError,
            RunDirError,
            LockedError,
            ValueError,
        ) as err:
            fail(err)
    if as_json:
        click.echo(json.dumps({"path": str(stored.path), **stored.record}, indent=2))
        return
    if made is None:
        click.echo(f"cached certificate: {stored.path}")
        record = stored.record

        def number(value: float | None) -> str:
            return "undefined" if value is None else f"{value:.3f}"

        low, high = record["headroom_ci"]
        click.echo(
            f"headroom h = {number(record['headroom'])} [{number(low)}, "
            f"{number(high)}] (floor {record['floor']['name']}: "
            f"{record['floor']['mean']:.6g}; ceiling {record['ceiling']['name']}: "
            f"{record['ceiling']['mean']:.6g})"
        )
        return
    for line in made.lines():
        click.echo(line)
    click.echo(f"certificate written: {stored.path}")


__all__ = ["QUICK", "certify"]
