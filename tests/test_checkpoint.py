import jax.random as jr
import pytest
from helpers import Net, sphere, tree_equal

import eqxevo
from eqxevo.checkpoint import Checkpointer, CheckpointError

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
