import io
import json
import logging
import os
import re
import shutil
from pathlib import Path

import equinox as eqx
import jax
import pytest
from helpers import (
    final_state,
    small_experiment as small,
    tree_equal,
)

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._app.checkpoint import Checkpointer, CheckpointError
from eqxevo._app.config import ConfigError
from eqxevo._app.figures import fitness_figure
from eqxevo._app.metrics import Progress


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    """`small()` run uninterrupted for its 6 generations, with its progress shown:
    `(run directory, summary, progress text)`. Tests that change a run work on a
    copy (`_copy`)."""
    run_dir = tmp_path_factory.mktemp("six") / "r"
    out = io.StringIO()
    summary = experiment.run_experiment(small(), run_dir, stream=out)
    return run_dir, summary, out.getvalue()


def _copy(six, folder: Path) -> Path:
    """A copy of the `six` fixture's run directory in `folder`."""
    return Path(shutil.copytree(six[0], folder / "r"))


def test_run_writes_the_run_directory(six):
    run_dir, summary, _ = six
    for name in ("config.toml", "metrics.jsonl", "fitness.png", "best_genome.eqx"):
        assert (run_dir / name).exists(), name
    records = [
        json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["generation"] for r in records] == list(range(6))
    assert summary["generations"] == 6 and not summary["interrupted"]
    assert config.load(run_dir / "config.toml") == experiment.build(small()).experiment
    built, genome = experiment.load_genome(run_dir)
    fitness, _ = built.fitness(genome, jax.random.key(0))
    assert jax.numpy.isfinite(fitness)


def test_resume_equals_uninterrupted_run_and_the_summary_accumulates(
    tmp_path, six, caplog
):
    # A run of 4 generations extended to 6 equals the uninterrupted run; its
    # summary.json counts both segments, and resuming it once more (finished
    # already) changes nothing. The resumed run reuses the programs the first
    # one compiled (its restored state is placed as a fresh one is).
    full_dir = six[0]
    part = tmp_path / "part"
    experiment.run_experiment(small("run.generations=4"), part, quiet=True)
    with jax.log_compiles(True), caplog.at_level(logging.WARNING, logger="jax"):
        experiment.resume_run(part, ("run.generations=6",), quiet=True)
    compiled = [r.getMessage() for r in caplog.records if "Compiling" in r.getMessage()]
    assert not [m for m in compiled if "run_chunk" in m or "fitness" in m], compiled
    full = (full_dir / "metrics.jsonl").read_text()
    assert (part / "metrics.jsonl").read_text() == full
    like = experiment.build(small()).initial_state()
    g_full, s_full = final_state(full_dir, like)
    g_part, s_part = final_state(part, like)
    assert g_full == g_part == 6 and tree_equal(s_full, s_part)

    before = (part / "summary.json").read_text()
    out = io.StringIO()
    again = experiment.resume_run(part, quiet=True, stream=out)  # finished already
    assert "is complete at generation 6" in out.getvalue()
    assert (part / "summary.json").read_text() == before
    summary = json.loads(before)
    segments = summary["segments"]
    assert [(s["from_generation"], s["to_generation"]) for s in segments] == [
        (0, 4),
        (4, 6),
    ]
    steps = 8 * 40  # P * T
    assert [s["agent_steps"] for s in segments] == [4 * steps, 2 * steps]
    assert summary["agent_steps"] == 6 * steps
    assert summary["wall_time_s"] == pytest.approx(
        sum(s["wall_time_s"] for s in segments), abs=2e-3
    )
    assert summary["num_segments"] == 2 and summary["generations"] == 6
    assert summary["complete"] and again["agent_steps"] == 6 * steps


def test_interrupt_checkpoints_the_last_complete_chunk(tmp_path, monkeypatch, six):
    # Ctrl-C arrives while the host shows the second chunk's progress (its
    # records are written): that chunk's state is saved, and nothing is lost.
    calls = {"n": 0}
    real_update = Progress.update

    def update_then_interrupt(self, records, at=None):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_update(self, records, at)

    monkeypatch.setattr(Progress, "update", update_then_interrupt)
    exp = small("run.checkpoint_every=100", "run.chunk_seconds=0")
    with pytest.raises(KeyboardInterrupt):
        experiment.run_experiment(exp, tmp_path / "i", quiet=True)
    assert Checkpointer(tmp_path / "i/checkpoints").latest() == 4
    monkeypatch.setattr(Progress, "update", real_update)
    experiment.resume_run(tmp_path / "i", quiet=True)
    # the uninterrupted run (checkpoints do not change the records)
    assert (tmp_path / "i/metrics.jsonl").read_text() == (
        six[0] / "metrics.jsonl"
    ).read_text()


def test_resume_rejects_trajectory_changes(tmp_path, six):
    run_dir = _copy(six, tmp_path)
    with pytest.raises(ConfigError, match="can only change"):
        experiment.resume_run(run_dir, ("strategy.population_size=16",), quiet=True)
    # a config edited by hand is caught by the checkpoint
    text = (run_dir / "config.toml").read_text().replace("seed = 0", "seed = 1")
    (run_dir / "config.toml").write_text(text)
    with pytest.raises(
        CheckpointError, match=r"run.seed: checkpoint has 0, config has 1"
    ):
        experiment.resume_run(run_dir, quiet=True)


def test_new_run_refuses_an_existing_run_directory(tmp_path, six):
    run_dir = _copy(six, tmp_path)
    with pytest.raises(experiment.RunDirError, match="eqxevo resume"):
        experiment.run_experiment(small(), run_dir, quiet=True)
    with pytest.raises(experiment.RunDirError, match="holds no run"):
        experiment.resume_run(tmp_path / "nothing", quiet=True)


# -- damaged checkpoints --------------------------------------------------------------


def _largest_file(folder: Path) -> Path:
    return max(
        (p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size
    )


def _truncate(step: Path) -> None:
    path = _largest_file(step / "state")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _remove_file(step: Path) -> None:
    _largest_file(step / "state").unlink()


def _flip_bytes(step: Path) -> None:
    path = _largest_file(step / "state")
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _drop_integrity(step: Path) -> None:
    shutil.rmtree(step / "integrity")


def _other_shapes(step: Path) -> None:
    # A state of another network (width 9) written under this generation with
    # this experiment's record: the shapes disagree.
    run_dir = step.parent.parent
    record = Checkpointer(step.parent).experiment(int(step.name))
    other = experiment.build(small("net.options.width=9"))
    shutil.rmtree(step)
    ckpt = Checkpointer(step.parent)
    ckpt.save(int(step.name), other.initial_state(), record)
    ckpt.close()
    assert run_dir.exists()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 10-generation run: its metrics and final state."""
    run_dir = tmp_path_factory.mktemp("reference") / "full"
    experiment.run_experiment(small("run.generations=10"), run_dir, quiet=True)
    like = experiment.build(small("run.generations=10")).initial_state()
    return (run_dir / "metrics.jsonl").read_text(), final_state(run_dir, like)[1]


@pytest.mark.parametrize(
    "damage",
    [_truncate, _remove_file, _flip_bytes, _drop_integrity, _other_shapes],
    ids=["truncated", "missing-file", "flipped-bytes", "no-checksum", "other-shapes"],
)
def test_damaged_newest_checkpoint_falls_back_and_ends_bit_identical(
    tmp_path, reference, six, damage
):
    run_dir = _copy(six, tmp_path)  # a 6-generation run
    assert Checkpointer(run_dir / "checkpoints").generations() == [2, 4, 6]
    damage(run_dir / "checkpoints" / "6")
    out = io.StringIO()
    experiment.resume_run(run_dir, ("run.generations=10",), quiet=True, stream=out)
    (line,) = [x for x in out.getvalue().splitlines() if "damaged" in x]
    assert line.startswith("checkpoint at generation 6 is damaged (")
    assert line.endswith("resuming from generation 4 (the newest good one)")
    metrics, state = reference
    assert (run_dir / "metrics.jsonl").read_text() == metrics
    like = experiment.build(small("run.generations=10")).initial_state()
    generation, resumed = final_state(run_dir, like)
    assert generation == 10 and tree_equal(resumed, state)
    assert (run_dir / "damaged-checkpoints" / "6").is_dir()


def test_no_good_checkpoint_is_one_clear_error(tmp_path, six):
    run_dir = _copy(six, tmp_path)
    for step in (2, 4, 6):
        _truncate(run_dir / "checkpoints" / str(step))
    with pytest.raises(CheckpointError) as info:
        experiment.resume_run(run_dir, quiet=True)
    message = str(info.value)
    assert message.startswith(f"no checkpoint in {run_dir.resolve()}/checkpoints ")
    assert "generation 6: its state cannot be read" in message
    assert "generation 4: its state cannot be read" in message
    assert "generation 2: its state cannot be read" in message
    assert "\n" not in message


# -- run directories ------------------------------------------------------------------


def test_same_name_after_a_run_that_saved_no_checkpoint_just_works(
    tmp_path, monkeypatch
):
    def fail(*args, **kwargs):
        raise RuntimeError("compiler crashed")

    monkeypatch.setattr("eqxevo._app.experiment.run.compile_chunk", fail)
    with pytest.raises(RuntimeError, match="compiler crashed"):
        experiment.run_experiment(small(), tmp_path / "r", quiet=True)
    assert (tmp_path / "r/config.toml").exists()
    assert Checkpointer(tmp_path / "r/checkpoints").latest() is None
    monkeypatch.undo()
    out = io.StringIO()
    summary = experiment.run_experiment(small(), tmp_path / "r", quiet=True, stream=out)
    assert "held a run that saved no checkpoint; starting afresh" in out.getvalue()
    assert summary["generations"] == 6 and summary["num_segments"] == 1
    # a run that did save a checkpoint is never overwritten
    with pytest.raises(experiment.RunDirError, match="already holds a run"):
        experiment.run_experiment(small(), tmp_path / "r", quiet=True)


# -- memory ---------------------------------------------------------------------------


def test_a_run_that_cannot_fit_stops_before_it_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(
        "eqxevo._app.experiment.resources.available_memory",
        lambda mesh=None: (1000, "this host"),
    )
    with pytest.raises(experiment.ResourceError) as info:
        experiment.run_experiment(small(), tmp_path / "r", quiet=True)
    message = str(info.value)
    assert message.startswith("this run needs about ")
    assert "but this host has 1 kB available" in message
    for advice in ("strategy.population_size (now 8;", "--devices"):
        assert advice in message
    assert "run.batch_size" not in message  # it does not bound a chunk's memory
    assert not (tmp_path / "r/metrics.jsonl").exists()


def test_progress_reports_the_memory_estimate_and_projection(six):
    run_dir, _, text = six
    assert "XLA estimates" in text and "available on this host" in text
    assert re.search(
        r"per generation here: the remaining \d generations take about", text
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["segments"][0]["memory_estimate_bytes"] > 1000


# -- sinks ----------------------------------------------------------------------------


def _tfrecords(path: Path) -> list[bytes]:
    import struct

    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        out.append(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
    return out


def _wandb_history(path: Path) -> list[dict]:
    """History rows of an offline W&B run file (a LevelDB-style record log)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    raw, pos, block, records, partial = path.read_bytes(), 7, 32768, [], b""
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk = raw[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            records.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            records.append(partial + chunk)
    rows = []
    for data in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def test_num_seeds_records_every_seed_and_sinks_receive_every_generation(
    tmp_path, monkeypatch
):
    from tensorboardX.proto import event_pb2

    monkeypatch.setenv("WANDB_MODE", "offline")
    exp = small("sinks.tensorboard=true", "sinks.wandb=true", "run.num_seeds=2")
    experiment.run_experiment(exp, tmp_path / "r", quiet=True)
    records = [
        json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()
    ]
    # run.num_seeds=2 runs and records every seed, generation by generation
    assert [(r["generation"], r["seed"]) for r in records] == [
        (g, seed) for g in range(6) for seed in (0, 1)
    ]
    expected = {(r["generation"], f"seed_{r['seed']}/best"): r["best"] for r in records}

    (events,) = (tmp_path / "r/tensorboard").glob("events.out.tfevents.*")
    scalars = {}
    for data in _tfrecords(events):
        event = event_pb2.Event()
        event.ParseFromString(data)
        for value in event.summary.value:
            scalars[(event.step, value.tag)] = value.simple_value
    got = {k: v for k, v in scalars.items() if k[1].endswith("/best")}
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k] == pytest.approx(v, rel=1e-6), k

    (run_file,) = (tmp_path / "r/wandb").glob("offline-run-*/run-*.wandb")
    rows = _wandb_history(run_file)
    assert [row["_step"] for row in rows] == list(range(6))
    for row in rows:
        for seed in (0, 1):
            assert row[f"seed_{seed}/best"] == pytest.approx(
                expected[(row["_step"], f"seed_{seed}/best")], rel=1e-6
            )
    assert not os.environ.get("WANDB_API_KEY")  # offline: no account needed


# -- held-out evaluation --------------------------------------------------------------


HELDOUT = [
    key
    for key in (
        f"heldout_{g}_{f}"
        for g in ("mean", "best")
        for f in ("mean", "ci_low", "ci_high", "std", "episodes")
    )
]


def _records(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_heldout_records_at_eval_every_and_the_end_compile_once(tmp_path):
    from eqxevo._src.heldout import episode_fitness, heldout_evaluate, heldout_keys

    # chunks of 2 (the small experiment's, so its compiled chunk) would end at
    # 2, 4 and 6: eval_every=3 makes one end at 3 too
    exp = small("run.generations=6", "run.eval_every=3", "run.eval_episodes=7")
    before = eqx.debug.get_num_traces(episode_fitness)
    out = io.StringIO()
    summary = experiment.run_experiment(exp, tmp_path / "r", stream=out)
    # two evaluations (after 3 and 6 generations) of two genomes: one program
    assert eqx.debug.get_num_traces(episode_fitness) == before + 1
    records = _records(tmp_path / "r")
    with_heldout = [r["generation"] for r in records if "heldout_best_mean" in r]
    assert with_heldout == [2, 5]  # the records of generations 3 and 6
    last = records[-1]
    assert set(HELDOUT) <= set(last) and last["heldout_mean_episodes"] == 7
    assert last["heldout_mean_ci_low"] <= last["heldout_mean_mean"]
    assert last["heldout_mean_mean"] <= last["heldout_mean_ci_high"]
    held = summary["heldout"]
    assert held["generation"] == 6
    assert set(held) == {"mean", "best", "generation"}
    assert held["best"] == {
        "mean": last["heldout_best_mean"],
        "ci_low": last["heldout_best_ci_low"],
        "ci_high": last["heldout_best_ci_high"],
        "std": last["heldout_best_std"],
        "episodes": 7,
    }
    # the same number as a direct evaluation of the final state's mean
    built = experiment.build(exp)
    _, state = final_state(tmp_path / "r", built.initial_state())
    (key,) = heldout_keys(built.key)
    direct = heldout_evaluate(
        key,
        built.fitness,
        built.strategy.mean(state),
        7,
        filter_spec=built.strategy.filter_spec,
    )
    assert held["mean"]["mean"] == direct.mean
    # the progress display and the figure lead with it
    text = out.getvalue()
    assert "held-out evaluation at the end and every 3 generations: 2 genome(s)" in text
    half = (held["mean"]["ci_high"] - held["mean"]["ci_low"]) / 2
    assert (
        f"generation 6/6  held-out mean {held['mean']['mean']:+.4g} ± {half:.2g}  "
        "train best so far "
    ) in text
    (ax,) = fitness_figure(records).axes
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert texts[:2] == [
        "held-out: distribution mean (95% CI, 7 lifetimes)",
        "held-out: best-so-far genome (95% CI, 7 lifetimes)",
    ]
    assert "best so far (training)" in texts


def test_heldout_stream_survives_interrupt_and_resume(tmp_path, monkeypatch):
    import signal

    from eqxevo._app.interrupts import StopRequest

    # chunks of 2 and 7 held-out lifetimes, as in the test above: the same
    # compiled programs (checkpoints every 2 generations)
    exp = small("run.generations=8", "run.eval_every=4", "run.eval_episodes=7")
    experiment.run_experiment(exp, tmp_path / "full", quiet=True)
    stop = StopRequest(lambda: "stopped")
    real_update = Progress.update

    def update_then_stop(self, records, at=None):
        real_update(self, records, at)
        if self.done >= 4:  # after the evaluation at generation 4
            stop.requested, stop.signum = True, signal.SIGINT

    monkeypatch.setattr(Progress, "update", update_then_stop)
    with pytest.raises(experiment.RunInterrupted):
        experiment.run_experiment(exp, tmp_path / "part", quiet=True, stop=stop)
    monkeypatch.setattr(Progress, "update", real_update)
    part = tmp_path / "part"
    assert Checkpointer(part / "checkpoints").generations() == [2, 4]
    # resume from generation 2: the evaluation at 4 is made again, from the
    # restored state, on the same lifetimes
    shutil.rmtree(part / "checkpoints" / "4")
    summary = experiment.resume_run(part, quiet=True)
    full = (tmp_path / "full/metrics.jsonl").read_text()
    assert (part / "metrics.jsonl").read_text() == full
    assert [r["generation"] for r in _records(part) if "heldout_mean_mean" in r] == [
        3,
        7,
    ]
    full_summary = json.loads((tmp_path / "full/summary.json").read_text())
    assert summary["heldout"] == full_summary["heldout"]


def test_heldout_per_seed_and_population_algorithms_without_a_mean(tmp_path):
    from eqxevo._src.heldout import heldout_evaluate, heldout_keys

    exp = small(
        "run.num_seeds=2",
        "run.generations=2",
        "strategy.name=SimpleGA",
        "run.eval_episodes=4",
    )
    summary = experiment.run_experiment(exp, tmp_path / "r", quiet=True)
    records = _records(tmp_path / "r")
    last = [r for r in records if r["generation"] == 1]
    assert [r["seed"] for r in last] == [0, 1]
    for r in last:  # SimpleGA has no mean: only the best genome is evaluated
        assert "heldout_mean_mean" not in r and r["heldout_best_episodes"] == 4
    assert [entry["mean"] for entry in summary["heldout"]] == [None, None]
    built = experiment.build(exp)
    _, state = final_state(tmp_path / "r", built.initial_state())
    keys = heldout_keys(built.key, built.num_seeds)
    for seed in (0, 1):
        one = jax.tree.map(lambda x, k=seed: x[k], state)
        direct = heldout_evaluate(
            keys[seed],
            built.fitness,
            built.strategy.best(one),
            4,
            filter_spec=built.strategy.filter_spec,
        )
        assert summary["heldout"][seed]["best"]["mean"] == direct.mean
        assert last[seed]["heldout_best_mean"] == direct.mean
    assert not (tmp_path / "r/mean_genome.eqx").exists()
