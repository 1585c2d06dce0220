"""MAP-Elites runs from a config (`[qd]`): what `eqxevo run` writes, resume bit for
bit, the population split among emitters, and bad `[qd]` values as one line."""

import json
import tomllib
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import final_state, small_experiment, tree_equal

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._app.config import ConfigError
from eqxevo._app.experiment.qd import batch_sizes
from eqxevo._src.qd.map_elites import MapElites

# L2 foraging, the mix of food eaten as the descriptor: each resource's intake
# (info entries `intake_0`, `intake_1`) averaged over the lifetime. (The study
# below is on L0 chemotaxis, where the agent spends its lifetime.)
QD = (
    "env.name=foraging",
    "qd.archive=grid",
    "qd.cells=[6, 5]",
    'qd.descriptor=["mean_intake_0", "mean_intake_1"]',
    "qd.lower=[0.0, 0.0]",
    "qd.upper=[0.01, 0.01]",
    'qd.emitters={iso = {kind = "iso_line", iso_sigma = 0.05, batch_size = 4}, '
    'es = {kind = "es", algorithm = "Sep_CMA_ES", ranking = "alternate", '
    'insert = "mean", restart = 2}}',
    "run.num_seeds=2",
)


def qd(*extra: str) -> config.Experiment:
    return small_experiment(*QD, *extra)


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    """The QD experiment run for its 6 generations: (run directory, summary)."""
    run_dir = tmp_path_factory.mktemp("qd") / "r"
    return run_dir, experiment.run_experiment(qd(), run_dir, quiet=True)


def test_a_qd_config_builds_map_elites_and_its_effective_config_is_itself():
    built = experiment.build(qd())
    assert isinstance(built.strategy, MapElites)
    assert built.strategy.population_size == 8
    assert [e.batch_size for e in built.strategy.emitters] == [4, 4]
    assert built.strategy.descriptor == ("mean_intake_0", "mean_intake_1")
    emitters = built.experiment.qd.emitters
    assert emitters["es"] == {
        "kind": "es",
        "algorithm": "Sep_CMA_ES",
        "ranking": "alternate",
        "insert": "mean",
        "restart": 2,
        "batch_size": 4,
    }
    assert experiment.build(built.experiment).experiment == built.experiment
    text = config.dumps(built.experiment)
    assert config.from_dict(tomllib.loads(text)) == built.experiment


def test_a_qd_run_writes_its_archive_and_resumes_bit_for_bit(tmp_path, six):
    # 4 generations, then resumed to 6: the metrics and the state (archive and
    # emitters) equal the run of 6; archive.png is drawn and summary.json holds
    # the QD metrics of the best seed's archive, the last records' values.
    full_dir, summary = six
    assert (full_dir / "archive.png").stat().st_size > 0
    records = [
        json.loads(x) for x in (full_dir / "metrics.jsonl").read_text().splitlines()
    ]
    last = [
        r for r in records if r["generation"] == 5 and r["seed"] == summary["best_seed"]
    ]
    for name in ("qd_score", "coverage", "max_fitness"):
        assert summary[name] == pytest.approx(last[0][name], rel=1e-6), name
    assert 0 < summary["coverage"] <= 1 and summary["generations"] == 6

    part = tmp_path / "part"
    experiment.run_experiment(qd("run.generations=4"), part, quiet=True)
    experiment.resume_run(part, ("run.generations=6",), quiet=True)
    assert (part / "metrics.jsonl").read_text() == (
        full_dir / "metrics.jsonl"
    ).read_text()
    like = experiment.build(qd()).initial_state()
    g_full, s_full = final_state(full_dir, like)
    g_part, s_part = final_state(part, like)
    assert g_full == g_part == 6 and tree_equal(s_full, s_part)
    built, genome = experiment.load_genome(part)
    fitness, _ = built.fitness(genome, jax.random.key(0))
    assert np.isfinite(fitness)


def test_eqxevo_plot_draws_a_qd_runs_archive_again_from_its_checkpoint(six):
    from click.testing import CliRunner

    from eqxevo._app.cli import main

    run_dir, _ = six
    drawn = (run_dir / "archive.png").read_bytes()
    (run_dir / "archive.png").unlink()
    result = CliRunner().invoke(main, ["plot", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert str(run_dir / "archive.png") in result.output.splitlines()
    assert (run_dir / "archive.png").read_bytes() == drawn


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("qd.emitters={a = {kind = 'iso_line', batch_size = 5}}",),
            "the emitters' batches must add up to strategy.population_size (8); "
            "batch_size gives 5",
        ),
        (
            (
                "qd.emitters={a = {kind = 'iso_line', batch_size = 5}, "
                "b = {kind = 'es'}, c = {kind = 'es'}}",
            ),
            "2 emitter(s) without one cannot share the 3 left equally",
        ),
        (
            ("qd.emitters={a = {kind = 'cma'}}",),
            'qd.emitters.a.kind = \'cma\'; allowed: "iso_line", "es"',
        ),
        (
            ("qd.emitters={a = {kind = 'iso_line', sigma = 1.0}}",),
            "qd.emitters.a: ",
        ),
        (
            ("qd.emitters={a = {kind = 'es', algorithm = 'SimpleGA'}}",),
            "ESEmitter needs a distribution-based algorithm",
        ),
        (
            ("strategy.params.std_init=0.5",),
            "strategy.params does not apply to a MAP-Elites run",
        ),
        (("qd.lower=[0.0]",), "qd.lower, qd.upper and qd.descriptor need one entry"),
        (("qd.cells=[4]",), "qd.cells = [4]: a grid needs one count per descriptor"),
        (("qd.archive=cvt",), "qd.cells = [6, 5]: a cvt archive takes one number"),
        (("qd.cells=[0, 3]",), "qd.cells[0] = 0 is out of range; it must be >= 1"),
        (("qd.lower=3",), "qd.lower must be a list of float, not empty; got 3"),
        (("qd.upper=[-1.0, 0.3]",), "qd: "),
    ],
)
def test_bad_qd_values_are_one_line(extra, message):
    with pytest.raises(ConfigError) as err:
        experiment.build(qd(*extra))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_an_unknown_descriptor_entry_lists_the_entries_there_are(tmp_path):
    with pytest.raises(ValueError, match=r"names \['mean_z'\].*'mean_intake_1'"):
        experiment.run_experiment(
            qd('qd.descriptor=["mean_intake_0", "mean_z"]', "run.generations=1"),
            tmp_path / "r",
            quiet=True,
        )


def test_emitters_without_a_batch_size_share_the_population():
    shares = batch_sizes(
        qd(
            "strategy.population_size=12",
            "qd.emitters={a = {kind = 'iso_line', batch_size = 2}, "
            "b = {kind = 'es'}, c = {kind = 'iso_line'}}",
        )
    )
    assert shares == {"a": 2, "b": 5, "c": 5}
    assert batch_sizes(qd("qd.emitters={}")) == {"iso_line": 8}


def test_describe_lists_the_qd_keys():
    text = config.describe()
    for key in ("qd.archive", "qd.cells", "qd.descriptor", "qd.emitters"):
        assert f"  {key} = " in text, key


QD_STUDY = """
[study]
name = "qd"
seeds = 2
base_arm = "iso"

[[study.arms]]
name = "cma-me"
"qd.emitters" = { cma = { kind = "es", algorithm = "CMA_ES" } }

[[study.compare]]
a = "cma-me"
b = "iso"
test = "welch"
alternative = "two-sided"
metric = "qd_score"

[env]
name = "chemotaxis"

[net]
name = "mlp"
[net.options]
width = 8
depth = 1

[strategy]
population_size = 8

[qd]
archive = "grid"
emitters = { iso = { kind = "iso_line", iso_sigma = 0.05 } }
cells = [6, 5]
lower = [-0.3, -0.3]
upper = [0.3, 0.3]

[run]
lifetime = 40
generations = 4
chunk_size = 2
chunk_seconds = 0
"""


def test_a_study_of_qd_runs_reports_and_compares_their_archives(tmp_path):
    # Two arms of MAP-Elites (iso+line, the base arm; CMA-ME) x 2 seeds: cells.csv
    # holds each run's archive figures, summary.csv summarises them, and the
    # declared test compares QD scores.
    import pandas as pd

    from eqxevo._app.study.report import write_report
    from eqxevo.study import load, run_study

    file = tmp_path / "qd.toml"
    file.write_text(QD_STUDY)
    study = load(file)
    run_study(study, tmp_path / "out", quiet=True)
    report = write_report(tmp_path / "out").parent
    cells = pd.read_csv(report / "cells.csv")
    for _, row in cells.iterrows():
        summary = json.loads(
            (tmp_path / "out" / row["run_dir"] / "summary.json").read_text()
        )
        assert row["qd_score"] == pytest.approx(summary["qd_score"])
        assert row["coverage"] == pytest.approx(summary["coverage"])
    summary = pd.read_csv(report / "summary.csv")
    assert {"qd_score_mean", "coverage_mean", "max_fitness_mean"} <= set(summary)
    test = pd.read_csv(report / "preregistered.csv").iloc[0]
    assert test["metric"] == "qd_score"
    for side, arm in (("a", "cma-me"), ("b", "iso")):
        want = cells.loc[cells["arm"] == arm, "qd_score"].mean()
        assert test[f"mean_{side}"] == pytest.approx(want)
    text = (report / "report.md").read_text()
    assert "cma-me vs iso, on qd_score" in text and "archive: final QD score" in text


def test_a_brax_ants_final_position_is_a_descriptor_without_code():
    # Brax's metrics are in the step's info, so a lifetime's summary keeps their
    # last values: where an Ant ended (traced only: no Ant is run here).
    pytest.importorskip("brax")
    import equinox as eqx

    built = experiment.build(
        config.load(
            Path(__file__).parents[1] / "examples" / "brax_ant.toml",
            [
                "run.lifetime=10",
                "qd.archive=grid",
                'qd.descriptor=["final_x_position", "final_y_position"]',
                "qd.lower=[-5.0, -5.0]",
                "qd.upper=[5.0, 5.0]",
            ],
        )
    )
    _, aux = eqx.filter_eval_shape(built.fitness, built.genome, jax.random.key(0))
    descriptor = jax.eval_shape(built.strategy.descriptors, aux)
    assert descriptor.shape == (2,)
