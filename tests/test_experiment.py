import json

import jax
import pytest
from helpers import tree_equal

from eqxevo import config, experiment
from eqxevo.checkpoint import Checkpointer, CheckpointError
from eqxevo.config import ConfigError

SMALL = [
    "net.name=mlp",
    "net.options.width=8",
    "net.options.depth=1",
    "strategy.population_size=8",
    "run.lifetime=40",
    "run.generations=6",
    "run.chunk_size=2",
    "run.checkpoint_every=2",
]


def small(*extra: str) -> config.Experiment:
    return config.load(None, [*SMALL, *extra])


def final_state(run_dir, like):
    ckpt = Checkpointer(run_dir / "checkpoints")
    generation, state = ckpt.restore(
        like, ckpt.experiment(ckpt.latest()), ignore=experiment.RESUMABLE_CHANGES
    )
    ckpt.close()
    return generation, state


def test_run_writes_the_run_directory(tmp_path):
    summary = experiment.run(small(), tmp_path / "r", quiet=True)
    for name in ("config.toml", "metrics.jsonl", "fitness.png", "best_genome.eqx"):
        assert (tmp_path / "r" / name).exists(), name
    records = [
        json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()
    ]
    assert [r["generation"] for r in records] == list(range(6))
    assert summary["generations"] == 6 and not summary["interrupted"]
    assert config.load(tmp_path / "r/config.toml") == experiment.build(small()).resolved
    built, genome = experiment.load_best_genome(tmp_path / "r")
    fitness, _ = built.fitness(genome, jax.random.key(0))
    assert jax.numpy.isfinite(fitness)


def test_resume_equals_uninterrupted_run(tmp_path):
    experiment.run(small(), tmp_path / "full", quiet=True)
    experiment.run(small("run.generations=4"), tmp_path / "part", quiet=True)
    experiment.resume(tmp_path / "part", ("run.generations=6",), quiet=True)
    full = (tmp_path / "full/metrics.jsonl").read_text()
    assert (tmp_path / "part/metrics.jsonl").read_text() == full
    like = experiment.build(small()).initial_state()
    g_full, s_full = final_state(tmp_path / "full", like)
    g_part, s_part = final_state(tmp_path / "part", like)
    assert g_full == g_part == 6 and tree_equal(s_full, s_part)


def test_num_seeds_runs_and_records_every_seed(tmp_path):
    experiment.run(
        small("run.num_seeds=2", "run.generations=2"), tmp_path / "s", quiet=True
    )
    records = [
        json.loads(x) for x in (tmp_path / "s/metrics.jsonl").read_text().splitlines()
    ]
    assert [(r["generation"], r["seed"]) for r in records] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]


def test_interrupt_checkpoints_the_last_complete_chunk(tmp_path, monkeypatch):
    # Ctrl-C arrives while the host handles the third chunk (its metrics are
    # written, its state is not yet taken): the second chunk's state is saved.
    calls = {"n": 0}
    real_update = experiment.Progress.update

    def update_then_interrupt(self, records):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_update(self, records)

    monkeypatch.setattr(experiment.Progress, "update", update_then_interrupt)
    exp = small("run.checkpoint_every=100", "run.chunk_seconds=0")
    with pytest.raises(KeyboardInterrupt):
        experiment.run(exp, tmp_path / "i", quiet=True)
    assert Checkpointer(tmp_path / "i/checkpoints").latest() == 4
    monkeypatch.setattr(experiment.Progress, "update", real_update)
    experiment.resume(tmp_path / "i", quiet=True)
    experiment.run(exp, tmp_path / "u", quiet=True)
    assert (tmp_path / "i/metrics.jsonl").read_text() == (
        tmp_path / "u/metrics.jsonl"
    ).read_text()


def test_resume_rejects_trajectory_changes(tmp_path):
    experiment.run(small("run.generations=2"), tmp_path / "r", quiet=True)
    with pytest.raises(ConfigError, match="can only change"):
        experiment.resume(tmp_path / "r", ("strategy.population_size=16",), quiet=True)
    # a config edited by hand is caught by the checkpoint
    text = (tmp_path / "r/config.toml").read_text().replace("seed = 0", "seed = 1")
    (tmp_path / "r/config.toml").write_text(text)
    with pytest.raises(
        CheckpointError, match=r"run.seed: checkpoint has 0, config has 1"
    ):
        experiment.resume(tmp_path / "r", quiet=True)


def test_new_run_refuses_an_existing_run_directory(tmp_path):
    experiment.run(small("run.generations=2"), tmp_path / "r", quiet=True)
    with pytest.raises(experiment.RunDirError, match="eqxevo resume"):
        experiment.run(small(), tmp_path / "r", quiet=True)
    with pytest.raises(experiment.RunDirError, match="holds no run"):
        experiment.resume(tmp_path / "nothing", quiet=True)


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("env.name=chemotaxix", r"env.name = 'chemotaxix' is unknown; built in: "),
        ("net.name=transformer", r"net.name = 'transformer' is unknown"),
        (
            "env.params.colour=1.0",
            r"env.params.colour is not a parameter of Chemotaxis",
        ),
        ("net.options.widht=3", r"net.options: cannot build MLPPolicy"),
        (
            "strategy.name=CMA-ES",
            r"strategy 'CMA-ES': algorithm='CMA-ES'.*'CMA_ES'",
        ),
        (
            "env.name=no.such.module:Env",
            r"env.name = 'no.such.module:Env' cannot be imported",
        ),
    ],
)
def test_build_errors_name_the_key(override, match):
    with pytest.raises(ConfigError, match=match):
        experiment.build(small(override))


def test_env_params_overrides_reach_the_environment():
    built = experiment.build(small("env.params.sensor_noise=0.25"))
    assert float(built.env_params.sensor_noise) == 0.25
