"""`eqxevo bench`: run the benchmark, write a report."""

import os
import time
from pathlib import Path
from typing import Any

import click

from eqxevo._src._checks import positive_int

from .._cli import CONTEXT, fail
from .parts import DEFAULT_PARTS, PARTS, QUICK_PARTS, Options, run_parts, say

BENCH_HELP = f"""Time eqxevo against hand-written baselines; write a report.

Runs the parts named by --only (default: {", ".join(DEFAULT_PARTS)}) and
writes their CSV and JSON files to --out, then report.md: every performance
target, met or "missed by N x". Figures that need several devices run in child
processes; a part that fails is reported and the others still run (exit status
1). See docs/performance.md.

\b
Examples:
  eqxevo bench --milestone all
  eqxevo bench --quick                       # the CI smoke run (a few minutes)
  eqxevo bench --only layouts --only traces
  eqxevo bench --only pallas                 # on a GPU
  eqxevo bench --milestone L0 --trace prof/  # and a jax.profiler trace
"""


class _BenchCommand(click.Command):
    """`eqxevo bench`: the parts `--only` takes are listed after the options."""

    def format_epilog(self, ctx: click.Context, formatter: Any) -> None:
        with formatter.section("Parts (--only PART)"):
            formatter.write_dl(list(PARTS.items()))


@click.command("bench", cls=_BenchCommand, context_settings=CONTEXT, help=BENCH_HELP)
@click.option(
    "--milestone",
    type=click.Choice(["L0", "L2", "L4", "all"]),
    default="all",
    show_default=True,
    help="Milestone workloads the milestones and kernels parts time.",
)
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(list(PARTS)),
    metavar="PART",
    help="Run only this part (repeatable; the parts are listed below).",
)
@click.option(
    "--quick",
    is_flag=True,
    help="CI smoke mode: small sizes; without --only, also the traces, bits, "
    "determinism and gymnax parts.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    default=Path("bench-out"),
    show_default=True,
    help="Output folder.",
)
@click.option(
    "--trace",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Also write a jax.profiler trace of the first milestone here (open it "
    "in Perfetto).",
)
@click.option(
    "--repeats",
    type=int,
    metavar="N",
    default=3,
    show_default=True,
    help="Timed repeats per figure (the median is reported).",
)
@click.option(
    "--devices",
    type=int,
    metavar="N",
    help="CPU devices of the child processes that measure sharded figures "
    "(default: one per core).",
)
def bench(
    milestone: str,
    only: tuple[str, ...],
    quick: bool,
    out: Path,
    trace: Path | None,
    repeats: int,
    devices: int | None,
) -> None:
    try:
        repeats = positive_int("--repeats", repeats)
        if devices is not None:  # not given: one per core
            devices = positive_int("--devices", devices)
    except ValueError as err:
        fail(err)
    options = Options(
        out=out,
        milestone=milestone,
        quick=quick,
        repeats=repeats,
        devices=devices or os.cpu_count() or 1,
        trace=trace,
    )
    # imported when the command runs: `eqxevo --help` never loads the harness
    from .common import machine_info
    from .report import write_report

    meta = machine_info()
    say(f"# eqxevo bench on {meta}")
    out.mkdir(parents=True, exist_ok=True)
    meta["child_devices"] = options.devices
    parts = list(only) or (QUICK_PARTS if quick else DEFAULT_PARTS)
    start = time.perf_counter()
    results: dict[str, Any] = {"machine": meta, "quick": quick}
    results |= run_parts(options, parts, meta)
    results["wall_s"] = time.perf_counter() - start
    report = write_report(results, out)
    say(f"\n{report}")
    say(f"\nwrote {out}/ in {results['wall_s']:.0f} s")
    if results.get("failed"):
        failed = ", ".join(results["failed"])
        fail(RuntimeError(f"failed parts: {failed} (tracebacks above)"))


__all__ = ["bench"]
