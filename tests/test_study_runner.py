import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from study_fixtures import TINY, finished_study, write_study  # noqa: F401

from eqxevo import config
from eqxevo.study import StudyError, load, run_study, status
from eqxevo.study.report import RUN_COLUMNS, cells_table
from eqxevo.study.runner import run_dir


def test_every_run_gets_a_run_directory(finished_study):  # noqa: F811
    study = load(finished_study.file)
    for run in study.runs:
        path = run_dir(finished_study.out, run)
        assert config.load(path / "config.toml") == run.experiment
        records = [
            json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["generation"] for r in records] == list(range(6))
        summary = json.loads((path / "summary.json").read_text())
        assert summary["complete"] and summary["generations"] == 6
        assert summary["final_mean_fitness"] == records[-1]["mean"]
        assert summary["agent_steps"] == 8 * 40 * 6
        assert (path / "best_genome.eqx").exists()
        assert sorted(p.name for p in (path / "checkpoints").iterdir())[-1] == "6"
    assert status(finished_study.out)["done"] == 8


def test_rerunning_a_finished_study_does_no_work(finished_study, monkeypatch):  # noqa: F811
    def forbidden(*args, **kwargs):
        raise AssertionError("a finished study built or ran something")

    monkeypatch.setattr("eqxevo.study.executor.plan", forbidden)
    monkeypatch.setattr("eqxevo.study.runner.evolve", forbidden)
    files = sorted(finished_study.out.rglob("*"))
    stamps = [p.stat().st_mtime_ns for p in files]
    result = run_study(load(finished_study.file), finished_study.out, quiet=True)
    assert result["done"] == result["runs"] == 8
    assert sorted(finished_study.out.rglob("*")) == files
    assert [p.stat().st_mtime_ns for p in files] == stamps


def test_a_changed_experiment_is_refused_naming_the_keys(tmp_path, finished_study):  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(finished_study.out, out)
    changed = load(
        write_study(tmp_path, TINY.replace("lifetime = 40", "lifetime = 30"))
    )
    with pytest.raises(
        StudyError, match=r"of another experiment \(differs in run.lifetime\)"
    ):
        run_study(changed, out, quiet=True)


def _without_wall_time(table):
    return table.drop(columns=["wall_time_s"])


def test_sigkill_at_any_moment_then_rerun_gives_the_uninterrupted_results(
    tmp_path,
    finished_study,  # noqa: F811
):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "eqxevo.cli", "study", "run"]
    command += [str(finished_study.file), "--out", str(out), "--quiet"]
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:
        child = subprocess.Popen(command, stderr=stderr)
        # Kill as soon as the first chunk's records are on disk: mid-program,
        # while checkpoints, metrics and summaries are being written.
        deadline = time.monotonic() + 300
        while not any(p.stat().st_size for p in out.rglob("metrics.jsonl")):
            assert child.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert status(out)["done"] < 8  # it was killed mid-study
    run_study(load(finished_study.file), out, quiet=True)
    study = load(finished_study.file)
    got, want = cells_table(out, study), cells_table(finished_study.out, study)
    assert set(RUN_COLUMNS) <= set(got.columns)
    assert _without_wall_time(got).equals(_without_wall_time(want))
    for run in study.runs:
        mine = run_dir(out, run) / "metrics.jsonl"
        theirs = run_dir(finished_study.out, run) / "metrics.jsonl"
        assert mine.read_text() == theirs.read_text(), run.id


def test_an_interrupt_keeps_every_runs_last_chunk_and_resumes(tmp_path, monkeypatch):
    from eqxevo.study import runner

    study = load(
        write_study(
            tmp_path,
            TINY.replace("[0.05, 0.3]", "[0.05]").replace(
                '[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', ""
            ),
        )
    )
    original = runner._RunFiles.chunk
    calls = []

    def interrupt_after_two_chunks(self, generation, history, state):
        original(self, generation, history, state)
        calls.append(generation)
        if len(calls) == 2 * len(study.seeds):  # every run has two chunks
            raise KeyboardInterrupt

    monkeypatch.setattr(runner._RunFiles, "chunk", interrupt_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "out", quiet=True)
    for run in study.runs:
        path = run_dir(tmp_path / "out", run)
        summary = json.loads((path / "summary.json").read_text())
        assert not summary["complete"] and summary["generations"] == 4
        assert sorted(p.name for p in (path / "checkpoints").iterdir())[-1] == "4"
    monkeypatch.setattr(runner._RunFiles, "chunk", original)
    assert run_study(study, tmp_path / "out", quiet=True)["done"] == 2
    assert all(
        len(
            Path(run_dir(tmp_path / "out", r), "metrics.jsonl").read_text().splitlines()
        )
        == 6
        for r in study.runs
    )


def test_a_complete_run_scores_its_final_genomes_on_held_out_lifetimes(
    finished_study,  # noqa: F811
):
    from eqxevo.heldout import heldout_evaluate, heldout_key
    from eqxevo.study.group import build_run
    from eqxevo.study.runner import HELDOUT_EPISODES, _RunFiles

    study = load(finished_study.file)
    run = study.runs[3]
    summary = json.loads(
        (run_dir(finished_study.out, run) / "summary.json").read_text()
    )
    heldout = summary["heldout"]
    assert heldout["generation"] == 6
    files = _RunFiles(finished_study.out, build_run(run))
    state = files.restore(6)
    files.checkpoints.close()
    strategy, fitness = files.member.built.strategy, files.member.built.fitness
    for name, genome in (
        ("mean", strategy.mean(state)),
        ("best", strategy.best(state)),
    ):
        want = heldout_evaluate(
            heldout_key(run.seed), fitness, genome, HELDOUT_EPISODES
        )
        got = heldout[name]
        assert (got["mean"], got["ci_low"], got["ci_high"]) == (
            want.mean,
            want.ci_low,
            want.ci_high,
        )
        assert got["episodes"] == HELDOUT_EPISODES
    # cells.csv reports the search mean's held-out figures, training apart
    row = cells_table(finished_study.out, study).iloc[3]
    assert row["heldout_genome"] == "mean"
    assert row["heldout_mean"] == heldout["mean"]["mean"]
    assert row["heldout_best_mean"] == heldout["best"]["mean"]
    assert row["best_fitness"] == summary["best_fitness"]


def test_the_report_scores_complete_runs_whose_summary_lacks_held_out(
    tmp_path,
    finished_study,  # noqa: F811
):
    out = tmp_path / "out"
    shutil.copytree(finished_study.out, out)
    study = load(finished_study.file)
    path = run_dir(out, study.runs[0]) / "summary.json"
    summary = json.loads(path.read_text())
    del summary["heldout"]  # as an older eqxevo left it
    path.write_text(json.dumps(summary))
    got = cells_table(out, study)
    want = cells_table(finished_study.out, study)
    assert _without_wall_time(got).equals(_without_wall_time(want))
    assert "heldout" in json.loads(path.read_text())


def test_sigterm_stops_after_the_running_chunk_with_every_run_saved(tmp_path):
    # one program (one cell, two seeds): the smallest study a signal can stop
    file = write_study(
        tmp_path,
        TINY.replace("[0.05, 0.3]", "[0.05]").replace(
            '[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', ""
        ),
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "eqxevo.cli", "study", "run"]
    command += [str(file), "--out", str(out), "--quiet"]
    log = tmp_path / "stderr.txt"
    with log.open("wb") as stderr:
        child = subprocess.Popen(command, stderr=stderr)
        deadline = time.monotonic() + 300
        while not any(p.stat().st_size for p in out.rglob("metrics.jsonl")):
            assert child.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=300) == 143, log.read_text()
    assert "SIGTERM: stopping after the chunk" in log.read_text()
    assert "Continue with the same command" in log.read_text()
    study = load(file)
    summaries = [
        json.loads((run_dir(out, r) / "summary.json").read_text()) for r in study.runs
    ]
    # both runs of the program stopped after the same chunk, each saved
    assert {s["generations"] for s in summaries} in ({2}, {4})
    assert not any(s["complete"] for s in summaries)
    assert run_study(study, out, quiet=True)["done"] == 2
    for run in study.runs:
        lines = (run_dir(out, run) / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["generation"] for x in lines] == list(range(6))
