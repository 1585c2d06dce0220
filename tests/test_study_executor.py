import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from study_fixtures import TINY, finished_study, write_study  # noqa: F401

from eqxevo._app.study.report import cells_table
from eqxevo._app.study.runner import load_plan, run_dir
from eqxevo.study import SubmititExecutor, load, run_study


@pytest.mark.slow
def test_the_submitit_local_executor_runs_a_two_group_study(tmp_path, finished_study):  # noqa: F811
    # Two cells whose networks differ in shape: two programs, so two jobs of
    # one job array, each a real subprocess (submitit's local executor).
    study = load(
        write_study(
            tmp_path,
            TINY.replace("[0.05, 0.3]", "[0.05]").replace("seeds = 2", "seeds = [1]"),
        )
    )
    out = tmp_path / "out"
    result = run_study(study, out, SubmititExecutor("local", poll=0.2), quiet=True)
    assert result["done"] == result["runs"] == 2
    assert result["programs"] == 2 == len(load_plan(out)["programs"])
    jobs = json.loads((out / "slurm" / "jobs.json").read_text())
    assert sorted(map(len, jobs.values())) == [1, 1]  # one job per program
    for job_id in jobs:  # each with its logs
        assert (out / "slurm" / job_id / f"{job_id}_0_log.out").exists()
    # the jobs' runs equal the same runs of the (in-process, grouped) tiny study
    for run in study.runs:
        mine = (run_dir(out, run) / "metrics.jsonl").read_text()
        theirs = (run_dir(finished_study.out, run) / "metrics.jsonl").read_text()
        assert mine == theirs and len(mine.splitlines()) == 6


def _preempt_once_running(out: Path, records: int) -> threading.Thread:
    """A thread that sends the study's job in `out` SLURM's pre-emption signal
    (submitit's SIGUSR2: checkpoint and requeue) once its run has written
    `records` records; submitit's local controller then requeues the job."""

    def jobs() -> list[int]:
        found = []
        for proc in Path("/proc").iterdir():
            try:
                command = (proc / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if "submitit.core._submit" in command and str(out) in command:
                found.append(int(proc.name))
        return found

    def watch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            written = [p.read_text() for p in out.glob("runs/*/*/metrics.jsonl")]
            if any(len(text.splitlines()) >= records for text in written) and jobs():
                os.kill(jobs()[0], signal.SIGUSR2)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_a_preempted_and_requeued_job_keeps_every_total(tmp_path):
    # A real requeue: the job gets SIGUSR2 mid-run, submitit calls
    # `ProgramJob.checkpoint` and requeues it, its run resumes in a new process.
    # Long lifetimes leave the signal time to land while generations remain.
    generations, population, lifetime = 12, 8, 20_000
    text = (
        TINY.replace("[0.05, 0.3]", "[0.05]")
        .replace("seeds = 2", "seeds = [1]")
        .replace('[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', "")
        .replace("lifetime = 40", f"lifetime = {lifetime}")
        .replace("generations = 6", f"generations = {generations}")
        .replace("chunk_size = 2", "chunk_size = 1")
        .replace("checkpoint_every = 2", "checkpoint_every = 3")
    )
    study = load(write_study(tmp_path, text))
    (run,) = study.runs
    out = tmp_path / "out"
    watcher = _preempt_once_running(out, records=2)
    result = run_study(study, out, SubmititExecutor("local", poll=0.2), quiet=True)
    watcher.join(timeout=1)
    assert result["done"] == result["runs"] == 1
    summary = json.loads((run_dir(out, run) / "summary.json").read_text())
    statuses = [s["status"] for s in summary["segments"]]
    assert statuses == ["stopped", "complete"], summary["segments"]  # requeued
    steps = population * lifetime * generations
    assert summary["agent_steps"] == steps
    assert sum(s["agent_steps"] for s in summary["segments"]) == steps
    assert summary["generations"] == generations and summary["complete"]
    lines = (run_dir(out, run) / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["generation"] for x in lines] == list(range(generations))
    (row,) = cells_table(out).to_dict("records")
    assert row["agent_steps"] == steps and row["generations"] == generations
