import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import final_state
from study_fixtures import TINY, finished_study, write_study  # noqa: F401

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._app.study.report import RUN_COLUMNS, cells_table
from eqxevo._app.study.runner import run_dir
from eqxevo.study import StudyError, load, run_study, status


def test_every_run_gets_a_run_directory(finished_study):  # noqa: F811
    study = load(finished_study.file)
    for i, run in enumerate(study.runs):
        path = run_dir(finished_study.out, run)
        written = config.load(path / "config.toml")
        if i in (0, len(study.runs) - 1):  # one run of each program (builds cost)
            assert written == experiment.build(run.experiment).experiment
        assert written.run == run.experiment.run
        records = [
            json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()
        ]
        assert [r["generation"] for r in records] == list(range(6))
        summary = json.loads((path / "summary.json").read_text())
        assert summary["complete"] and summary["generations"] == 6
        assert summary["final_mean_fitness"] == records[-1]["mean"]
        assert summary["agent_steps"] == 8 * 40 * 6
        for name in ("best_genome.eqx", "mean_genome.eqx", "fitness.png"):
            assert (path / name).exists(), name  # what a run's directory holds
        assert summary["study_cell"] == run.cell.name and summary["seed"] == run.seed
        assert sorted(p.name for p in (path / "checkpoints").iterdir())[-1] == "6"
    assert status(finished_study.out)["done"] == 8


def test_rerunning_a_finished_study_does_no_work(finished_study, monkeypatch):  # noqa: F811
    def forbidden(*args, **kwargs):
        raise AssertionError("a finished study built or ran something")

    monkeypatch.setattr("eqxevo._app.study.executor.plan", forbidden)
    monkeypatch.setattr("eqxevo._app.study.runner.evolve", forbidden)
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


# One cell, two seeds: one program of two runs, the smallest study with a group
# (shared by the tests below, so its program compiles once).
ONE_CELL = TINY.replace("[0.05, 0.3]", "[0.05]").replace(
    '[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', ""
)


def _without_wall_time(table):
    return table.drop(columns=["wall_time_s"])


def _study_run_until_records(file, out, log):
    """`eqxevo study run FILE --out OUT` in a child process, returned as soon as
    the first chunk's records are on disk (mid-program, while checkpoints,
    metrics and summaries are being written)."""
    command = [sys.executable, "-m", "eqxevo", "study", "run"]
    command += [str(file), "--out", str(out), "--quiet"]
    with log.open("wb") as stderr:
        child = subprocess.Popen(command, stderr=stderr)
    deadline = time.monotonic() + 300
    while not any(p.stat().st_size for p in out.rglob("metrics.jsonl")):
        assert child.poll() is None, log.read_text()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child


@pytest.mark.slow
def test_sigkill_at_any_moment_then_rerun_gives_the_uninterrupted_results(
    tmp_path,
    finished_study,  # noqa: F811
):
    out = tmp_path / "out"
    child = _study_run_until_records(finished_study.file, out, tmp_path / "log")
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
    study = load(write_study(tmp_path, ONE_CELL))
    original = experiment.Run.chunk
    calls = []

    def interrupt_after_two_chunks(self, generation, history, state):
        original(self, generation, history, state)
        calls.append(generation)
        if len(calls) == 2 * len(study.seeds):  # every run has two chunks
            raise KeyboardInterrupt

    monkeypatch.setattr(experiment.Run, "chunk", interrupt_after_two_chunks)
    with pytest.raises(KeyboardInterrupt):
        run_study(study, tmp_path / "out", quiet=True)
    for run in study.runs:
        path = run_dir(tmp_path / "out", run)
        summary = json.loads((path / "summary.json").read_text())
        assert not summary["complete"] and summary["generations"] == 4
        assert sorted(p.name for p in (path / "checkpoints").iterdir())[-1] == "4"
    # Progress counts what a resume keeps (the newest checkpoint), not the records:
    # a kill between a chunk's records and its checkpoint runs them again.
    saved = status(tmp_path / "out")["generations"]
    assert saved == {"done": 4 * len(study.runs), "total": 6 * len(study.runs)}
    shutil.rmtree(run_dir(tmp_path / "out", study.runs[0]) / "checkpoints" / "4")
    assert status(tmp_path / "out")["generations"]["done"] == 4 * len(study.runs) - 2
    monkeypatch.setattr(experiment.Run, "chunk", original)
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
    from eqxevo._src.heldout import heldout_evaluate, heldout_key

    study = load(finished_study.file)
    run = study.runs[3]
    path = run_dir(finished_study.out, run)
    summary = json.loads((path / "summary.json").read_text())
    heldout = summary["heldout"]
    assert heldout["generation"] == 6
    built = experiment.build(run.experiment)
    _, state = final_state(path, built.initial_state())
    episodes = run.experiment.run.eval_episodes  # the run's own setting
    for name, genome in (
        ("mean", built.strategy.mean(state)),
        ("best", built.strategy.best(state)),
    ):
        # the held-out stream of `eqxevo run` with this seed
        want = heldout_evaluate(heldout_key(built.key), built.fitness, genome, episodes)
        got = heldout[name]
        assert (got["mean"], got["ci_low"], got["ci_high"]) == (
            want.mean,
            want.ci_low,
            want.ci_high,
        )
        assert got["episodes"] == episodes
    # `eqxevo eval` on the study's run reproduces its record, for either genome
    for name in ("best", "mean"):
        evaluation, _, _ = experiment.eval_run(path, genome=name)
        assert evaluation.result.mean == heldout[name]["mean"]
    # cells.csv reports the search mean's held-out figures, training apart
    row = cells_table(finished_study.out, study).iloc[3]
    assert row["heldout_genome"] == "mean"
    assert row["heldout_mean"] == heldout["mean"]["mean"]
    assert row["heldout_best_mean"] == heldout["best"]["mean"]
    assert row["best_fitness"] == summary["best_fitness"]


def _one_run_study(seed: int, algorithm: str, run_keys: str) -> str:
    """TINY as one cell and one seed, with `algorithm` and extra [run] keys."""
    return (
        TINY.replace("seeds = 2", f"seeds = [{seed}]")
        .replace("[0.05, 0.3]", "[0.3]")
        .replace('[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', "")
        .replace("population_size = 8", f'population_size = 8\nname = "{algorithm}"')
        .replace("[run]", f"[run]\n{run_keys}")
    )


def test_a_one_cell_study_and_eqxevo_run_record_the_same_numbers(tmp_path):
    # The same experiment and seed, as a study's only run and through `eqxevo
    # run`: the same held-out lifetimes, the same records, the same genomes.
    # CMA_ES keeps float params that a study's axis turns into traced arrays.
    text = _one_run_study(1, "CMA_ES", "eval_every = 4\neval_episodes = 5")
    study = load(write_study(tmp_path, text))
    (run,) = study.runs
    run_study(study, tmp_path / "study", quiet=True)
    experiment.run_experiment(run.experiment, tmp_path / "alone", quiet=True)
    mine, theirs = run_dir(tmp_path / "study", run), tmp_path / "alone"
    assert (mine / "metrics.jsonl").read_text() == (
        theirs / "metrics.jsonl"
    ).read_text()
    assert (mine / "config.toml").read_text() == (theirs / "config.toml").read_text()
    a, b = (json.loads((p / "summary.json").read_text()) for p in (mine, theirs))
    assert a["heldout"] == b["heldout"] and a["heldout"]["best"]["episodes"] == 5
    for name in ("best_genome.eqx", "mean_genome.eqx"):
        assert (mine / name).read_bytes() == (theirs / name).read_bytes()


# Runs `eqxevo study run --devices 2` and then `eqxevo run RUN/config.toml
# --devices 2` of the study's run in one fresh process (two CPU devices), and
# prints the `EvolveOptions` each handed to `evolve`.
_DEVICES_WORKER = """
import json, sys
from click.testing import CliRunner
import eqxevo._app.experiment.run as alone
import eqxevo._app.study.runner as study
from eqxevo._app.cli import main

seen = []
for module in (study, alone):
    def spy(*args, real=module.evolve, **kwargs):
        seen.append(kwargs["options"])
        return real(*args, **kwargs)
    module.evolve = spy
file, out, config, into = sys.argv[1:]
for args in (
    ["study", "run", file, "--out", out, "--devices", "2", "--quiet"],
    ["run", config, "--out", into, "--name", "alone", "--devices", "2", "--quiet"],
):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, (result.output, result.exception)
print(json.dumps([
    {"batch_size": o.batch_size, "devices": o.mesh.size, "same": o == seen[0]}
    for o in seen
]))
"""


def test_a_study_cell_equals_eqxevo_run_with_batch_size_and_devices(tmp_path):
    # Sep_CMA_ES, micro-batches and two devices: the study hands `evolve` the
    # options `eqxevo run` does (built from the config in one place), and the run
    # directories hold the same records, genomes and held-out scores.
    keys = "batch_size = 2\neval_every = 3\neval_episodes = 4"
    text = _one_run_study(3, "Sep_CMA_ES", keys)
    file = write_study(tmp_path, text)
    (run,) = load(file).runs
    out, into = tmp_path / "study", tmp_path / "runs"
    mine = run_dir(out, run)
    command = [sys.executable, "-c", _DEVICES_WORKER, str(file), str(out)]
    command += [str(mine / "config.toml"), str(into)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == [{"batch_size": 2, "devices": 2, "same": True}] * 2
    theirs = into / "alone"
    for name in ("metrics.jsonl", "config.toml"):
        assert (mine / name).read_text() == (theirs / name).read_text()
    for name in ("best_genome.eqx", "mean_genome.eqx"):
        assert (mine / name).read_bytes() == (theirs / name).read_bytes()
    a, b = (json.loads((p / "summary.json").read_text()) for p in (mine, theirs))
    assert a["heldout"] == b["heldout"] and a["heldout"]["best"]["episodes"] == 4
    for summary in (a, b):
        assert len(summary["segments"][-1]["devices"]) == 2


def test_sigterm_stops_after_the_running_chunk_with_every_run_saved(tmp_path):
    # one program (one cell, two seeds): the smallest study a signal can stop
    file = write_study(tmp_path, ONE_CELL)
    out, log = tmp_path / "out", tmp_path / "stderr.txt"
    child = _study_run_until_records(file, out, log)
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


def test_a_study_run_with_a_damaged_checkpoint_falls_back_and_ends_bit_identical(
    tmp_path, capsys
):
    # `ONE_CELL` planned 6 generations from the start, or run to 4, each run's
    # newest checkpoint damaged, then extended to 6. (Both runs fall back to the
    # same generation: they stay one program, the one the tests above compiled.)
    straight = load(write_study(tmp_path / "a", ONE_CELL))
    run_study(straight, tmp_path / "a" / "out", quiet=True)
    short = load(
        write_study(
            tmp_path / "b", ONE_CELL.replace("generations = 6", "generations = 4")
        )
    )
    out = tmp_path / "b" / "out"
    run_study(short, out, quiet=True)
    for run in short.runs:
        step = run_dir(out, run) / "checkpoints" / "4"
        array = max(
            (p for p in step.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
        )
        data = bytearray(array.read_bytes())
        data[len(data) // 2] ^= 0xFF
        array.write_bytes(bytes(data))
    capsys.readouterr()
    run_study(load(write_study(tmp_path / "b", ONE_CELL)), out, quiet=True)
    lines = [x for x in capsys.readouterr().err.splitlines() if "damaged" in x]
    assert len(lines) == len(short.runs) == 2
    for run, line in zip(short.runs, lines, strict=True):
        assert line.startswith(
            f"eqxevo: run {run.id}: checkpoint at generation 4 is damaged"
        )
        assert line.endswith("resuming from generation 2 (the newest good one)")
        mine, theirs = run_dir(out, run), run_dir(tmp_path / "a" / "out", run)
        assert (mine / "metrics.jsonl").read_text() == (
            theirs / "metrics.jsonl"
        ).read_text()
        a, b = (json.loads((p / "summary.json").read_text()) for p in (mine, theirs))
        assert a["heldout"] == b["heldout"] and a["checksums"] == b["checksums"]
