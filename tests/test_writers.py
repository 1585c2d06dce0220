"""One writer per directory (eqxevo._app.lock), with real processes: racing CLIs,
resume against a live run, dead and foreign holders, a study's run held by
another process; cut-short JSON files and flipped genome bytes."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import SMALL_EXPERIMENT
from study_fixtures import TINY, write_study

from eqxevo._app.cli import main
from eqxevo._app.lock import LOCK_FILE, WRITER_FILE, LockedError, WriterLock

CLI = [sys.executable, "-m", "eqxevo"]
SETS = [arg for item in SMALL_EXPERIMENT for arg in ("--set", item)]
ENV = dict(os.environ, PYTHONUNBUFFERED="1")


def _lines(text):
    return [line for line in text.splitlines() if line.strip()]


def _wait_for(path, process, seconds=120.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, "the writer ended before it took its lock"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _holding(folder):
    """A process that holds `folder`'s lock until killed."""
    code = (
        "import sys, time; from eqxevo._app.lock import WriterLock; "
        "lock = WriterLock(sys.argv[1], 'test').acquire(); print('held', flush=True); "
        "time.sleep(600)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    return holder


@pytest.mark.slow
def test_a_second_run_or_resume_of_a_live_run_refuses_and_changes_nothing(tmp_path):
    longer = ["--set", "run.generations=8", "--set", "run.checkpoint_every=4"]
    run = [*CLI, "run", *SETS, *longer, "--quiet", "--out", str(tmp_path)]
    first = subprocess.Popen([*run, "--name", "same"], env=ENV, text=True)
    _wait_for(tmp_path / "same" / WRITER_FILE, first)  # written last
    # The writer is paused while the others try, so it holds its lock however
    # fast it would have run; then it goes on undisturbed.
    first.send_signal(signal.SIGSTOP)
    try:
        others = [
            subprocess.Popen(command, env=ENV, stderr=subprocess.PIPE, text=True)
            for command in (
                [*run, "--name", "same"],
                [*CLI, "resume", str(tmp_path / "same"), "--quiet"],
            )
        ]
        refusals = [(other.wait(), other.communicate()[1]) for other in others]
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait() == 0
    for code, stderr in refusals:
        assert code == 1
        (line,) = _lines(stderr)
        assert f"{tmp_path / 'same'} is being written by pid {first.pid}" in line
        assert "one writer per run directory" in line
    # What the one writer wrote equals a run made alone, record for record (made
    # in this process: the same program, without a third interpreter's start-up).
    alone = CliRunner().invoke(
        main, [*run[len(CLI) :], "--name", "alone"], catch_exceptions=False
    )
    assert alone.exit_code == 0, alone.output
    raced, solo = tmp_path / "same", tmp_path / "alone"
    assert (raced / "metrics.jsonl").read_text() == (solo / "metrics.jsonl").read_text()
    summaries = [json.loads((d / "summary.json").read_text()) for d in (raced, solo)]
    assert summaries[0]["heldout"] == summaries[1]["heldout"]
    assert summaries[0]["num_segments"] == 1
    assert not (raced / LOCK_FILE).exists()  # let go at the end


def test_a_dead_writers_lock_is_taken_over(tmp_path):
    holder = _holding(tmp_path)
    with pytest.raises(LockedError, match=f"pid {holder.pid} on host"):
        WriterLock(tmp_path, "test").acquire()
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    lock = WriterLock(tmp_path, "test").acquire()  # its pid is gone on this host
    assert lock.held
    lock.release()


def test_a_lock_from_another_host_is_honoured_until_its_lease_runs_out(tmp_path):
    marker = tmp_path / LOCK_FILE
    marker.write_text(
        "filelock/2\npid=12345\nhost=elsewhere\nmode=lease\ntoken=abc\nduration=0.5\n"
    )
    with pytest.raises(LockedError, match="pid 12345 on host elsewhere"):
        WriterLock(tmp_path, "test", lease=0.5).acquire()
    # Unrefreshed for longer than the lease: its holder is gone.
    old = time.time() - 5
    os.utime(marker, (old, old))
    lock = WriterLock(tmp_path, "test", lease=0.5).acquire()
    assert lock.held and "elsewhere" not in marker.read_text()
    lock.release()


ONE_CELL = TINY.replace("[0.05, 0.3]", "[0.05]").replace(
    '[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', ""
)


@pytest.mark.slow
def test_a_study_leaves_a_run_another_process_writes_and_survives_cut_json(
    tmp_path, capsys
):
    from eqxevo._app.study.runner import run_dir
    from eqxevo.study import load, run_study

    file = write_study(tmp_path, ONE_CELL)
    out = tmp_path / "out"
    study = load(file)
    held, other = (run_dir(out, r) for r in study.runs)
    held.mkdir(parents=True)
    holder = _holding(held)
    try:
        result = run_study(study, out, quiet=True)
    finally:
        holder.kill()
        holder.communicate()
    assert (result["runs"], result["done"]) == (2, 1)
    (line,) = [x for x in _lines(capsys.readouterr().err) if "skipped" in x]
    assert f"skipped run {study.runs[0].id}: {held} is being written by pid" in line
    # not a file written but the holder's own
    assert sorted(p.name for p in held.iterdir()) == sorted([LOCK_FILE, WRITER_FILE])
    assert (other / "summary.json").exists()

    # Once its writer is gone the study finishes it.
    assert run_study(study, out, quiet=True)["done"] == 2
    before = json.loads((held / "summary.json").read_text())

    # A cut-short summary.json: the run counts as unfinished, and `study run`
    # writes it again from its checkpoint with the same held-out record.
    text = (held / "summary.json").read_text()
    (held / "summary.json").write_text(text[: len(text) // 2])
    assert run_study(study, out, quiet=True)["done"] == 2
    after = json.loads((held / "summary.json").read_text())
    assert after["heldout"] == before["heldout"]
    assert after["best_fitness"] == before["best_fitness"]
    assert after["checksums"] == before["checksums"]

    # A cut-short study.json: status and report say so in one line; `study run`
    # writes it again.
    text = (out / "study.json").read_text()
    (out / "study.json").write_text(text[:-40])
    for command in (["status"], ["report"]):
        result = CliRunner().invoke(main, ["study", *command, str(out)])
        assert result.exit_code == 1
        (line,) = _lines(result.output)
        assert f"{out / 'study.json'} is cut short or damaged" in line
        assert "writes it again" in line
    (out / "plan.json").write_text("{")
    assert run_study(study, out, quiet=True)["done"] == 2
    assert json.loads((out / "study.json").read_text()) == json.loads(text)
    assert json.loads((out / "plan.json").read_text())["programs"]


def _copy(run_dir, folder):
    """A copy of `run_dir` in `folder`, for a test that changes it."""
    return Path(shutil.copytree(run_dir, folder / run_dir.name))


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished `SMALL_EXPERIMENT` run (6 generations), shared: tests that
    change it work on a copy (`_copy`), or put back what they changed."""
    out = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(
        main, ["run", *SETS, "--quiet", "--out", str(out), "--name", "done"]
    )
    assert result.exit_code == 0, result.output
    return out / "done"


def test_eval_refuses_a_genome_with_flipped_bytes(finished_run):
    path = finished_run / "best_genome.eqx"
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    path.write_bytes(bytes(flipped))
    try:
        result = CliRunner().invoke(main, ["eval", str(finished_run)])
    finally:
        path.write_bytes(good)
    assert result.exit_code == 1
    (line,) = _lines(result.output)
    assert f"{path} is damaged: its SHA-256 differs" in line
    assert CliRunner().invoke(main, ["eval", str(finished_run)]).exit_code == 0


def test_a_cut_short_summary_is_refused_by_eval_and_rebuilt_by_resume(
    tmp_path, finished_run
):
    run_dir = _copy(finished_run, tmp_path)
    path = run_dir / "summary.json"
    before = json.loads(path.read_text())
    path.write_text(path.read_text()[:100])
    result = CliRunner().invoke(main, ["eval", str(run_dir)])
    assert result.exit_code == 1
    (line,) = _lines(result.output)
    assert f"{path} is cut short or damaged" in line
    result = CliRunner().invoke(main, ["resume", str(run_dir), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "writing it again from the run's files" in result.output
    after = json.loads(path.read_text())
    for key in (
        "heldout",
        "best_fitness",
        "checksums",
        "generations",
        "complete",
        "checkpoint",  # what the next resume checks the newest checkpoint against
    ):
        assert after[key] == before[key], key


def test_a_second_study_run_on_a_live_study_refuses_and_status_names_it(tmp_path):
    file = write_study(tmp_path, ONE_CELL)
    out = tmp_path / "out"
    out.mkdir()
    holder = _holding(out)
    try:
        result = CliRunner().invoke(
            main, ["study", "run", str(file), "--out", str(out), "--quiet"]
        )
        assert result.exit_code == 1
        (line,) = _lines(result.output)
        assert f"{out} is being written by pid {holder.pid}" in line
        assert "one writer per study folder" in line
        assert sorted(p.name for p in out.iterdir()) == sorted([LOCK_FILE, WRITER_FILE])
    finally:
        holder.kill()
        holder.communicate()


def test_a_newest_checkpoint_summary_json_does_not_know_is_refused(
    tmp_path, finished_run
):
    # summary.json records the SHA-256 of the newest checkpoint's arrays; one
    # that differs (a checkpoint or summary.json copied in from another run)
    # is refused rather than resumed
    run_dir = _copy(finished_run, tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["checkpoint"]["generation"] == 6
    summary["checkpoint"]["sha256"] = "0" * 64
    (run_dir / "summary.json").write_text(json.dumps(summary))
    before = (run_dir / "metrics.jsonl").read_text()
    result = CliRunner().invoke(
        main, ["resume", str(run_dir), "--quiet", "--set", "run.generations=8"]
    )
    assert result.exit_code == 1
    (line,) = _lines(result.output)
    assert line == (
        f"Error: {run_dir}/checkpoints/6 is not the checkpoint this run wrote (its "
        "SHA-256 differs from summary.json's)"
    )
    assert (run_dir / "metrics.jsonl").read_text() == before
    assert not (run_dir / LOCK_FILE).exists()
