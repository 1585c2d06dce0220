import json

import jax
import pytest
from click.testing import CliRunner
from study_fixtures import finished_study  # noqa: F401

from eqxevo._app.cli import main


@pytest.mark.parametrize("command", ["plan", "run", "status", "report"])
def test_every_study_command_has_help(command):
    result = CliRunner().invoke(main, ["study", command, "--help"])
    assert result.exit_code == 0 and "Example" in result.output


def test_status_json_counts_cells_runs_done_and_programs(finished_study):  # noqa: F811
    result = CliRunner().invoke(
        main, ["study", "status", str(finished_study.out), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["cells"], data["runs"], data["done"], data["programs"]) == (4, 8, 8, 2)
    assert data["generations"] == {"done": 48, "total": 48}


def test_plan_shows_cells_and_programs_without_running(finished_study):  # noqa: F811
    result = CliRunner().invoke(main, ["study", "plan", str(finished_study.file)])
    assert result.exit_code == 0, result.output
    assert "4 cells x 2 seeds = 8 runs in 2 compiled programs" in result.output
    assert "program 1: 4 runs of wide," in result.output


def test_a_bad_study_file_fails_with_the_message(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[study]\nname = "x"\n[study.axes]\n"run.seed" = [1, 2]\n')
    result = CliRunner().invoke(main, ["study", "run", str(path)])
    assert result.exit_code != 0
    assert "'run.seed' cannot be set in a study" in result.output


def test_plan_measure_times_each_program_through_one_evolve_call(tmp_path):
    # one cell, one seed: one program, compiled and timed (two generations)
    from study_fixtures import TINY, write_study

    text = TINY.replace("seeds = 2", "seeds = [0]").replace("[0.05, 0.3]", "[0.05]")
    text = text.replace('[[study.arms]]\nname = "wide"\n"net.options.width" = 12\n', "")
    file = write_study(tmp_path, text)
    result = CliRunner().invoke(
        main, ["study", "plan", str(file), "--measure", "--json"]
    )
    assert result.exit_code == 0, result.output
    (program,) = json.loads(result.output)["programs"]
    measured = program["measured"]
    assert set(measured) == {"compile_s", "generation_s"}
    assert program["seconds"] == pytest.approx(
        measured["compile_s"] + measured["generation_s"] * 6
    )


# -- a bad study file: every fault found before anything is written ---------------

GOOD = '[study]\nname = "x"\nseeds = 1\n\n[env]\nname = "chemotaxis"\n'


def _refused(tmp_path, text):
    """`study run` on `text`: exit 1, OUT never created; the error's lines."""
    file = tmp_path / "study.toml"
    file.write_text(text)
    out = tmp_path / "out"
    # without the suite's shared cache, as a user runs it: OUT/.jax_cache would
    # be made if the study got that far
    shared = jax.config.values["jax_compilation_cache_dir"]
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        result = CliRunner().invoke(
            main, ["study", "run", str(file), "--out", str(out)]
        )
    finally:
        jax.config.update("jax_compilation_cache_dir", shared)
    assert result.exit_code == 1, result.output
    assert not out.exists()  # no .jax_cache, no runs/
    return result.output.removeprefix("Error: ").strip().splitlines()


UNDECIDABLE = (
    GOOD.replace("seeds = 1", "seeds = 3")
    + '[[study.arms]]\nname = "a"\n"run.lifetime" = 7\n\n'
    + '[[study.compare]]\na = "a"\nb = "base"\ntest = "mwu"\n'
)


def test_a_comparison_that_cannot_reach_significance_is_refused_naming_it(tmp_path):
    # 3 against 3: a one-sided Mann-Whitney U's smallest p is 1 / C(6, 3) = 0.05
    assert _refused(tmp_path, UNDECIDABLE) == [
        "study.compare[0] (a vs base): Mann-Whitney U with 3 seeds a side cannot "
        "reach p < 0.05 (its smallest p is 0.05); add seeds or declare another test",
        "(--allow-undecidable runs the study anyway)",
    ]
    file = tmp_path / "study.toml"
    allowed = CliRunner().invoke(
        main, ["study", "plan", str(file), "--allow-undecidable"]
    )
    assert allowed.exit_code == 0, allowed.output
    assert "warning: study.compare[0] (a vs base): Mann-Whitney U" in allowed.output
    welch = file.with_name("welch.toml")
    welch.write_text(UNDECIDABLE.replace('test = "mwu"', 'test = "welch"'))
    plain = CliRunner().invoke(main, ["study", "plan", str(welch)])
    assert plain.exit_code == 0 and "warning" not in plain.output, plain.output


def test_an_unknown_env_name_is_refused_before_out_or_its_cache_exist(tmp_path):
    # found at build time once, after OUT/.jax_cache was made
    (line,) = _refused(tmp_path, GOOD.replace('"chemotaxis"', '"chemotaxs"'))
    assert "env.name = 'chemotaxs' is unknown (did you mean 'chemotaxis'?)" in line


def test_a_value_refused_only_when_built_leaves_no_out_either(tmp_path):
    # every run is built before OUT (and its compilation cache) is made
    text = GOOD + '[net]\nname = "mlp"\n[net.options]\nwidth = -3\n'
    (line,) = _refused(tmp_path, text)
    assert "width" in line


def test_one_axis_written_twice_is_refused_naming_both_spellings(tmp_path):
    text = GOOD + (
        '[study.axes]\n"strategy.init_scale" = [0.1]\n'
        "[study.axes.strategy]\ninit_scale = [0.2]\n"
    )
    (line,) = _refused(tmp_path, text)
    assert (
        "study.axes: 'strategy.init_scale' is written twice, as "
        '"strategy.init_scale" and as strategy.init_scale'
    ) in line


@pytest.mark.parametrize(
    "study, message",
    [
        (
            "seeds = 1000000000",
            "study.seeds = 1,000,000,000 is over the limit of 100,000 runs",
        ),
        ("seeds = 1e9", "study.seeds = 1000000000.0; allowed: a count from 1 to"),
        (
            'seeds = 10\n[study.axes]\n"run.lifetime" = [{}]\n'
            '"strategy.population_size" = [{}]'.format(
                ",".join(map(str, range(1, 1001))), ",".join(map(str, range(2, 1002)))
            ),
            "the study has 10,000,000 runs (1 arm x 1000 run.lifetime x 1000 "
            "strategy.population_size x 10 seeds), over the limit of 100,000 runs",
        ),
    ],
)
def test_a_study_over_the_run_limit_is_refused_before_its_cells_exist(
    tmp_path, study, message
):
    (line,) = _refused(tmp_path, f'[study]\nname = "x"\n{study}\n')
    assert message in line


@pytest.mark.parametrize("name", ["..", ".", "a/b", "../../x", "a b"])
def test_an_arm_name_unsafe_as_a_folder_is_refused(tmp_path, name):
    text = GOOD + f'[[study.arms]]\nname = "{name}"\n"run.lifetime" = 5\n'
    (line,) = _refused(tmp_path, text)
    assert line == (
        f"study.arms[0].name = {name!r}; a name becomes a folder name: use "
        "letters, digits, '-', '_' and '.' (not dots only)"
    )


def test_study_name_and_base_arm_are_folder_safe_names_too(tmp_path):
    text = GOOD.replace('name = "x"', 'name = ".."\nbase_arm = "a/b"')
    lines = _refused(tmp_path, text)
    assert lines[0] == "2 errors in the study file:"
    assert lines[1].strip().startswith("study.name = '..'; a name becomes a folder")
    assert lines[2].strip().startswith("study.base_arm = 'a/b'; a name becomes")


def test_run_seed_is_refused_in_the_experiment_as_in_an_arm(tmp_path):
    text = GOOD + '[run]\nseed = 3\n[[study.arms]]\nname = "a"\n"run.seed" = 4\n'
    tail = "'run.seed' cannot be set in a study: a study's seeds come from study.seeds"
    lines = _refused(tmp_path, text)
    assert [line.strip() for line in lines[1:]] == [
        f"[run] in the study file: {tail}",
        f"study.arms[0] ('a'): {tail}",
    ]


def test_a_gymnax_name_typo_is_reported_under_env_name_with_a_close_match(tmp_path):
    pytest.importorskip("gymnax")
    (line,) = _refused(tmp_path, GOOD.replace('"chemotaxis"', '"gymnax:CartPol-v1"'))
    assert line.startswith(
        "env.name = 'gymnax:CartPol-v1' is unknown (did you mean "
        "'gymnax:CartPole-v1'?); gymnax registers: "
    )
    assert "env.options" not in line


@pytest.mark.parametrize(
    "text, message",
    [
        (
            GOOD.replace("seeds", "sedes"),
            "unknown key study.sedes (did you mean study.seeds?); allowed: study.name",
        ),
        (
            GOOD + '[study.slurm]\npartiton = "gpu"\n',
            "unknown key study.slurm.partiton (did you mean study.slurm.partition?)",
        ),
        (
            GOOD + '[study.axes]\n"env.parms.x" = [1]\n',
            "unknown key 'env.parms.x' (did you mean env.params?); [env] has:",
        ),
        (
            "[stdy]\n" + GOOD,
            "unknown top-level key 'stdy' in the study file (did you mean study?)",
        ),
    ],
)
def test_a_study_key_typo_gets_a_did_you_mean(tmp_path, text, message):
    (line,) = _refused(tmp_path, text)
    assert message in line


def test_every_independent_fault_is_listed_at_once_one_line_each(tmp_path):
    text = (
        '[study]\nname = "x/y"\nseeds = 0\ncolour = "red"\n'
        '[study.axes]\n"env.bogus" = [1]\n"run.lifetime" = []\n'
        '[[study.arms]]\nname = ".."\n"run.lifetime" = 5\n'
        '[[study.arms]]\nname = "b"\n'
        "[study.slurm]\ngpus = 1\n[run]\nnum_seeds = 2\n"
    )
    header, *lines = _refused(tmp_path, text)
    assert header == "9 errors in the study file:"
    expected = [
        "[run] in the study file: 'run.num_seeds' cannot be set in a study",
        "unknown key study.colour; allowed:",
        "study.seeds = 0; it must be >= 1",
        "study.name = 'x/y'; a name becomes a folder name",
        "study.axes.\"env.bogus\": unknown key 'env.bogus'",
        'study.axes."run.lifetime" = []; an axis must be a non-empty list',
        "study.arms[0].name = '..'; a name becomes a folder name",
        "study.arms[1] ('b') changes no key",
        "unknown key study.slurm.gpus; allowed: study.slurm.partition",
    ]
    assert len(lines) == len(expected)
    for line, phrase in zip(lines, expected, strict=True):
        assert line.startswith("  ") and phrase in line, (line, phrase)


# In a fresh process (the device count is fixed when JAX starts): `study run`
# and `study tune --devices 2` of a gymnax study, whose loading imports gymnax,
# which starts JAX. The commands must make the cores devices before that; the
# work itself is replaced by a spy that prints the mesh it was handed.
_GYMNAX_DEVICES = """
import sys
from click.testing import CliRunner
import eqxevo._app.study.executor as executor
import eqxevo._app.study.tune as tune
from eqxevo._app.cli import main

meshes = []
def spy(study, out, chosen, **kwargs):
    meshes.append(None if chosen.mesh is None else chosen.mesh.size)
    return {"done": 0, "runs": 0, "arms": {}, "trials": 0}
executor.run_study = tune.tune = spy
file, out = sys.argv[1:]
for command in ("run", "tune"):
    args = ["study", command, file, "--out", out, "--devices", "2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, (result.output, result.exception)
print(meshes)
"""


def test_devices_are_cores_even_when_loading_the_study_starts_jax(tmp_path):
    import subprocess
    import sys

    file = tmp_path / "gymnax.toml"
    file.write_text(
        '[study]\nname = "g"\nseeds = 2\n'
        '[env]\nname = "gymnax:BernoulliBandit-misc"\n'
        '[net]\nname = "mlp"\n[strategy]\npopulation_size = 4\n'
        "[run]\ngenerations = 1\nlifetime = 4\n"
    )
    command = [sys.executable, "-c", _GYMNAX_DEVICES, str(file), str(tmp_path / "o")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "[2, 2]"


# -- a signal while the study file loads ------------------------------------------

_SIGNAL_WHILE_LOADING = """
import os, signal, sys, time
import eqxevo._app.study.spec as spec

def load(file):  # loading a study may import a package that starts JAX
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(60)

spec.load = load
sys.argv = ["eqxevo", *sys.argv[1:]]
from eqxevo.__main__ import main
main()
"""


@pytest.mark.parametrize("command", ["run", "tune"])
def test_a_signal_while_the_study_loads_names_the_command_that_continues(
    tmp_path, command
):
    import subprocess
    import sys

    file, out = tmp_path / "study.toml", tmp_path / "out"
    file.write_text(GOOD)
    args = ["study", command, str(file), "--out", str(out), "--devices", "2"]
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_LOADING, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 143, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"every run keeps its last saved chunk; continue with "
        f"`eqxevo study {command} {file} --out {out}`"
    )
    assert "Traceback" not in done.stderr
    assert not out.exists()
