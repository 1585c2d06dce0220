import errno
import logging
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import orbax.checkpoint as ocp
import pytest
from helpers import Net, sphere, tree_equal

import eqxevo
from eqxevo._app.checkpoint import Checkpointer, CheckpointError

EXPERIMENT = {
    "strategy": {"name": "snes", "population_size": 8},
    "run": {"generations": 9},
}


def run(name, generations, state=None):
    strategy = eqxevo.Strategy(name, Net(key=jr.key(0)), 8)
    result = eqxevo.evolve(
        jr.key(1), strategy, sphere, num_generations=generations, state=state
    )
    return strategy, result.state


def test_round_trip_and_resume_equals_uninterrupted(tmp_path):
    strategy, state3 = run("snes", 3)
    ckpt = Checkpointer(tmp_path / "checkpoints", keep=2)
    ckpt.save(3, state3, EXPERIMENT)
    generation, restored = ckpt.restore(strategy.init(jr.key(0)), EXPERIMENT)
    assert generation == 3 and tree_equal(restored, state3)
    _, resumed = run("snes", 2, state=restored)
    _, uninterrupted = run("snes", 5)
    assert tree_equal(resumed, uninterrupted)
    ckpt.close()


def test_restored_arrays_are_placed_as_like_leaves_are(tmp_path):
    # orbax commits what it reads; a fresh state is uncommitted, and a committed
    # argument would make a resumed run compile its programs again.
    state = {"key": jr.key(3), "x": jnp.arange(3.0), "n": jnp.int32(7)}
    ckpt = Checkpointer(tmp_path / "checkpoints")
    ckpt.save(1, state, EXPERIMENT)
    for like, committed in (
        (jax.eval_shape(lambda: state), False),
        (state, False),
        (jax.device_put(state, jax.devices()[0]), True),
    ):
        _, restored = ckpt.restore(like, EXPERIMENT)
        assert tree_equal(restored, state)
        assert restored["n"].shape == () and restored["key"].dtype == state["key"].dtype
        assert {x.committed for x in jax.tree.leaves(restored)} == {committed}
    ckpt.close()


def test_keeps_only_the_last_checkpoints(tmp_path):
    _, state = run("snes", 1)
    ckpt = Checkpointer(tmp_path / "c", keep=2)
    for g in (1, 2, 3):
        ckpt.save(g, state, EXPERIMENT)
    assert ckpt.latest() == 3
    assert sorted(p.name for p in (tmp_path / "c").iterdir() if p.name.isdigit()) == [
        "2",
        "3",
    ]
    ckpt.close()


def test_incompatible_config_is_a_clear_error(tmp_path):
    _, state = run("snes", 1)
    ckpt = Checkpointer(tmp_path / "c")
    ckpt.save(1, state, EXPERIMENT)
    other = {
        "strategy": {"name": "snes", "population_size": 16},
        "run": {"generations": 9},
    }
    with pytest.raises(
        CheckpointError, match=r"strategy.population_size: checkpoint has 8"
    ):
        ckpt.restore(state, other)
    longer = {**EXPERIMENT, "run": {"generations": 20}}
    ckpt.restore(state, longer, ignore=("run.generations",))  # allowed to differ
    strategy_cma, _ = run("cma_es", 1)
    with pytest.raises(
        CheckpointError, match=r"passes verification \(generation 1: state.inner"
    ):
        ckpt.restore(strategy_cma.init(jr.key(0)), EXPERIMENT)
    ckpt.close()


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        Checkpointer(tmp_path / "empty").restore(None, EXPERIMENT)


def test_an_unfinished_save_is_ignored(tmp_path):
    _, state = run("snes", 1)
    ckpt = Checkpointer(tmp_path / "c")
    ckpt.save(1, state, EXPERIMENT)
    # what a crash in the middle of orbax's save leaves behind
    (tmp_path / "c" / "2.orbax-checkpoint-tmp-123").mkdir()
    assert Checkpointer(tmp_path / "c").latest() == 1
    ckpt.close()


def test_a_save_on_a_full_disk_is_an_oserror_naming_it_and_leaves_no_debris(
    tmp_path, monkeypatch
):
    _, state = run("snes", 1)
    ckpt = Checkpointer(tmp_path / "c")
    ckpt.save(1, state, EXPERIMENT)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    save = ocp.CheckpointManager.save

    def full(self, step, *args, **kwargs):
        # what tensorstore leaves and raises when the disk fills mid-save
        partial = Path(self.directory) / f"{step}.orbax-checkpoint-tmp" / "state"
        partial.mkdir(parents=True)
        (partial / "d").write_bytes(b"\0" * 100)
        raise ValueError("Failed writing: No space left on device [os_error_code='28']")

    monkeypatch.setattr(ocp.CheckpointManager, "save", full)
    with pytest.raises(OSError) as info:
        ckpt.save(2, state, EXPERIMENT)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str((tmp_path / "c" / "2").resolve())
    assert info.value.__context__ is None  # no orbax traceback chained
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    ckpt.save(2, state, EXPERIMENT)  # with space again, the same checkpointer saves
    assert ckpt.generations() == [1, 2]
    ckpt.close()


def test_restoring_damaged_checkpoints_logs_nothing(tmp_path, caplog):
    _, state = run("snes", 1)
    with Checkpointer(tmp_path / "c") as ckpt:
        for g in (1, 2):
            ckpt.save(g, state, EXPERIMENT)
    for g in (1, 2):
        (tmp_path / "c" / str(g) / "_CHECKPOINT_METADATA").write_text("garbage{")
        (tmp_path / "c" / str(g) / "experiment" / "metadata").write_text("garbage{")
    caplog.set_level(logging.DEBUG)
    ckpt = Checkpointer(tmp_path / "c")
    with pytest.raises(CheckpointError, match="passes verification"):
        ckpt.restore(state, EXPERIMENT)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    ckpt.close()
    ckpt.close()  # closing twice is harmless
