import equinox as eqx
import jax.numpy as jnp
import pytest
from study_fixtures import TINY, finished_study, write_study  # noqa: F401

from eqxevo._app.study.runner import run_dir
from eqxevo._app.study.spec import from_dict
from eqxevo._src.program import run_chunk
from eqxevo.study import load, plan, run_study

BASE = {
    "env": {"name": "chemotaxis"},
    "net": {"name": "mlp", "options": {"width": 8, "depth": 1}},
    "strategy": {"population_size": 8},
    "run": {"lifetime": 40, "generations": 4},
}


def _programs(axes=None, arms=None, seeds=2, **table):
    study = from_dict(
        {
            "study": {"name": "s", "seeds": seeds, "axes": axes or {}, **table}
            | ({"arms": arms} if arms else {}),
            **BASE,
        }
    )
    return study, plan(study)


def test_seeds_and_traced_params_share_one_program():
    # env params, an array-valued strategy param and seeds: 4 cells, 1 program
    study, programs = _programs(
        {
            "env.params.sensor_noise": [0.05, 0.3],
            "strategy.params.std_init": [0.05, 0.2],
        }
    )
    assert len(study.cells) == 4 and len(study.runs) == 8
    assert [len(p.members) for p in programs] == [8]


@pytest.mark.parametrize(
    "axes",
    [
        {"net.options.width": [8, 12]},  # shapes
        {"run.lifetime": [40, 50]},  # a static lifetime
        {"strategy.name": ["snes", "pgpe"]},  # code
        {"run.generations": [4, 5]},  # what evolve takes
        {"strategy.population_size": [8, 16]},
    ],
    ids=lambda a: next(iter(a)),
)
def test_runs_that_differ_in_shape_or_code_get_programs_of_their_own(axes):
    _, programs = _programs(axes)
    assert len(programs) == 2
    for program in programs:
        assert len(program.cells) == 1 and len(program.members) == 2


def test_max_runs_per_program_splits_a_group():
    _, programs = _programs(
        {"env.params.sensor_noise": [0.05, 0.3]}, seeds=3, max_runs_per_program=4
    )
    assert [len(p.members) for p in programs] == [4, 2]


def test_strategy_params_are_traced_arrays_whether_grouped_or_alone():
    _, programs = _programs({"strategy.params.std_init": [0.05, 1]})
    values = [m.built.strategy.params.std_init for m in programs[0].members]
    assert all(v.dtype == jnp.float32 for v in values)  # the int 1 became a float


def test_a_study_compiles_fewer_programs_than_it_has_cells(finished_study):  # noqa: F811
    study = load(finished_study.file)
    assert len(study.cells) == 4
    assert finished_study.traces == 2  # counted: one trace per program


def test_a_cell_gives_the_same_bits_grouped_and_alone(tmp_path, finished_study):  # noqa: F811
    # the same cell (and seed) alone in a study of its own
    alone = (
        TINY.replace("seeds = 2", "seeds = [1]")
        .replace("[0.05, 0.3]", "[0.3]")
        .replace('[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', "")
    )
    study = load(write_study(tmp_path, alone))
    assert [c.name for c in study.cells] == ["env.params.sensor_noise=0.3"]
    before = eqx.debug.get_num_traces(run_chunk)
    run_study(study, tmp_path / "out", quiet=True)
    assert eqx.debug.get_num_traces(run_chunk) - before == 1
    grouped = load(finished_study.file)
    (run,) = study.runs
    (twin,) = [r for r in grouped.runs if r.id == f"base,{run.id}"]
    mine = (run_dir(tmp_path / "out", run) / "metrics.jsonl").read_text()
    theirs = (run_dir(finished_study.out, twin) / "metrics.jsonl").read_text()
    assert mine == theirs and len(mine.splitlines()) == 6
