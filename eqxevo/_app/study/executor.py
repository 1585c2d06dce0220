"""Executors: where a study's programs run, in this process or as a SLURM job array
through submitit; `run_study` is `eqxevo study run`.
"""

import abc
import json
import subprocess
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import jax
from jax.sharding import Mesh

from eqxevo._src.sharding import device_mesh

from ..experiment.rundir import write_atomic
from ..interrupts import StopRequest
from ..lock import WriterLock
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
from .status import progress_of, status


def use_compilation_cache(out: str | Path) -> None:
    """Share compiled programs between the study's processes (and re-runs) through
    JAX's persistent cache in OUT/.jax_cache, unless one is configured already."""
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
        stop: an installed `eqxevo._app.interrupts.StopRequest` (the CLI's): a first
            Ctrl-C/SIGTERM stops after the running chunk, every run saved.
        mesh: split every run's population over these devices
            (`eqxevo._src.sharding.device_mesh`, `--devices`); None: one device.
    """

    def __init__(self, stop: StopRequest | None = None, mesh: Mesh | None = None):
        self.stop = stop
        self.mesh = mesh

    def run(
        self, programs: Sequence[Program], out: Path, progress: StudyProgress
    ) -> None:
        for program in programs:
            run_program(program, out, progress, self.stop, self.mesh)


class ProgramJob:
    """A submitit job: run the given runs of the study in `out` (one program).

    Pickled to the job; it rebuilds the runs from OUT/study.json and splits
    each population over `devices` of the job's devices (`device_mesh`).
    """

    def __init__(self, out: str | Path, devices: int = 1):
        self.out = str(out)
        self.devices = devices

    def __call__(self, run_ids: list[str]) -> list[str]:
        mesh = device_mesh(self.devices)  # before JAX starts: CPU cores as devices
        use_compilation_cache(self.out)
        study = load_study(self.out)
        wanted = set(run_ids)
        runs = [r for r in study.runs if r.id in wanted]
        for program in plan(study, runs):
            run_program(program, self.out, mesh=mesh)
        return run_ids

    def checkpoint(self, run_ids: list[str]) -> Any:
        """Pre-emption or time limit: requeue; the runs resume from checkpoints."""
        import submitit

        return submitit.helpers.DelayedSubmission(self, run_ids)


# Slurm's final job states (sacct(1), JOB STATE CODES): the job's processes are
# gone and it will not run again. Every other state may still write its runs:
# PENDING, RUNNING, SUSPENDED, STOPPED, COMPLETING, REQUEUED, REQUEUE_HOLD, ...,
# PREEMPTED (a requeued job passes through it), SPECIAL_EXIT (requeued, held),
# REVOKED (running on a federation sibling), UNKNOWN, and any state newer than this.
FINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",  # also "CANCELLED by <uid>"
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "TIMEOUT",
    }
)


def _query(timeout: float, *command: str) -> subprocess.CompletedProcess[str] | None:
    """`command` run to its end; None when it is missing or runs past `timeout`."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _states(lines: str, sep: str) -> dict[str, str]:
    """{job id: state} from lines `ID<sep>STATE`, ranges of array tasks such as
    `12_[3-5,7%2]` expanded, job steps (`12_3.batch`) and unreadable lines skipped."""
    states = {}
    for line in lines.splitlines():
        job, _, state = line.strip().partition(sep)
        words = state.split()
        if not job or "." in job or not words:
            continue
        state = words[0].rstrip("+")  # "CANCELLED by 1234"; "+": a cut-off name
        main, _, index = job.partition("_")
        try:
            if not index.startswith("["):
                states[job] = state
                continue
            for part in index.strip("[]").split("%")[0].split(","):
                low, _, high = part.partition("-")
                for task in range(int(low), int(high or low) + 1):
                    states[f"{main}_{task}"] = state
        except ValueError:
            continue
    return states


def _jobs_arg(job_ids: Collection[str]) -> str:
    # One id per job array: sacct and squeue then list all of its tasks.
    return ",".join(sorted({j.split("_")[0] for j in job_ids}))


def sacct_states(
    job_ids: Collection[str], timeout: float = 60.0
) -> dict[str, str] | None:
    """The state sacct gives each of `job_ids` it knows; None when it gives no
    answer (missing, hanging, failing: accounting or slurmdbd down)."""
    jobs = _jobs_arg(job_ids)
    done = _query(
        timeout,
        "sacct",
        "--noheader",
        "--parsable2",
        "--format=JobID,State",
        "-j",
        jobs,
    )
    if done is None or done.returncode != 0:
        return None
    return _states(done.stdout, "|")


def squeue_states(
    job_ids: Collection[str], timeout: float = 60.0
) -> dict[str, str] | None:
    """The state squeue gives each of `job_ids` the controller still holds; None
    when it gives no answer."""
    jobs = _jobs_arg(job_ids)
    done = _query(
        timeout, "squeue", "--noheader", "--array", "--format=%i %T", "-j", jobs
    )
    if done is None:
        return None
    # squeue --jobs with a single id the controller has forgotten fails so.
    if done.returncode != 0 and "Invalid job id" in done.stderr:
        return {}
    return _states(done.stdout, " ") if done.returncode == 0 else None


def live_jobs(job_ids: Collection[str], *, force_resubmit: bool = False) -> set[str]:
    """The SLURM jobs among `job_ids` that may still be writing their runs.

    sacct decides: a job is over only in one of `FINAL_STATES`. A job sacct gives
    no state for, or UNKNOWN, squeue decides: live while it lists the job in a
    state not final, over when it does not list it.

    Raises:
        StudyError: neither sacct nor squeue answers for some job, unless
            `force_resubmit` (then such jobs count as over).
    """
    known = sacct_states(job_ids) if job_ids else {}
    states = {j: s for j, s in (known or {}).items() if j in job_ids}
    unsure = sorted(j for j in job_ids if states.get(j, "UNKNOWN") == "UNKNOWN")
    if unsure:
        queued = squeue_states(unsure)
        if queued is None and not force_resubmit:
            more = len(unsure) - 5
            shown = ", ".join(unsure[:5]) + (f" and {more} more" if more > 0 else "")
            raise StudyError(
                f"sacct and squeue gave no answer for SLURM jobs {shown}, so their "
                "runs may still be running; run `eqxevo study run` again when Slurm "
                "answers, or add --force-resubmit (once you know they have ended) "
                "to submit their runs again"
            )
        states.update({j: (queued or {}).get(j, "COMPLETED") for j in unsure})
    return {j for j in job_ids if states[j] not in FINAL_STATES}


class SubmititExecutor(AbstractExecutor):
    """One submitit job per program, submitted as one job array.

    Arguments:
        cluster: `"slurm"`, or `"local"` (submitit's local executor: real
            subprocesses on this machine; for trying the cluster path).
        parameters: submitit parameters (`timeout_min`, `slurm_partition`,
            `gpus_per_node`, ...; `[study.slurm]` gives them).
        poll: seconds between looks at the jobs' progress.
        force_resubmit: submit again the runs of earlier jobs whose state neither
            sacct nor squeue gives (`live_jobs`), instead of raising.
        devices: each job splits every population over this many of its
            devices (`--devices`; request them with `[study.slurm]`).
    """

    def __init__(
        self,
        cluster: str = "slurm",
        parameters: dict[str, Any] | None = None,
        poll: float = 5.0,
        *,
        force_resubmit: bool = False,
        devices: int = 1,
    ):
        if cluster not in ("slurm", "local"):
            raise ValueError(f"cluster must be 'slurm' or 'local'; got {cluster!r}")
        self.cluster = cluster
        self.parameters = dict(parameters or {})
        self.poll = poll
        self.force_resubmit = force_resubmit
        self.devices = devices

    def _reattach(self, folder: Path) -> tuple[list[Any], set[str]]:
        """Jobs of an earlier `study run` that may still run, and their runs
        (SLURM only; `live_jobs` decides)."""
        record = folder / "jobs.json"
        if self.cluster != "slurm" or not record.exists():
            return [], set()
        import submitit

        known: dict[str, list[str]] = json.loads(record.read_text())
        live = sorted(live_jobs(known, force_resubmit=self.force_resubmit))
        jobs = [submitit.SlurmJob(folder=folder / "%j", job_id=j) for j in live]
        return jobs, {run_id for j in live for run_id in known[j]}

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
            submitted = executor.map_array(ProgramJob(out, self.devices), batches)
            record = folder / "jobs.json"
            known = json.loads(record.read_text()) if record.exists() else {}
            known.update(
                {job.job_id: ids for job, ids in zip(submitted, batches, strict=True)}
            )
            write_atomic(record, json.dumps(known, indent=2) + "\n")
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
    compilation_cache: bool = False,
) -> dict[str, Any]:
    """Run every unfinished run of the study; returns `status(out)`.

    Every run is built before OUT is written; then this process is the study
    folder's one writer (`eqxevo._app.lock`) until it returns.

    Arguments:
        compilation_cache: share compiled programs through OUT/.jax_cache
            (`use_compilation_cache`; the CLI's choice).

    Raises:
        StudyError: a run fails to build, or its directory holds another
            experiment (before anything runs).
        LockedError: another live process runs the study in OUT.
        KeyboardInterrupt: after saving every running run's last chunk.
    """
    out = Path(out)
    check_same_study(out, study)
    runs = study.runs
    pending = {r.id for r in runs if not is_done(out, r)}
    if not pending and load_plan(out):
        return status(out)
    programs = plan(study)
    out.mkdir(parents=True, exist_ok=True)
    with WriterLock(out, "study folder"):
        if compilation_cache:
            use_compilation_cache(out)
        save_plan(out, study, programs)
        todo = [
            Program(p.index, tuple(m for m in p.members if m.run.id in pending))
            for p in programs
            if any(m.run.id in pending for m in p.members)
        ]
        done, reached = progress_of(study, out)
        total = sum(r.experiment.run.generations for r in runs)
        with StudyProgress(
            len(runs), done, total, reached, quiet=quiet, stream=stream
        ) as progress:
            (executor or LocalExecutor()).run(todo, out, progress)
    return status(out)


__all__ = [
    "FINAL_STATES",
    "AbstractExecutor",
    "LocalExecutor",
    "ProgramJob",
    "SubmititExecutor",
    "live_jobs",
    "run_study",
    "sacct_states",
    "squeue_states",
    "use_compilation_cache",
]
