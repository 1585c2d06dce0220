"""The SLURM executor's rule for jobs of an earlier `study run`: live unless Slurm
says they ended, never resubmitted while that is unknown.

sacct and squeue are shell scripts on PATH, run as real processes.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import submitit
from study_fixtures import write_study

from eqxevo._app.study.executor import (
    FINAL_STATES,
    live_jobs,
    sacct_states,
    squeue_states,
)
from eqxevo._app.study.spec import StudyError
from eqxevo.study import SubmititExecutor, load, plan, run_study

CLI = [sys.executable, "-c", "from eqxevo._app.cli import main; main()"]


class FakeSlurm:
    """sacct and squeue as scripts in `bin`, each printing what it is told to and
    logging its arguments to bin/calls."""

    def __init__(self, bin: Path):
        self.bin = bin

    def tool(self, name: str, out: str = "", rc: int = 0, err: str = "") -> None:
        (self.bin / f"{name}.out").write_text(out)
        (self.bin / f"{name}.err").write_text(err)
        self._script(
            name,
            f'cat "{self.bin}/{name}.out"\ncat "{self.bin}/{name}.err" >&2\nexit {rc}',
        )

    def hang(self, name: str) -> None:
        self._script(name, "exec sleep 30")  # exec: the timeout kills the sleep

    def calls(self) -> list[str]:
        path = self.bin / "calls"
        return path.read_text().splitlines() if path.exists() else []

    def _script(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.bin}/calls"\n{body}\n')
        path.chmod(0o755)


@pytest.fixture
def slurm(tmp_path, monkeypatch) -> FakeSlurm:
    bin = tmp_path / "bin"
    bin.mkdir()
    monkeypatch.setenv("PATH", f"{bin}{os.pathsep}/usr/bin{os.pathsep}/bin")
    assert shutil.which("sacct") is None and shutil.which("squeue") is None
    return FakeSlurm(bin)


def sacct_lines(*rows: str) -> str:
    return "".join(f"{row}\n" for row in rows)


@pytest.mark.parametrize(
    "state",
    [
        "PENDING",
        "RUNNING",
        "REQUEUED",
        "REQUEUE_HOLD",
        "SUSPENDED",
        "STOPPED",
        "PREEMPTED",
        "COMPLETING",
        "CONFIGURING",
        "SPECIAL_EXIT",
        "RESIZING",
        "SOME_STATE_OF_A_NEWER_SLURM",
    ],
)
def test_a_job_sacct_shows_in_a_state_not_final_is_live(slurm, state):
    slurm.tool("sacct", sacct_lines(f"123_0|{state}", "123_0.batch|COMPLETED"))
    slurm.tool("squeue", rc=1)  # not asked: sacct's state decides
    assert live_jobs(["123_0"]) == {"123_0"}
    assert slurm.calls() == ["sacct --noheader --parsable2 --format=JobID,State -j 123"]


@pytest.mark.parametrize(
    "state",
    [
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "CANCELLED by 1000",
        "TIMEOUT",
        "OUT_OF_MEMORY",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
    ],
)
def test_a_job_sacct_shows_in_a_final_state_is_over(slurm, state):
    assert state.split()[0] in FINAL_STATES
    slurm.tool("sacct", sacct_lines(f"123_0|{state}"))
    slurm.tool("squeue", rc=1)
    assert live_jobs(["123_0"]) == set()


def test_sacct_ranges_of_array_tasks_and_steps_are_read_per_task(slurm):
    slurm.tool(
        "sacct",
        sacct_lines(
            "123_0|COMPLETED",
            "123_0.batch|COMPLETED",
            "123_1|RUNNING",
            "123_1.0|CANCELLED",  # a step ended; the task runs on
            "123_[2-3,5%2]|PENDING",
            "124_0|FAILED",
        ),
    )
    slurm.tool("squeue", rc=1)
    ids = ["123_0", "123_1", "123_2", "123_3", "123_5", "124_0"]
    assert live_jobs(ids) == {"123_1", "123_2", "123_3", "123_5"}
    assert slurm.calls() == [
        "sacct --noheader --parsable2 --format=JobID,State -j 123,124"
    ]


@pytest.mark.parametrize(
    "squeue, live",
    [
        ("123_0 RUNNING\n", {"123_0"}),
        ("123_0 PENDING\n", {"123_0"}),
        ("123_0 COMPLETED\n", set()),  # finished a moment ago, still in squeue
        ("", set()),  # the controller no longer holds it
    ],
)
def test_a_job_sacct_shows_unknown_is_decided_by_squeue(slurm, squeue, live):
    slurm.tool("sacct", sacct_lines("123_0|UNKNOWN"))
    slurm.tool("squeue", squeue)
    assert live_jobs(["123_0"]) == live
    assert slurm.calls()[1] == "squeue --noheader --array --format=%i %T -j 123"


@pytest.mark.parametrize(
    "sacct", ["fails", "answers nothing", "is missing", "lists another job"]
)
def test_without_an_answer_from_sacct_squeue_decides(slurm, sacct):
    if sacct == "fails":
        slurm.tool("sacct", rc=1, err="sacct: error: Problem talking to the database")
    elif sacct == "answers nothing":
        slurm.tool("sacct")
    elif sacct == "lists another job":
        slurm.tool("sacct", sacct_lines("123_1|COMPLETED"))
    slurm.tool("squeue", "123_0 RUNNING\n123_7 PENDING\n")
    assert live_jobs(["123_0", "123_1", "123_2"]) == {"123_0"}


def test_a_hanging_sacct_or_squeue_gives_no_answer(slurm):
    slurm.hang("sacct")
    slurm.hang("squeue")
    assert sacct_states(["123_0"], timeout=0.3) is None
    assert squeue_states(["123_0"], timeout=0.3) is None


def test_squeue_refusing_a_forgotten_job_id_means_over(slurm):
    # squeue --jobs with one id the controller has forgotten exits 1.
    slurm.tool("sacct", rc=1)
    slurm.tool("squeue", rc=1, err="slurm_load_jobs error: Invalid job id specified\n")
    assert live_jobs(["123_0"]) == set()


@pytest.mark.parametrize("squeue", ["fails", "is missing"])
def test_without_an_answer_from_sacct_or_squeue_nothing_is_decided(slurm, squeue):
    slurm.tool("sacct", rc=1)
    if squeue == "fails":
        slurm.tool("squeue", "123_1 RUNNING\n", rc=1)
    message = (
        "sacct and squeue gave no answer for SLURM jobs 123_0, 123_1, so their "
        "runs may still be running; run `eqxevo study run` again when Slurm "
        "answers, or add --force-resubmit (once you know they have ended) to "
        "submit their runs again"
    )
    with pytest.raises(StudyError) as caught:
        live_jobs(["123_1", "123_0"])
    assert str(caught.value) == message
    assert live_jobs(["123_0", "123_1"], force_resubmit=True) == set()


def test_only_the_unanswered_jobs_need_an_answer(slurm):
    slurm.tool("sacct", sacct_lines("123_0|RUNNING", "123_1|COMPLETED"))
    slurm.tool("squeue", rc=1)
    assert live_jobs(["123_0", "123_1"]) == {"123_0"}
    with pytest.raises(StudyError, match=r"for SLURM jobs 123_2, so their runs"):
        live_jobs(["123_0", "123_1", "123_2"])


class Submitted:
    """What the fake submitit saw: the batches of run ids submitted."""

    def __init__(self):
        self.batches: list[list[str]] = []


class FakeJob:
    """A submitit job that is over at once and did its work."""

    def __init__(self, folder: object = None, job_id: str = ""):
        del folder
        self.job_id = job_id

    def done(self) -> bool:
        return True

    def result(self) -> None:
        return None


@pytest.fixture
def submitted(monkeypatch) -> Submitted:
    record = Submitted()

    class FakeExecutor:
        def __init__(self, folder: object, cluster: str):
            assert cluster == "slurm"

        def update_parameters(self, **parameters: object) -> None:
            pass

        def map_array(self, fn: object, batches: list[list[str]]) -> list[FakeJob]:
            record.batches += batches
            return [FakeJob(job_id=f"900_{i}") for i in range(len(batches))]

    monkeypatch.setattr(submitit, "AutoExecutor", FakeExecutor)
    monkeypatch.setattr(submitit, "SlurmJob", FakeJob)  # reattached jobs
    return record


@pytest.fixture
def study_out(tmp_path):
    """The tiny study (2 programs) and its OUT, whose slurm/jobs.json says an
    earlier `study run` submitted job 555_0 for program 0, 555_1 for program 1."""
    file = write_study(tmp_path)
    study = load(file)
    out = tmp_path / "out"
    (out / "slurm").mkdir(parents=True)
    programs = [[r.id for r in p.runs] for p in plan(study)]
    jobs = {"555_0": programs[0], "555_1": programs[1]}
    (out / "slurm" / "jobs.json").write_text(json.dumps(jobs, indent=2) + "\n")
    return file, study, out, programs


def test_a_live_jobs_runs_are_not_resubmitted_and_an_ended_jobs_are(
    slurm, submitted, study_out
):
    _, study, out, programs = study_out
    slurm.tool("sacct", sacct_lines("555_0|RUNNING", "555_1|FAILED"))
    slurm.tool("squeue", rc=1)
    run_study(study, out, SubmititExecutor("slurm", poll=0.01), quiet=True)
    assert submitted.batches == [programs[1]]
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())
    assert jobs == {"555_0": programs[0], "555_1": programs[1], "900_0": programs[1]}
    assert sorted(p.name for p in (out / "slurm").iterdir()) == ["jobs.json"]


def test_unanswered_jobs_stop_the_run_before_anything_is_submitted(
    slurm, submitted, study_out
):
    _, study, out, _ = study_out
    slurm.tool("sacct", rc=1)
    slurm.tool("squeue", rc=1)
    before = (out / "slurm" / "jobs.json").read_bytes()
    with pytest.raises(StudyError) as caught:
        run_study(study, out, SubmititExecutor("slurm", poll=0.01), quiet=True)
    assert str(caught.value).startswith(
        "sacct and squeue gave no answer for SLURM jobs 555_0, 555_1, so their runs"
    )
    assert "\n" not in str(caught.value)
    assert submitted.batches == []
    assert (out / "slurm" / "jobs.json").read_bytes() == before
    assert not (out / "runs").exists()


def test_force_resubmit_submits_the_runs_of_unanswered_jobs_again(
    slurm, submitted, study_out
):
    _, study, out, programs = study_out
    slurm.tool("sacct", rc=1)
    slurm.tool("squeue", rc=1)
    executor = SubmititExecutor("slurm", poll=0.01, force_resubmit=True)
    run_study(study, out, executor, quiet=True)
    assert submitted.batches == programs
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())
    assert list(jobs) == ["555_0", "555_1", "900_0", "900_1"]


def test_study_run_refuses_in_one_line_when_slurm_gives_no_answer(slurm, study_out):
    file, _, out, _ = study_out
    slurm.tool("sacct", rc=1, err="sacct: error: slurmdbd: Connection refused\n")
    slurm.tool("squeue", rc=1, err="slurm_load_jobs error: Socket timed out\n")
    before = (out / "slurm" / "jobs.json").read_bytes()
    done = subprocess.run(
        [*CLI, "study", "run", str(file), "--out", str(out), "--executor", "slurm"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    # the progress display's lines ("runs 0/8  generations 0/48 ..."), then one line
    lines = [x for x in done.stderr.splitlines() if not x.startswith("runs 0/8 ")]
    assert lines == [
        "Error: sacct and squeue gave no answer for SLURM jobs 555_0, 555_1, so "
        "their runs may still be running; run `eqxevo study run` again when Slurm "
        "answers, or add --force-resubmit (once you know they have ended) to "
        "submit their runs again"
    ]
    assert (out / "slurm" / "jobs.json").read_bytes() == before
    assert sorted(p.name for p in (out / "slurm").iterdir()) == ["jobs.json"]
    assert not (out / "runs").exists()
