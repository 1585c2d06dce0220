import json

import pytest
from study_fixtures import TINY, finished_study, write_study  # noqa: F401

from eqxevo.study import SubmititExecutor, load, run_study
from eqxevo.study.runner import load_plan, run_dir


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
