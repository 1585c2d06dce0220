"""Executors: where a study's programs run, in this process or as a SLURM job array
through submitit; `run_study` is `eqxevo study run`.
"""

import abc
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..interrupts import StopRequest
from .group import Program, plan
from .progress import StudyProgress
from .runner import (
    check_same_study,
    is_done,
    load_plan,
    load_study,
    run_program,
    save_plan,
)
from .spec import Study, StudyError, require


def use_compilation_cache(out: str | Path) -> None:
    """Share compiled programs between the study's processes (and re-runs) through
    JAX's persistent cache in OUT/.jax_cache, unless one is configured already."""
    import jax

    if not getattr(jax.config, "jax_compilation_cache_dir", None):
        jax.config.update("jax_compilation_cache_dir", str(Path(out) / ".jax_cache"))


class AbstractExecutor(abc.ABC):
    """Runs a study's programs (each with its unfinished runs only)."""

    @abc.abstractmethod
    def run(
        self, programs: Sequence[Program], out: Path, progress: StudyProgress
    ) -> None:
        """Run `programs` to completion, writing run directories under `out`."""


class LocalExecutor(AbstractExecutor):
    """Run programs one after another in this process.

    Arguments:
        stop: an installed `eqxevo.interrupts.StopRequest` (the CLI's): a first
            Ctrl-C/SIGTERM stops after the running chunk, every run saved.
    """

    def __init__(self, stop: StopRequest | None = None):
        self.stop = stop

    def run(
        self, programs: Sequence[Program], out: Path, progress: StudyProgress
    ) -> None:
        for program in programs:
            run_program(program, out, progress, self.stop)


class ProgramJob:
    """A submitit job: run the given runs of the study in `out` (one program).

    Pickled to the job; it rebuilds the runs from OUT/study.json.
    """

    def __init__(self, out: str | Path):
        self.out = str(out)

    def __call__(self, run_ids: list[str]) -> list[str]:
        use_compilation_cache(self.out)
        study = load_study(self.out)
        wanted = set(run_ids)
        runs = [r for r in study.runs if r.id in wanted]
        for program in plan(study, runs):
            run_program(program, self.out)
        return run_ids

    def checkpoint(self, run_ids: list[str]) -> Any:
        """Pre-emption or time limit: requeue; the runs resume from checkpoints."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, run_ids)


_ACTIVE = ("PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED")


class SubmititExecutor(AbstractExecutor):
    """One submitit job per program, submitted as one job array.

    Arguments:
        cluster: `"slurm"`, or `"local"` (submitit's local executor: real
            subprocesses on this machine; for trying the cluster path).
        parameters: submitit parameters (`timeout_min`, `slurm_partition`,
            `gpus_per_node`, ...; `[study.slurm]` gives them).
        poll: seconds between looks at the jobs' progress.
    """

    def __init__(
        self,
        cluster: str = "slurm",
        parameters: dict[str, Any] | None = None,
        poll: float = 5.0,
    ):
        if cluster not in ("slurm", "local"):
            raise ValueError(f"cluster must be 'slurm' or 'local'; got {cluster!r}")
        self.cluster = cluster
        self.parameters = dict(parameters or {})
        self.poll = poll

    def _reattach(self, folder: Path) -> tuple[list[Any], set[str]]:
        """Jobs of an earlier `study run` still queued or running (SLURM only)."""
        record = folder / "jobs.json"
        if self.cluster != "slurm" or not record.exists():
            return [], set()
        import submitit

        jobs, owned = [], set()
        for job_id, run_ids in json.loads(record.read_text()).items():
            job = submitit.SlurmJob(folder=folder / "%j", job_id=job_id)
            if job.state in _ACTIVE:
                jobs.append(job)
                owned.update(run_ids)
        return jobs, owned

    def run(
        self, programs: Sequence[Program], out: Path, progress: StudyProgress
    ) -> None:
        submitit = require("submitit", "--executor slurm")

        folder = out / "slurm"
        folder.mkdir(parents=True, exist_ok=True)
        jobs, owned = self._reattach(folder)
        batches = [
            [r.id for r in p.runs if r.id not in owned]
            for p in programs
            if any(r.id not in owned for r in p.runs)
        ]
        if batches:
            executor = submitit.AutoExecutor(folder=folder / "%j", cluster=self.cluster)
            parameters = {"name": f"eqxevo-{out.name}", **self.parameters}
            if self.cluster == "local":
                # submitit's local jobs time out after 5 minutes unless told
                parameters = {"timeout_min": 24 * 60} | {
                    k: v for k, v in parameters.items() if not k.startswith("slurm_")
                }
            executor.update_parameters(**parameters)
            submitted = executor.map_array(ProgramJob(out), batches)
            record = folder / "jobs.json"
            known = json.loads(record.read_text()) if record.exists() else {}
            known.update(
                {job.job_id: ids for job, ids in zip(submitted, batches, strict=True)}
            )
            record.write_text(json.dumps(known, indent=2) + "\n")
            jobs += submitted
        study = load_study(out)
        while not all(job.done() for job in jobs):
            time.sleep(self.poll)
            _track(study, out, progress)
        _track(study, out, progress)
        failed = []
        for job in jobs:
            try:
                job.result()
            except Exception as err:  # submitit re-raises the job's error
                failed.append(f"job {job.job_id}: {err}")
        if failed:
            raise StudyError(
                "jobs failed (run `eqxevo study run` again to continue):\n"
                + "\n".join(failed)
            )


def _track(study: Study, out: Path, progress: StudyProgress) -> None:
    from .status import progress_of

    done, reached = progress_of(study, out)
    progress.advance(reached - progress.reached)
    if done > progress.done:
        progress.finished(done - progress.done)


def run_study(
    study: Study,
    out: str | Path,
    executor: AbstractExecutor | None = None,
    *,
    quiet: bool = False,
    stream: Any = None,
) -> dict[str, Any]:
    """Run every unfinished run of the study; returns `status(out)`.

    Raises:
        StudyError: a run fails to build, or its directory holds another
            experiment (before anything runs).
        KeyboardInterrupt: after saving every running run's last chunk.
    """
    from .status import status

    out = Path(out)
    check_same_study(out, study)
    runs = study.runs
    pending = {r.id for r in runs if not is_done(out, r)}
    if not pending and load_plan(out):
        return status(out)
    programs = plan(study)
    save_plan(out, study, programs)
    todo = [
        Program(p.index, tuple(m for m in p.members if m.run.id in pending))
        for p in programs
        if any(m.run.id in pending for m in p.members)
    ]
    from .status import progress_of

    done, reached = progress_of(study, out)
    total = sum(r.experiment.run.generations for r in runs)
    with StudyProgress(
        len(runs), done, total, reached, quiet=quiet, stream=stream
    ) as progress:
        (executor or LocalExecutor()).run(todo, out, progress)
    return status(out)


__all__ = [
    "AbstractExecutor",
    "LocalExecutor",
    "ProgramJob",
    "SubmititExecutor",
    "run_study",
    "use_compilation_cache",
]
