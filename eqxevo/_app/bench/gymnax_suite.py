"""The gymnax suite: eqxevo against evosax's `GymnaxProblem` on held-out return.

`eqxevo bench --only gymnax`, or `python -m eqxevo._app.bench.gymnax_suite --help`;
the rules both sides share: docs/performance.md, "How the harness measures"."""

import json
import math
import os
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
import jax
import numpy as np

from eqxevo._src._checks import positive_int

from .._cli import CONTEXT, fail
from .gymnax_sides import Case, sides
from .gymnax_task import QUICK_TASKS, TASKS, Task, heldout_returns

ALGORITHMS = ("snes", "pgpe", "open_es", "cma_es")
"""Presets compared (strategies/*.toml)."""


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q25, q50, q75 = np.percentile(np.asarray(values, np.float64), [25, 50, 75])
    return float(q25), float(q50), float(q75)


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value of `a` against `b` (NaN if undefined)."""
    from scipy.stats import mannwhitneyu

    if len(a) == 0 or len(b) == 0:
        return math.nan
    if np.ptp(np.concatenate([np.asarray(a), np.asarray(b)])) == 0:
        return 1.0  # every value equal: no evidence of a difference
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def time_to_target(run: Case, returns: Sequence[float], target: float) -> float:
    """Wall seconds to the first kept mean whose held-out return >= target (inf if
    none)."""
    for seconds, value in zip(run.seconds, returns, strict=True):
        if value >= target:
            return seconds
    return math.inf


def compare(
    task: Task,
    algorithm: str,
    seeds: int,
    *,
    generations: int | None = None,
    sharded: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Both sides of one task and algorithm over `seeds` seeds; one record.

    Seeds alternate between the sides (eqxevo seed 0, evosax seed 0, ...) so a
    change in the machine's load falls on both.
    """
    generations = task.generations if generations is None else generations
    compared = sides(task, algorithm, sharded=sharded)
    compile_s = {name: side.compile() for name, side in compared.items()}
    runs: dict[str, list[Case]] = {name: [] for name in compared}
    for seed in range(seeds):
        for name, side in compared.items():
            runs[name].append(side.run(seed, generations))
    record: dict[str, Any] = {
        "env": task.env,
        "algorithm": algorithm,
        "population_size": task.population_size,
        "episodes": task.episodes,
        "generations": generations,
        "seeds": seeds,
        "target": task.target,
        "devices": jax.device_count() if "eqxevo_sharded" in compared else 1,
    }
    finals: dict[str, list[float]] = {}
    for name in compared:
        figures, finals[name] = _side_figures(
            name, task, runs[name], compile_s[name], generations
        )
        record |= figures
    record["p_value"] = mann_whitney(finals["eqxevo"], finals["evosax"])
    record["evosax_over_eqxevo_total"] = record["evosax_total_s"] / max(
        record["eqxevo_total_s"], 1e-9
    )
    record["evosax_over_eqxevo_generation"] = record["evosax_generation_s"] / max(
        record["eqxevo_generation_s"], 1e-9
    )
    log(_summary_line(record))
    return record


def _side_figures(
    name: str, task: Task, runs: list[Case], compile_s: float, generations: int
) -> tuple[dict[str, Any], list[float]]:
    """One side's columns of the record (prefixed `name_`), and each seed's final
    held-out return."""
    # every kept mean of every seed, scored in one batch, then split back per seed
    means = [m for run in runs for m in run.means]
    scores = heldout_returns(task, means).tolist()
    per_run, at = [], 0
    for run in runs:
        per_run.append(scores[at : at + len(run.means)])
        at += len(run.means)
    finals = [r[-1] for r in per_run]
    q25, q50, q75 = _quartiles(finals)
    times = [
        time_to_target(run, r, task.target)
        for run, r in zip(runs, per_run, strict=True)
    ]
    reached = [t for t in times if math.isfinite(t)]
    walls = [run.wall_s for run in runs]
    cpus = [run.cpu_s for run in runs]
    figures = {
        f"{name}_median": q50,
        f"{name}_q25": q25,
        f"{name}_q75": q75,
        f"{name}_returns": [round(x, 2) for x in finals],
        f"{name}_reached": len(reached),
        # not reached counts as infinitely late
        f"{name}_time_to_target_s": statistics.median(times),
        f"{name}_compile_s": compile_s,
        f"{name}_generation_s": statistics.median(walls) / generations,
        f"{name}_generation_cpu_s": statistics.median(cpus) / generations,
        f"{name}_total_s": compile_s + sum(walls),
        # the median over seeds of the held-out return after each chunk
        f"{name}_curve": [
            round(float(np.median([r[i] for r in per_run])), 2)
            for i in range(min(len(r) for r in per_run))
        ],
    }
    return figures, finals


def _summary_line(r: dict[str, Any]) -> str:
    """One comparison in a line of progress output."""
    seeds = r["seeds"]
    return (
        f"  {r['env']} {r['algorithm']}: held-out median eqxevo "
        f"{r['eqxevo_median']:.1f} [{r['eqxevo_q25']:.1f}, "
        f"{r['eqxevo_q75']:.1f}] vs evosax {r['evosax_median']:.1f} "
        f"[{r['evosax_q25']:.1f}, {r['evosax_q75']:.1f}] "
        f"(p={r['p_value']:.2g}); reached {r['eqxevo_reached']}/{seeds} vs "
        f"{r['evosax_reached']}/{seeds}; per generation "
        f"{r['eqxevo_generation_s'] * 1e3:.1f} vs "
        f"{r['evosax_generation_s'] * 1e3:.1f} ms; total "
        f"{r['eqxevo_total_s']:.1f} vs {r['evosax_total_s']:.1f} s"
    )


def single_threaded_lapack() -> None:
    """Ask scipy's OpenBLAS (behind jaxlib's CPU `eigh`, which CMA-ES calls every
    generation) for one thread, unless the user chose a count.

    Effective only before the first linear-algebra call loads it. On a busy
    2-core machine its default threads spin against each other and everything
    else: `eigh` of a 1217 x 1217 matrix took 9.2 s of wall time with them and
    1.2 s with one (1.9 s and 0.17 s of CPU time).
    """
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def gymnax_comparison(
    *,
    quick: bool = False,
    seeds: int | None = None,
    envs: Sequence[str] | None = None,
    algorithms: Sequence[str] | None = None,
    generations: int | None = None,
    sharded: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every (task, algorithm) of the suite; one record each (see `compare`)."""
    tasks = QUICK_TASKS if quick else TASKS
    names = list(tasks) if envs is None else list(envs)
    unknown = sorted(set(names) - set(tasks))
    if unknown:
        raise ValueError(f"envs: {unknown} are not in the suite; it has {list(tasks)}")
    algorithms = (
        (("snes",) if quick else ALGORITHMS) if algorithms is None else algorithms
    )
    seeds = (2 if quick else 5) if seeds is None else seeds
    records = []
    for name in names:
        for algorithm in algorithms:
            log(f"gymnax {name} {algorithm}...")
            records.append(
                compare(
                    tasks[name],
                    algorithm,
                    seeds,
                    generations=generations,
                    sharded=sharded,
                    log=log,
                )
            )
    return records


def _cell(record: dict[str, Any], side: str) -> str:
    return (
        f"{record[f'{side}_median']:.1f} [{record[f'{side}_q25']:.1f}, "
        f"{record[f'{side}_q75']:.1f}]"
    )


def _seconds(value: float, reached: int, seeds: int) -> str:
    text = "not reached" if not math.isfinite(value) else f"{value:.1f}"
    return f"{text} ({reached}/{seeds})"


def markdown(records: Sequence[dict[str, Any]]) -> str:
    """The doc table: held-out median [IQR], p, time to target, per generation.

    Times are wall seconds (to target: median over seeds, programs compiled;
    per generation: median over seeds, with this process's CPU time in
    parentheses). `eqxevo_sharded` columns appear when a record has them.
    """
    sharded = any("eqxevo_sharded_median" in r for r in records)
    sides = ("eqxevo", "evosax", *(("eqxevo_sharded",) if sharded else ()))
    label = {
        "eqxevo": "eqxevo",
        "evosax": "evosax",
        "eqxevo_sharded": "eqxevo, all cores",
    }
    head = ["env", "algorithm", "eqxevo held-out", "evosax held-out", "p (MWU)"]
    head += [f"to target, {label[s]} (s)" for s in sides]
    head += [f"per gen., {label[s]} (ms)" for s in sides]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        cells = [
            r["env"],
            r["algorithm"],
            _cell(r, "eqxevo"),
            _cell(r, "evosax"),
            f"{r['p_value']:.2g}",
        ]
        for side in sides:
            if f"{side}_median" not in r:
                cells.append("")
                continue
            cells.append(
                _seconds(
                    r[f"{side}_time_to_target_s"], r[f"{side}_reached"], r["seeds"]
                )
            )
        for side in sides:
            if f"{side}_median" not in r:
                cells.append("")
                continue
            cells.append(
                f"{r[f'{side}_generation_s'] * 1e3:.1f} "
                f"({r[f'{side}_generation_cpu_s'] * 1e3:.1f})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@click.command("gymnax_suite", context_settings=CONTEXT)
@click.option(
    "--env",
    "envs",
    multiple=True,
    metavar="NAME",
    help=f"Task to run (repeatable; default: all): {', '.join(TASKS)}.",
)
@click.option(
    "--algorithm",
    "algorithms",
    multiple=True,
    metavar="PRESET",
    help=f"Preset to run (repeatable; default: {', '.join(ALGORITHMS)}).",
)
@click.option(
    "--seeds", type=int, metavar="N", help="Seeds per side (default 5; quick 2)."
)
@click.option(
    "--generations", type=int, metavar="N", help="Generations (default: the task's)."
)
@click.option("--quick", is_flag=True, help="CI sizes: two small tasks, snes only.")
@click.option(
    "--devices",
    type=int,
    metavar="N",
    default=1,
    show_default=True,
    help="CPU devices to expose; with more than one, eqxevo also runs on all.",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the records as JSON to this file.",
)
def main(
    envs: tuple[str, ...],
    algorithms: tuple[str, ...],
    seeds: int | None,
    generations: int | None,
    quick: bool,
    devices: int,
    out: Path | None,
) -> None:
    """eqxevo against evosax's GymnaxProblem on four gymnax tasks.

    Prints the table of docs/environments.md: held-out return (median [IQR] over
    seeds), Mann-Whitney p, wall time to target and per generation. The rules
    both sides share: docs/performance.md, "How the harness measures".

    \b
    Examples:
      python -m eqxevo._app.bench.gymnax_suite --env Pendulum-v1 --algorithm snes
      python -m eqxevo._app.bench.gymnax_suite --quick      # the CI size
    """
    try:
        # left out, --seeds and --generations stay None: the suite's defaults
        if seeds is not None:
            seeds = positive_int("--seeds", seeds)
        if generations is not None:
            generations = positive_int("--generations", generations)
        devices = positive_int("--devices", devices)
    except ValueError as err:
        fail(err)
    single_threaded_lapack()
    # Before JAX starts its backends (nothing above has run a JAX operation).
    jax.config.update("jax_num_cpu_devices", devices)
    try:
        records = gymnax_comparison(
            sharded=devices > 1,
            quick=quick,
            seeds=seeds,
            envs=list(envs) or None,
            algorithms=list(algorithms) or None,
            generations=generations,
        )
    except ValueError as err:  # a task or preset the suite does not know
        fail(err)
    click.echo(markdown(records))
    if out is not None:
        out.write_text(json.dumps(records, indent=1, default=str))


__all__ = [
    "ALGORITHMS",
    "compare",
    "gymnax_comparison",
    "mann_whitney",
    "markdown",
    "single_threaded_lapack",
    "time_to_target",
]


if __name__ == "__main__":
    main(prog_name="python -m eqxevo._app.bench.gymnax_suite")
