"""Faults a run meets from outside: a full disk, too many episodes, a binary
config, damaged checkpoints. Each ends in one line, loses nothing, leaves no
debris, and the run resumed afterwards equals an uninterrupted one."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import pytest
from click.testing import CliRunner
from helpers import SMALL_EXPERIMENT, final_state, small_experiment, tree_equal

from eqxevo import experiment
from eqxevo._app._cli import disk_full_message
from eqxevo._app.checkpoint import Checkpointer
from eqxevo._app.cli import main
from eqxevo._app.experiment.resources import chunk_bytes, too_big
from eqxevo._app.experiment.rundir import write_atomic
from eqxevo._app.metrics import MetricsLog
from eqxevo._src.evolve import compile_chunk
from eqxevo.experiment import RunDir

SETS = [x for item in SMALL_EXPERIMENT for x in ("--set", item)]


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _cli_process(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eqxevo", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _records(run_dir: Path, below: int) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["generation"] < below]


def _debris(run_dir: Path) -> list[str]:
    return [
        str(p)
        for p in run_dir.rglob("*")
        if p.name.endswith(".tmp") or "orbax-checkpoint-tmp" in p.name
    ]


class Reference(NamedTuple):
    """The `reference` fixture: an uninterrupted run's records, state, directory."""

    metrics: str
    state: Any
    run_dir: Path


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Reference:
    """An uninterrupted 6-generation run: its metrics.jsonl, final state and
    directory (checkpoints at 2, 4 and 6). Tests that change a run work on a copy
    (`_copy`)."""
    run_dir = tmp_path_factory.mktemp("reference") / "full"
    experiment.run_experiment(small_experiment(), run_dir, quiet=True)
    like = experiment.build(small_experiment()).initial_state()
    return Reference(
        (run_dir / "metrics.jsonl").read_text(), final_state(run_dir, like)[1], run_dir
    )


def _copy(reference: Reference, folder: Path) -> Path:
    """A copy of the reference run's directory, `folder / "r"`."""
    return Path(shutil.copytree(reference.run_dir, folder / "r"))


def _assert_equals_reference(run_dir: Path, reference: Reference) -> None:
    metrics, state, _ = reference
    assert (run_dir / "metrics.jsonl").read_text() == metrics
    like = experiment.build(small_experiment()).initial_state()
    generation, resumed = final_state(run_dir, like)
    assert generation == 6 and tree_equal(resumed, state)


def _one_error_line(output: str) -> str:
    lines = [x for x in output.splitlines() if x.strip()]
    assert "Traceback" not in output and len(lines) == 1, output
    assert lines[0].startswith("Error: ")
    return lines[0]


# -- a full disk, simulated at the lowest level (no root needed) --------------------


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_write_atomic_on_a_full_disk_keeps_the_old_file_and_no_tmp(
    tmp_path, monkeypatch
):
    path = tmp_path / "summary.json"
    path.write_text("old\n")
    monkeypatch.setattr("eqxevo._app.experiment.rundir.os.fsync", _enospc)
    with pytest.raises(OSError) as info:
        write_atomic(path, "new\n")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert path.read_text() == "old\n" and sorted(tmp_path.iterdir()) == [path]
    message = disk_full_message(info.value)
    assert message.startswith(f"no space left on device writing {path} (")
    assert "free); free some space and try again" in message and "\n" not in message


def test_save_genome_on_a_full_disk_keeps_the_old_genome_and_no_tmp(
    tmp_path, monkeypatch, reference
):
    run_dir = _copy(reference, tmp_path)
    before = (run_dir / "best_genome.eqx").read_bytes()
    _, genome = experiment.load_genome(run_dir)

    def half_then_full(file, tree):
        file.write(before[: len(before) // 2])
        _enospc()

    monkeypatch.setattr(eqx, "tree_serialise_leaves", half_then_full)
    with pytest.raises(OSError) as info:
        RunDir(run_dir).save_genome("best", genome)
    assert info.value.filename == str(run_dir / "best_genome.eqx")
    assert (run_dir / "best_genome.eqx").read_bytes() == before
    assert _debris(run_dir) == []
    # the message points at the run directory to resume
    assert disk_full_message(info.value).endswith(
        f"free some space and `eqxevo resume {run_dir}`"
    )


def test_metrics_truncation_on_a_full_disk_keeps_metrics_and_no_tmp(
    tmp_path, monkeypatch
):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append([{"generation": g, "mean": float(g)} for g in range(4)])
    before = log.path.read_text()

    def half_then_full(self, text, *args, **kwargs):
        with open(self, "w") as f:
            f.write(text[: len(text) // 2])
        _enospc()

    monkeypatch.setattr(Path, "write_text", half_then_full)
    with pytest.raises(OSError) as info:
        log.truncate(2)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(log.path)
    assert log.path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_checkpoint_save_on_a_full_disk_in_a_run_is_one_line_then_resumes_bit_identical(
    tmp_path, monkeypatch, reference
):
    import orbax.checkpoint as ocp

    save = ocp.CheckpointManager.save

    def full_at_4(self, step, *args, **kwargs):
        if step != 4:
            return save(self, step, *args, **kwargs)
        # what tensorstore leaves and raises when the disk fills mid-save
        partial = Path(self.directory) / "4.orbax-checkpoint-tmp" / "state"
        partial.mkdir(parents=True)
        (partial / "d").write_bytes(b"\0" * 100)
        raise ValueError(
            'RESOURCE_EXHAUSTED: Error writing "x" in OCDBT database: Failed to '
            "write 520572 bytes to file 9: No space left on device "
            "[os_error_code='28']"
        )

    monkeypatch.setattr(ocp.CheckpointManager, "save", full_at_4)
    run_dir = tmp_path / "r"
    result = cli("run", *SETS, "--quiet", "--out", str(tmp_path), "--name", "r")
    assert result.exit_code == 1
    line = _one_error_line(result.output)
    checkpoint = run_dir.resolve() / "checkpoints" / "4"
    assert line.startswith(f"Error: no space left on device writing {checkpoint} (")
    assert line.endswith(f"free); free some space and `eqxevo resume {run_dir}`")
    assert _debris(run_dir) == [] and not checkpoint.exists()
    assert Checkpointer(run_dir / "checkpoints").generations() == [2]

    monkeypatch.undo()
    result = cli("resume", str(run_dir), "--quiet")
    assert result.exit_code == 0, result.output
    _assert_equals_reference(run_dir, reference)


# -- a real full disk: a small tmpfs (root only) ------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int) -> Path:
    """Take all but about `leave` bytes of `disk`'s free space."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as f:
        f.write(b"\1" * max(free - leave, 0))
    return filler


def test_full_disk_during_resume_is_one_line_loses_nothing_then_bit_identical(
    small_disk, reference
):
    run_dir = small_disk / "r"
    first = cli(
        "run", *SETS, "--set", "run.generations=4", "--quiet", "--out", str(small_disk),
        "--name", "r",
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    checkpoints = {
        g: _files(run_dir / "checkpoints" / str(g)) for g in (2, 4)
    }  # fmt: skip
    metrics = _records(run_dir, below=4)

    filler = _fill(small_disk, 24_000)  # room for metrics, not for a checkpoint
    # a process of its own: what orbax's failed save leaves must not print at exit
    done = _cli_process("resume", str(run_dir), "--set", "run.generations=6", "--quiet")
    assert done.returncode == 1 and done.stdout == ""
    line = _one_error_line(done.stderr)
    assert line.startswith(f"Error: no space left on device writing {run_dir}")
    assert line.endswith(f"free); free some space and `eqxevo resume {run_dir}`")
    assert " kB free)" in line or " B free)" in line
    assert _debris(run_dir) == []
    for g, files in checkpoints.items():
        assert _files(run_dir / "checkpoints" / str(g)) == files
    assert Checkpointer(run_dir / "checkpoints").generations() == [2, 4]
    # the records up to the checkpoint are as before (later ones are repeated;
    # the first run's end-of-run held-out fields go, as in any extended run)
    assert _records(run_dir, below=4) == [
        {k: v for k, v in r.items() if not k.startswith("heldout_")} for r in metrics
    ]

    filler.unlink()
    result = cli("resume", str(run_dir), "--set", "run.generations=6", "--quiet")
    assert result.exit_code == 0, result.output
    assert _debris(run_dir) == []
    _assert_equals_reference(run_dir, reference)


def test_full_xla_compilation_cache_is_one_note_and_changes_nothing(
    small_disk, tmp_path, reference
):
    cache = small_disk / "cache"
    cache.mkdir()
    _fill(small_disk, 0)
    env = dict(
        os.environ,
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
    )
    command = [sys.executable, "-m", "eqxevo", "run", *SETS, "--quiet"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path), "--name", "r"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    (note,) = [x for x in done.stderr.splitlines() if x.strip()]
    assert note.startswith("note: XLA's compilation cache cannot be used (")
    assert "No space left on device" in note
    assert "Traceback" not in done.stderr and "Warning" not in done.stderr
    _assert_equals_reference(tmp_path / "r", reference)


# -- other resources -----------------------------------------------------------------


def test_eval_with_too_many_episodes_is_one_line_naming_estimate_and_limit(
    tmp_path, monkeypatch, reference
):
    run_dir = _copy(reference, tmp_path)
    result = cli("eval", str(run_dir), "--episodes", str(10**12))
    assert result.exit_code == 1
    assert _one_error_line(result.output) == (
        f"Error: --episodes {10**12}: at most {2**31 - 1} held-out lifetimes "
        "(episode indices are 32-bit)"
    )
    monkeypatch.setattr(
        "eqxevo._app.experiment.review.available_memory",
        lambda mesh=None: (1_000_000, "this host"),
    )
    result = cli("eval", str(run_dir), "--episodes", "100000")
    assert result.exit_code == 1
    line = _one_error_line(result.output)
    assert line.startswith("Error: --episodes 100000 needs about ")
    assert "(XLA's memory analysis) but this host has 1 MB available; use at most " in (
        line
    )
    # the limit it names fits
    most = int(line.rsplit("use at most about ", 1)[1].split()[0])
    assert 0 < most < 100000
    assert cli("eval", str(run_dir), "--episodes", str(most)).exit_code == 0


def test_memory_refusal_does_not_advise_batch_size_which_leaves_the_estimate_as_is():
    sizes = {}
    for batch_size in (None, 4):
        built = experiment.build(small_experiment("strategy.population_size=64"))
        run = built.experiment.run
        compiled = compile_chunk(
            built.key,
            built.strategy,
            built.fitness,
            state=built.initial_state(),
            chunk_size=run.chunk_size,
            on_nonfinite=run.on_nonfinite,
            batch_size=batch_size,
            episodes=run.episodes,
        )
        sizes[batch_size] = chunk_bytes(compiled, None)
    # a chunk's memory is the population's: blocks of 4 genomes leave it as it is
    assert sizes[None] is not None and sizes[4] is not None
    assert abs(sizes[4] - sizes[None]) < 0.01 * sizes[None]
    message = too_big(built, 10**12, None)
    assert "batch_size" not in message and "strategy.population_size" in message


# -- damaged checkpoints: one line, nothing at exit ----------------------------------


@pytest.mark.slow
def test_every_checkpoint_damaged_is_one_line_without_orbax_logs(tmp_path, reference):
    run_dir = _copy(reference, tmp_path)
    for step in (2, 4, 6):
        for name in ("_CHECKPOINT_METADATA", "experiment/metadata"):
            (run_dir / "checkpoints" / str(step) / name).write_text("garbage{")
    done = _cli_process("resume", str(run_dir), "--quiet")
    assert done.returncode == 1
    assert done.stdout == ""
    line = _one_error_line(done.stderr)
    assert line.startswith(f"Error: no checkpoint in {run_dir}/checkpoints passes ")
    assert "Failed to json parse" not in done.stderr


@pytest.mark.slow
def test_fallback_resume_prints_nothing_at_interpreter_exit(tmp_path, reference):
    for attempt in range(2):
        again = tmp_path / f"again{attempt}"
        shutil.copytree(reference.run_dir, again)
        state = again / "checkpoints" / "6" / "state"
        largest = max(
            (p for p in state.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
        )
        largest.write_bytes(largest.read_bytes()[:100])
        done = _cli_process("resume", str(again), "--quiet")
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert "Exception ignored" not in done.stderr, done.stderr
        assert "terminate called" not in done.stderr, done.stderr
        (note,) = done.stderr.splitlines()
        assert note.startswith("checkpoint at generation 6 is damaged (")
