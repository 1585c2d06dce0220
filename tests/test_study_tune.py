"""`eqxevo study tune`: the [study.tune] table's faults, proposals that depend only
on the record, the choice `study run` evaluates, and resuming after SIGTERM and
SIGKILL with real processes (eqxevo._app.study.tune, tuning)."""

import json
import os
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import equinox as eqx
import numpy as np
import pytest
from click.testing import CliRunner
from study_fixtures import TINY, write_study

from eqxevo._app.cli import main
from eqxevo._app.study.runner import read_summary, run_dir
from eqxevo._app.study.spec import from_dict
from eqxevo._app.study.tune import (
    propose,
    read_chosen,
    trial_runs,
    tune,
    tune_dir,
    tuning_lines,
    with_tuned,
)
from eqxevo._src.program import run_chunk
from eqxevo.study import StudyError, load

TUNE = """
[study.tune]
seeds = [100, 101]
trials = 4
batch = 2

[study.tune.space]
"strategy.params.std_init" = { low = 0.05, high = 1.0, log = true }

[[study.compare]]
a = "wide"
b = "base"
test = "welch"
effect = 0.5
"""

# Two arms of two shapes (two programs), no axes; 4 trials of 2 seeds per arm.
TUNED = (
    TINY.replace('"env.params.sensor_noise" = [0.05, 0.3]', "")
    .replace("[study.axes]\n", "")
    .replace("generations = 6", "generations = 4")
    .replace('name = "tiny"', 'name = "tiny-tune"')
    + TUNE
)


def _data(text: str) -> dict:
    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(
            ("seeds = [100, 101]", "seeds = [1, 100]"),
            r"share seed 1; tuning seeds",
            id="overlapping-seed",
        ),
        pytest.param(
            ("seeds = [100, 101]", "seeds = 2"),
            r"share seeds 0, 1; tuning seeds",
            id="overlapping-count",
        ),
        pytest.param(
            ('"strategy.params.std_init" = { low = 0.05, high = 1.0, log = true }', ""),
            r"gives arm 'base' no search space",
            id="no-space",
        ),
        pytest.param(
            ("low = 0.05, high = 1.0", "low = 1.0, high = 0.05"),
            r"low < high",
            id="low-above-high",
        ),
        pytest.param(
            ("low = 0.05", "low = 0.0"), r"log = true needs low > 0", id="log-from-zero"
        ),
        pytest.param(
            ("log = true", "lg = true"),
            r"std_init\": unknown key 'lg' \(did you mean log\?\)",
            id="misspelt-range-key",
        ),
        pytest.param(
            ('"strategy.params.std_init"', '"strategy.nope"'),
            r"unknown key",
            id="unknown-config-key",
        ),
        pytest.param(
            ("trials = 4\n", ""), r"study.tune.trials is missing", id="no-trials"
        ),
        pytest.param(
            ("batch = 2", 'sampler = "cma"'),
            r"study.tune.sampler = 'cma'",
            id="unknown-sampler",
        ),
        pytest.param(
            ("batch = 2", "[study.tune.arms.nope]\nx = 1"),
            r"study.tune.arms.nope is",
            id="unknown-arm",
        ),
        pytest.param(
            ("batch = 2", "budget = 2"),
            r"unknown key study.tune.budget",
            id="unknown-tune-key",
        ),
    ],
)
def test_a_faulty_tune_table_is_refused_in_one_line(change, message):
    with pytest.raises(StudyError, match=message):
        from_dict(_data(TUNED.replace(*change)))


def test_an_arm_may_not_fix_a_tuned_key_nor_an_axis_be_tuned():
    fixed = TUNED.replace(
        '"net.options.width" = 12', '"net.options.width" = 12\n"strategy.params" = 1'
    ).replace('"strategy.params.std_init"', '"strategy.params"')
    with pytest.raises(StudyError, match=r"arm 'wide' sets 'strategy.params', which"):
        from_dict(_data(fixed))
    axis = TUNED.replace("[study]", '[study.axes]\n"strategy.population_size" = [8]\n')
    axis = axis.replace("[study.axes]", "[study]\n[study.axes]", 1)
    axis = axis.replace(
        '"strategy.params.std_init" = {',
        '"strategy.population_size" = {choices=[8]}\n#',
    )
    with pytest.raises(
        StudyError, match=r"searches 'strategy.population_size', which is"
    ):
        from_dict(_data(axis))


def test_tuned_settings_need_a_tune_and_every_arm():
    with pytest.raises(StudyError, match=r"study.tuned is set but the study has no"):
        from_dict(_data(TINY.replace("seeds = 2", "seeds = 2\ntuned = {}")))
    data = _data(TUNED)
    data["study"]["tuned"] = {"base": {"strategy.params.std_init": 0.1}}
    with pytest.raises(StudyError, match=r"must give every arm's settings"):
        from_dict(data)


def test_the_commands_refuse_a_study_without_its_tune_and_write_nothing(tmp_path):
    runner = CliRunner()
    plain = write_study(tmp_path, TINY, "plain.toml")
    result = runner.invoke(
        main, ["study", "tune", str(plain), "--out", str(tmp_path / "a")]
    )
    assert result.exit_code != 0
    assert "declares no [study.tune]" in result.output
    tuned = write_study(tmp_path, TUNED, "tuned.toml")
    result = runner.invoke(
        main, ["study", "run", str(tuned), "--out", str(tmp_path / "b")]
    )
    assert result.exit_code != 0
    assert "holds no finished tune: run `eqxevo study tune" in result.output
    overlap = write_study(tmp_path, TUNED.replace("[100, 101]", "[1, 100]"), "o.toml")
    result = runner.invoke(
        main, ["study", "tune", str(overlap), "--out", str(tmp_path / "c")]
    )
    assert result.exit_code != 0 and "share seed 1" in result.output
    assert len(result.output.strip().splitlines()) == 1
    result = runner.invoke(
        main, ["study", "plan", str(tuned), "--out", str(tmp_path / "d"), "--power"]
    )
    assert result.exit_code != 0 and "--power needs a finished tune" in result.output
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_proposals_depend_only_on_the_record_and_the_trial_number():
    study = from_dict(_data(TUNED))
    settings = study.tune
    assert settings is not None
    first = propose(settings, "base", [], range(0, 2))
    assert first == propose(settings, "base", [], range(0, 2))
    # A batch cut short by a kill: its other trials are proposed as before.
    assert propose(settings, "base", [], range(1, 2)) == first[1:]
    assert first != propose(settings, "wide", [], range(0, 2))  # seeded per arm
    assert first[0] != first[1]
    for params in first:
        assert 0.05 <= params["strategy.params.std_init"] <= 1.0
    runs = trial_runs(study, "wide", 3, first[0])
    assert [r.id for r in runs] == ["wide+t0003/seed-100", "wide+t0003/seed-101"]
    assert runs[0].experiment.strategy.params == {
        "std_init": first[0]["strategy.params.std_init"]
    }
    assert runs[0].experiment.net.options["width"] == 12


def test_int_float_and_categorical_dimensions_propose_their_own_types():
    space = """
"strategy.population_size" = { low = 8, high = 32, step = 8 }
"strategy.name" = { choices = ["cma_es", "sep_cma_es", "snes"] }
"strategy.params.std_init" = { low = 0.1, high = 1.0, step = 0.1 }
"""
    text = TUNED.replace(
        '"strategy.params.std_init" = { low = 0.05, high = 1.0, log = true }', space
    )
    study = from_dict(_data(text))
    assert study.tune is not None
    proposals = propose(study.tune, "wide", [], range(0, 2))
    assert proposals == propose(study.tune, "wide", [], range(0, 2))
    for params in proposals:
        assert params["strategy.population_size"] in (8, 16, 24, 32)
        assert isinstance(params["strategy.population_size"], int)
        assert params["strategy.name"] in ("cma_es", "sep_cma_es", "snes")
        std = params["strategy.params.std_init"]
        assert isinstance(std, float) and round(std * 10) == pytest.approx(std * 10)
        (run, _) = trial_runs(study, "wide", 0, params)
        assert run.experiment.strategy.name == params["strategy.name"]
        assert (
            run.experiment.strategy.population_size
            == params["strategy.population_size"]
        )


def _trials(journal: Path) -> list[tuple]:
    """Each recorded trial: (arm's study, settings, score, per-run scores)."""
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    trials = [
        (r["study_id"], r["params"], r["value"], r["user_attrs"])
        for r in rows
        if "params" in r
    ]
    return sorted(trials, key=lambda t: (t[0], t[3]["trial"]))


def _tune_here(folder: Path) -> int:
    """TUNED tuned in this process, in FOLDER/out; the programs it compiled."""
    file = write_study(folder, TUNED)
    before = eqx.debug.get_num_traces(run_chunk)
    tune(load(file), folder / "out", quiet=True)
    return eqx.debug.get_num_traces(run_chunk) - before


# One test, so that the reference tune runs once (xdist would run a shared
# fixture once per worker).
@pytest.mark.slow
def test_a_tune_chooses_the_best_trials_sizes_seeds_and_resumes_after_kills(tmp_path):
    tuned = tmp_path / "reference"
    # Two shapes, two programs; the second batch reuses both.
    assert _tune_here(tuned) == 2
    _chooses_each_arms_best_trial_and_study_run_evaluates_it(tuned)
    _plan_power_sizes_each_comparison_from_the_tuned_spread(tuned)
    _a_tune_killed_or_preempted_resumes_to_the_same_choice(tmp_path / "killed", tuned)


def _chooses_each_arms_best_trial_and_study_run_evaluates_it(tuned: Path) -> None:
    out = tuned / "out"
    study = load(tuned / "tiny.toml")
    trials = _trials(tune_dir(out) / "optuna.jsonl")
    assert len(trials) == 2 * 4  # the same budget for each arm
    chosen = read_chosen(out)
    for arm_id, arm in enumerate(study.arms):
        mine = [t for t in trials if t[0] == arm_id]
        assert [t[3]["trial"] for t in mine] == [0, 1, 2, 3]
        for _, params, value, attrs in mine:
            runs = trial_runs(study, arm, attrs["trial"], params)
            scores = [
                read_summary(run_dir(tune_dir(out), r))["heldout"]["mean"]["mean"]
                for r in runs
            ]
            assert [s["score"] for s in attrs["scores"]] == scores
            assert [s["seed"] for s in attrs["scores"]] == [100, 101]
            assert value == np.mean(scores)
        best = max(mine, key=lambda t: t[2])
        assert chosen["arms"][arm]["settings"] == best[1]
        assert chosen["arms"][arm]["trial"] == best[3]["trial"]
    # `study run` evaluates the chosen settings on the study's own seeds.
    evaluated = with_tuned(study, out)
    assert evaluated.tuned == {a: chosen["arms"][a]["settings"] for a in study.arms}
    for run in evaluated.runs:
        assert run.seed in (0, 1)
        (value,) = evaluated.tuned[run.cell.arm].values()
        assert run.experiment.strategy.params == {"std_init": value}
    # The report states each arm's budget and chosen settings.
    lines = tuning_lines(study, out)
    assert "from 4 trials per arm, 2 at a time" in lines[0]
    assert "tuning seeds 100, 101" in lines[0]
    for arm in study.arms:
        entry = chosen["arms"][arm]
        (value,) = entry["settings"].values()
        row = f"| {arm} | 4 | {entry['trial']} | {entry['score']:.4g} | "
        assert f"{row}strategy.params.std_init = {value:.4g} |" in lines
    # A finished tune is a no-op: nothing is run or recorded again.
    journal = (tune_dir(out) / "optuna.jsonl").read_text()
    again = tune(study, out, quiet=True)
    assert again == chosen
    assert (tune_dir(out) / "optuna.jsonl").read_text() == journal
    # A tune folder of another study is refused.
    other = load(
        write_study(tuned, TUNED.replace("lifetime = 40", "lifetime = 30"), "o.toml")
    )
    with pytest.raises(
        StudyError, match=r"holds a tune of another study \(it differs in experiment\)"
    ):
        tune(other, out, quiet=True)


def _plan_power_sizes_each_comparison_from_the_tuned_spread(tuned: Path) -> None:
    from eqxevo._app.study.power import seeds_needed

    out = tuned / "out"
    result = CliRunner().invoke(
        main,
        [
            "study",
            "plan",
            str(tuned / "tiny.toml"),
            "--out",
            str(out),
            "--power",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)["power"]
    chosen = read_chosen(out)["arms"]
    sd = {
        arm: np.std([s["score"] for s in chosen[arm]["scores"]], ddof=1)
        for arm in ("wide", "base")
    }
    assert row["sd_a"] == sd["wide"] and row["sd_b"] == sd["base"]
    comparison = load(tuned / "tiny.toml").compare[0]
    assert row["seeds_needed"] == seeds_needed(comparison, sd["wide"], sd["base"], 0.05)
    assert row["seeds"] == 2 and row["tuning_seeds"] == 2
    text = (
        CliRunner()
        .invoke(
            main,
            ["study", "plan", str(tuned / "tiny.toml"), "--out", str(out), "--power"],
        )
        .output
    )
    assert f"{row['seeds_needed']} seeds per arm for power 0.8" in text


def _tune_until(file: Path, out: Path, log: Path, ready) -> subprocess.Popen:
    """`eqxevo study tune FILE --out OUT` in a child process, returned as soon as
    `ready()` holds."""
    command = [sys.executable, "-m", "eqxevo", "study", "tune"]
    command += [str(file), "--out", str(out), "--quiet"]
    with log.open("wb") as stderr:
        child = subprocess.Popen(command, stderr=stderr)
    deadline = time.monotonic() + 300
    while not ready():
        assert child.poll() is None, log.read_text()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return child


def _a_tune_killed_or_preempted_resumes_to_the_same_choice(
    tmp_path: Path, tuned: Path
) -> None:
    file = write_study(tmp_path, TUNED)
    out = tmp_path / "out"
    journal = tune_dir(out) / "optuna.jsonl"

    def checkpointed() -> bool:
        return any(out.glob("tune/runs/*/seed-*/checkpoints/*"))

    # A SLURM pre-emption: SIGTERM in the first batch, the job requeued.
    child = _tune_until(file, out, tmp_path / "log1", checkpointed)
    os.kill(child.pid, signal.SIGTERM)
    assert child.wait() == 128 + signal.SIGTERM
    assert not journal.exists() or not _trials(journal)

    # SIGKILL once the first batch is recorded and the second has begun.
    def second_batch() -> bool:
        return journal.exists() and any(
            out.glob("tune/runs/*+t0002/seed-*/checkpoints/*")
        )

    child = _tune_until(file, out, tmp_path / "log2", second_batch)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert read_chosen(out) == {}
    # Resumed here (its programs are compiled in this process already).
    tune(load(file), out, quiet=True)
    reference = tuned / "out"
    assert _trials(journal) == _trials(tune_dir(reference) / "optuna.jsonl")
    assert read_chosen(out) == read_chosen(reference)


def test_a_journal_line_cut_short_by_a_kill_is_dropped_with_one_line(tmp_path, capsys):
    from eqxevo._app.study.tune import _records, _storage

    path = tmp_path / "optuna.jsonl"
    storage = _storage(path)
    assert _records(storage, "base") == []
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"op_code":4,"study_id":0,"datet')  # a kill mid-write
    storage = _storage(path)
    assert path.read_bytes() == whole
    assert "dropped its last line, cut short by a kill" in capsys.readouterr().err
    assert _records(storage, "base") == []
