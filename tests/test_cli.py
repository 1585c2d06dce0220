import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import pytest
from click.testing import CliRunner
from evosax.algorithms import algorithms
from helpers import SAVED, handles_sigterm, tree_equal

from eqxevo import experiment
from eqxevo._app import config
from eqxevo._app.checkpoint import Checkpointer
from eqxevo._app.cli import main
from eqxevo._app.interrupts import SAME_SIGNAL_S

SMALL = [
    "net.name=mlp",
    "net.options.width=8",
    "net.options.depth=1",
    "strategy.population_size=8",
    "run.lifetime=40",
    "run.generations=4",
    "run.chunk_size=2",
]


def sets(items):
    return [arg for item in items for arg in ("--set", item)]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One run made from the command line and shared by the tests of `run`,
    `resume`, `plot` and `eval`: `run` (4 generations, 6 held-out lifetimes),
    `resume` to 6 generations, then `plot`. Returns the run directory and the
    three commands' results."""
    out = tmp_path_factory.mktemp("cli")
    runner = CliRunner()
    ran = runner.invoke(
        main,
        [
            "run",
            *sets([*SMALL, "run.eval_episodes=6"]),
            "--out",
            str(out),
            "--name",
            "r",
            "--quiet",
        ],
    )
    assert ran.exit_code == 0, ran.output
    resumed = runner.invoke(
        main, ["resume", str(out / "r"), "--set", "run.generations=6", "--quiet"]
    )
    assert resumed.exit_code == 0, resumed.output
    plotted = runner.invoke(main, ["plot", str(out / "r")])
    return out / "r", ran, resumed, plotted


def test_run_resume_and_plot_from_the_command_line(cli_run):
    run_dir, ran, resumed, plotted = cli_run
    assert ran.output.startswith("held-out fitness of the distribution mean ")
    assert "best training fitness" in ran.output
    assert "after 6 generations" in resumed.output
    assert plotted.exit_code == 0, plotted.output
    assert (run_dir / "trajectory.png").read_bytes()[:4] == b"\x89PNG"


def test_run_errors_are_messages_not_tracebacks(tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        main, ["run", "--set", "run.generation=3", "--out", str(tmp_path)]
    )
    assert result.exit_code == 1
    assert "did you mean run.generations" in result.output
    result = runner.invoke(
        main, ["run", *sets([*SMALL, "strategy.name=CMA-ES"]), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1 and "'CMA_ES'" in result.output
    result = runner.invoke(
        main, ["run", *sets(SMALL), "--devices", "3", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "--devices 3: this machine has" in result.output  # (JAX runs in-process)


def test_strategies_lists_presets_and_evosax_algorithms():
    result = CliRunner().invoke(main, ["strategies"])
    assert result.exit_code == 0
    assert "snes" in result.output and "CMA_ES" in result.output
    rows = json.loads(CliRunner().invoke(main, ["strategies", "--json"]).output)
    assert {"name", "kind", "family"} <= set(rows[0])


def test_every_command_has_help_with_an_example():
    for command in ([], ["run"], ["resume"], ["plot"], ["eval"], ["strategies"]):
        result = CliRunner().invoke(main, [*command, "--help"])
        assert result.exit_code == 0
        assert "Example" in result.output
    text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "run.checkpoint_every" in text
    assert "run.eval_every = 0  # int >= 0; held-out evaluation every" in text
    assert "run.eval_episodes = 32  # int >= 1; held-out lifetimes" in text


# -- interrupts at every moment -------------------------------------------------------

LONG = [
    "net.name=mlp",
    "net.options.width=8",
    "net.options.depth=1",
    "strategy.population_size=32",
    "run.lifetime=1000",
    "run.generations=60",
    "run.chunk_seconds=0.3",
    "run.checkpoint_every=4",
]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """`LONG` run from start to end without a stop: the run a stopped or killed
    run, resumed, must equal (shared by the two tests below)."""
    out = tmp_path_factory.mktemp("uninterrupted")
    full = CliRunner().invoke(
        main, ["run", *sets(LONG), "--out", str(out), "--name", "full", "--quiet"]
    )
    assert full.exit_code == 0, full.output
    return out / "full"


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_uninterrupted_run(tmp_path, uninterrupted):
    command = [sys.executable, "-m", "eqxevo", "run", *sets(LONG), "--quiet"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    killed = subprocess.Popen(
        [*command, "--out", str(tmp_path), "--name", "killed"], env=env
    )
    checkpoints = tmp_path / "killed" / "checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and killed.poll() is None:
        done = [int(p.name) for p in checkpoints.glob("*") if p.name.isdigit()]
        if done and max(done) >= 8:
            break
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL, "the run finished before it was killed"
    latest = Checkpointer(checkpoints).latest()
    assert latest is not None and latest < 60

    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "eqxevo",
            "resume",
            str(tmp_path / "killed"),
            "--quiet",
            # the rest on both cores: results do not depend on the devices
            "--devices",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr

    # Fitness statistics and the strategy state are bit-identical across device
    # counts; an aux summary computed inside the lifetime (L0's mean distance)
    # may differ in the last bit, as XLA:CPU contracts multiply-adds differently
    # in the sharded program (docs/performance.md, "Determinism").
    killed_log = [
        json.loads(line)
        for line in (tmp_path / "killed/metrics.jsonl").read_text().splitlines()
    ]
    full_log = [
        json.loads(line)
        for line in (uninterrupted / "metrics.jsonl").read_text().splitlines()
    ]
    assert len(killed_log) == len(full_log) == 60
    for a, b in zip(killed_log, full_log, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if k.startswith("aux."):
                assert a[k] == pytest.approx(b[k], rel=1e-6, abs=1e-12), k
            else:
                assert a[k] == b[k], k
    like = experiment.build(config.load(uninterrupted / "config.toml")).initial_state()
    states = []
    for run_dir in (tmp_path / "killed", uninterrupted):
        ckpt = Checkpointer(run_dir / "checkpoints")
        states.append(ckpt.restore(like, ckpt.experiment(60))[1])
        ckpt.close()
    assert tree_equal(*states)


# The process guard's line (eqxevo/__main__.py): the signal came before `run`
# took signals over.
GUARD = re.compile(r"^eqxevo( run)?: interrupted \((Ctrl-C|SIGTERM)\)")


def _checkpoint_tmp(run_dir):
    return any(".orbax-checkpoint-tmp" in p.name for p in run_dir.glob("checkpoints/*"))


def _xla_compiling_the_chunk(stderr_text):
    """Whether XLA has begun to compile the chunk program (the log line JAX writes
    with JAX_LOG_COMPILES=1 when its lowering is done and compilation starts)."""
    return "Finished jaxpr to MLIR module conversion jit(run_chunk)" in stderr_text


def _metrics_lines(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


# (name, signals, when): `when(process, run_dir, stderr_text)` says when to send.
MOMENTS = [
    ("at-start", [signal.SIGTERM], lambda p, d, e: handles_sigterm(p.pid)),
    ("tracing", [signal.SIGINT], lambda p, d, e: "compiling..." in e),
    ("compiling", [signal.SIGTERM], lambda p, d, e: _xla_compiling_the_chunk(e)),
    ("first-chunk", [signal.SIGINT], lambda p, d, e: "compiled in" in e),
    ("running", [signal.SIGTERM], lambda p, d, e: _metrics_lines(d) >= 6),
    ("running-late", [signal.SIGINT], lambda p, d, e: _metrics_lines(d) >= 20),
    ("checkpointing", [signal.SIGTERM], lambda p, d, e: _checkpoint_tmp(d)),
    ("twice", [signal.SIGINT, signal.SIGINT], lambda p, d, e: _metrics_lines(d) >= 9),
]
# A second Ctrl-C within SAME_SIGNAL_S of the first is the same one (a wrapper's
# copy): "twice" sends it later, into fixed chunks of 1000 generations (about
# 7 s; paced "3 s" chunks ran 0.25 s on CI), the second chunk still running.
TWICE = ["run.generations=3000", "run.chunk_seconds=0", "run.chunk_size=1000"]


def _interrupt(tmp_path, moment):
    name, signals, when = moment
    run_dir = tmp_path / name
    err_path = tmp_path / f"{name}.err"
    command = [sys.executable, "-m", "eqxevo", "run", *sets(LONG)]
    if name == "twice":
        command += sets(TWICE)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if name == "compiling":
        # Its signal lands while XLA compiles the chunk program, which JAX's
        # compile log says has begun; compiled afresh, from a cache of its own
        # (empty), not the shared one, where `uninterrupted` or the SIGKILL test
        # may have left the program ready to load at once.
        env["JAX_LOG_COMPILES"] = "1"
        env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "cold-cache")
    with err_path.open("w") as err:
        process = subprocess.Popen(
            [*command, "--out", str(tmp_path), "--name", name],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            if when(process, run_dir, err_path.read_text()):
                break
            time.sleep(0.002)
        for k, signum in enumerate(signals):
            if k:
                time.sleep(SAME_SIGNAL_S + 0.2)
            if process.poll() is None:
                process.send_signal(signum)
        code = process.wait(timeout=240)
    return name, signals, code, err_path.read_text(), run_dir


@pytest.mark.slow
def test_signals_at_every_moment_end_cleanly_with_a_true_message(
    tmp_path, uninterrupted
):
    """Ctrl-C/SIGTERM while starting, tracing, compiling, running and saving: the
    exit is 130/143 (never a signal death), the last line is true, and a run
    stopped mid-way resumes to the uninterrupted run's metrics."""
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda m: _interrupt(tmp_path, m), MOMENTS))
    for name, signals, code, err, _ in outcomes:
        print(name, [s.name for s in signals], code, "|", err.strip().splitlines()[-2:])
    for name, signals, code, err, run_dir in outcomes:
        assert "Traceback" not in err and "core dumped" not in err, (name, err)
        if code == 0:  # finished before the signal landed: a true report
            assert "run directory" not in err, name
            continue
        assert code == 128 + signals[0], (name, code, err)
        last = err.strip().splitlines()[-1]
        match = SAVED.match(last)
        if last == "no checkpoint yet: nothing to resume" or GUARD.match(last):
            assert Checkpointer(run_dir / "checkpoints").latest() is None, name
        else:
            assert match, (name, last)
            generation = int(match.group(1))
            assert match.group(2) == str(run_dir), name
            like = experiment.build(config.load(run_dir / "config.toml"))
            ckpt = Checkpointer(run_dir / "checkpoints")
            restored, _ = ckpt.restore(
                jax.eval_shape(like.initial_state),
                config.to_dict(like.experiment),
                ignore=config.RESUMABLE_CHANGES,
            )
            ckpt.close()
            assert restored == generation, (name, last)
            assert ckpt.skipped == [], name
        if len(signals) == 2:
            assert "again: quitting at once" in err, name
    by_name = {o[0]: o for o in outcomes}
    at_start = by_name["at-start"][3].strip().splitlines()[-1]
    assert at_start.endswith("nothing to resume") or GUARD.match(at_start)
    assert by_name["compiling"][3].strip().endswith("nothing to resume")
    running = by_name["running"][4]
    assert SAVED.match(by_name["running"][3].strip().splitlines()[-1])

    resumed = CliRunner().invoke(main, ["resume", str(running), "--quiet"])
    assert resumed.exit_code == 0, resumed.output
    assert (running / "metrics.jsonl").read_text() == (
        uninterrupted / "metrics.jsonl"
    ).read_text()
    summary = json.loads((running / "summary.json").read_text())
    assert [s["status"] for s in summary["segments"]] == ["stopped", "complete"]


# -- the CLI as documentation -----------------------------------------------------


def test_help_shows_toml_literals_ranges_and_every_option():
    text = CliRunner().invoke(main, ["run", "--help"]).output
    assert "run.reset_on_done = true  # bool (true or false)" in text
    assert "True" not in text and "False" not in text
    assert 'run.on_nonfinite = "rank_worst"  # "rank_worst" | "raise"' in text
    assert "strategy.init_scale = 0.1  # float > 0 and finite" in text
    assert "run.generations = 200  # int >= 1" in text
    # every network's and environment's options; algorithms behind their name
    assert "  mlp: width: int = 32, depth: int = 2" in text
    assert "  sparse_rate: num_neurons: int = 64" in text
    assert "  foraging: options num_resources: int = 2" in text
    assert "max_speed = 0.01" in text
    assert "`eqxevo strategies NAME` its [strategy.params]" in text
    # algorithms' params behind their name: one line per config key, the rest
    # short (107 lines with the [qd] table's 9 keys)
    assert "  SV_CMA_ES: params" not in text and len(text.splitlines()) < 120
    assert "  qd.descriptor = " in text and "[qd]" in text
    snes = CliRunner().invoke(main, ["strategies", "SNES"]).output
    assert snes.startswith("SNES: SNES (distribution family)\n")
    assert "  std_init: " in snes
    stein = CliRunner().invoke(main, ["strategies", "SV_CMA_ES"]).output
    assert "num_populations: int = (required)" in stein
    # what --help shows, --set takes
    exp = config.load(None, ["run.reset_on_done=false", "sinks.wandb=true"])
    assert exp.run.reset_on_done is False and exp.sinks.wandb is True


def test_the_command_list_and_strategies_read_as_one_tool():
    text = CliRunner().invoke(main, ["--help"], terminal_width=80).output
    listed = text.split("Commands:\n")[1].splitlines()
    names = ["bench", "certify", "eval", "plot", "resume", "run", "strategies", "study"]
    assert [line.split()[0] for line in listed] == names
    assert not any(line.endswith("...") for line in listed)  # nothing cut short
    study = CliRunner().invoke(main, ["study", "--help"], terminal_width=80).output
    listed = study.split("Commands:\n")[1].splitlines()
    assert len(listed) == 5 and not any(line.endswith("...") for line in listed)
    bench = CliRunner().invoke(main, ["bench", "--help"]).output
    assert bench.startswith("Usage: main bench [OPTIONS]") and "Examples:" in bench
    rows = CliRunner().invoke(main, ["strategies"]).output
    assert rows.startswith("eqxevo presets:\n")  # no blank line first
    assert "Incremental Adapted Maximum-Likelihood Gaussian Model - " in rows
    result = CliRunner().invoke(main, ["strategies", "CMA-ES"])
    assert result.exit_code == 1 and "`eqxevo strategies`" in result.output


def test_set_takes_toml_literals_everywhere():
    exp = config.load(
        None,
        [
            'net.options.plasticity={ learning_rate = 0.01, trace_dtype = "float16" }',
            'strategy.kwargs.optimizer={ optax = "adam", learning_rate = 0.01 }',
            "run.reset_on_done=false",
            "env.params.sensor_noise=1e-3",
            "strategy.name=snes",  # a bare word is a string
        ],
    )
    assert exp.net.options["plasticity"] == {
        "learning_rate": 0.01,
        "trace_dtype": "float16",
    }
    assert exp.strategy.kwargs["optimizer"]["optax"] == "adam"
    assert exp.run.reset_on_done is False and exp.env.params["sensor_noise"] == 1e-3


TINY = [
    "env.name=test_rollout:CounterEnv",
    "net.name=mlp",
    "net.options.width=2",
    "net.options.depth=0",
    "strategy.population_size=8",
    "run.lifetime=3",
    "run.generations=2",
    "run.chunk_size=1",
]
KWARGS = {
    "SV_CMA_ES": ["strategy.kwargs.num_populations=2"],
    "SV_Open_ES": [
        "strategy.kwargs.num_populations=2",
        'strategy.kwargs.optimizer={ optax = "adam", learning_rate = 0.01 }',
    ],
    "Open_ES": ['strategy.kwargs.optimizer={ optax = "sgd", learning_rate = 0.05 }'],
    "PGPE": ['strategy.kwargs.fitness_shaping_fn="centered_rank"'],
    "SimpleGA": ["strategy.init_scale=0.5"],
}


@pytest.mark.parametrize("name", sorted(algorithms))
def test_every_evosax_algorithm_builds_by_name_from_command_line_settings(name):
    """The CLI's path up to evolve: --set items -> config -> build, for every
    algorithm (with its keyword arguments in TOML where it needs them)."""
    items = [*TINY, f"strategy.name={name}", *KWARGS.get(name, [])]
    built = experiment.build(config.load(None, items))
    assert built.strategy.name == name
    assert built.strategy.population_size == 8
    assert config.load(None, items).strategy.kwargs == built.experiment.strategy.kwargs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SV_CMA_ES", "Open_ES", "PGPE", "SimpleGA"])
def test_algorithms_of_every_family_run_from_the_command_line(tmp_path, name):
    result = CliRunner().invoke(
        main,
        [
            "run",
            *sets([*TINY, f"strategy.name={name}", *KWARGS.get(name, [])]),
            "--out",
            str(tmp_path),
            "--name",
            "r",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "after 2 generations" in result.output
    written = config.load(tmp_path / "r/config.toml")
    assert written.strategy.name == name
    assert (
        written.strategy.kwargs
        == config.load(None, KWARGS.get(name, [])).strategy.kwargs
    )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (
            ["strategy.init_scale=0"],
            "strategy.init_scale = 0.0 is out of range; it must be > 0 and finite",
        ),
        (
            ["strategy.init_scale=nan"],
            "strategy.init_scale = nan is out of range; it must be > 0 and finite",
        ),
        (
            ["strategy.params.std_init=-1.0"],
            "strategy 'snes': strategy.params.std_init = -1.0 for snes must be "
            "finite and > 0",
        ),
        (
            ["strategy.params.std_init=nan"],
            "strategy 'snes': strategy.params.std_init = nan for snes is NaN",
        ),
        (
            ["strategy.name=Open_ES", "strategy.population_size=7"],
            "strategy 'Open_ES': strategy.population_size=7 is rejected by Open_ES",
        ),
        (
            ["strategy.name=SV_CMA_ES"],
            "pass num_populations=<int >= 1>",
        ),
        (
            ["run.reset_on_done=True"],
            'run.reset_on_done must be bool (true or false); got "True" (TOML '
            "booleans are lower case)",
        ),
        (
            ['strategy.kwargs.optimizer={ optax = "adamm" }'],
            "strategy.kwargs.optimizer: optax has no public function 'adamm'",
        ),
    ],
)
def test_bad_values_are_one_line_errors_naming_the_field(tmp_path, items, message):
    result = CliRunner().invoke(
        main, ["run", *sets([*TINY, *items]), "--out", str(tmp_path)]
    )
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert message in lines[0]
    assert not any(tmp_path.iterdir())  # nothing written for a bad config


def test_more_devices_than_the_machine_is_refused():
    result = subprocess.run(
        [sys.executable, "-m", "eqxevo", "run", "--devices", "64", *sets(TINY)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent)),
    )
    assert result.returncode == 2
    cores = len(os.sched_getaffinity(0))
    assert (
        f"--devices 64: this machine has {cores} CPU cores; allowed: 1 to {cores}"
        in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_population_of_ten_million_is_refused_fast_without_a_traceback(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "eqxevo",
            "run",
            *sets(
                [
                    "net.name=mlp",
                    "net.options.width=64",
                    "strategy.population_size=10000000",
                    "run.lifetime=10",
                ]
            ),
            "--out",
            str(tmp_path),
            "--name",
            "big",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "RESOURCE_EXHAUSTED" not in result.stderr
    (error,) = [x for x in result.stderr.splitlines() if x.startswith("Error: ")]
    assert error.startswith("Error: this run needs about ")
    assert "strategy.population_size (now 10000000;" in error
    assert "run.batch_size" not in error and "--devices" in error
    # the same name then works (nothing was checkpointed)
    assert not list((tmp_path / "big/checkpoints").glob("[0-9]*"))


# -- eqxevo eval ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluated_run(cli_run):
    """A finished run with 6 held-out lifetimes (`cli_run`'s)."""
    return cli_run[0]


def _eval(*args):
    return CliRunner().invoke(main, ["eval", *map(str, args)])


def test_eval_prints_what_heldout_evaluate_gives_and_the_runs_final_record(
    evaluated_run,
):
    from eqxevo._src.heldout import heldout_evaluate, heldout_keys

    built, genome = experiment.load_genome(evaluated_run)
    (key,) = heldout_keys(built.key)
    direct = heldout_evaluate(
        key, built.fitness, genome, 6, filter_spec=built.strategy.filter_spec
    )
    result = _eval(evaluated_run)
    assert result.exit_code == 0, result.output
    half = (direct.ci_high - direct.ci_low) / 2
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"held-out fitness over 6 lifetimes: {direct.mean!r} ± {half:.4g} "
        f"(95% CI [{direct.ci_low:.6g}, {direct.ci_high:.6g}])"
    )
    # the environment's references on the same lifetimes, and the floor's flag
    assert lines[1] == "reference agents on the same 6 lifetimes:"
    assert lines[2].startswith("  random (random) ")
    assert lines[3].startswith("  Braitenberg vehicle 2b (no_memory) ")
    assert lines[4].startswith("  told the source (oracle) ")
    assert lines[5].startswith("normalised score: ")
    assert "(0 = Braitenberg vehicle 2b, the best without memory; 1 = told" in lines[5]
    assert lines[-1].startswith("no headroom certificate for this task: `eqxevo ")
    data = json.loads(_eval(evaluated_run, "--json").stdout)
    assert data["mean"] == direct.mean and data["ci_low"] == direct.ci_low
    floor = max(r["mean"] for r in data["references"] if r["kind"] == "no_memory")
    kinds = [r["kind"] for r in data["references"]]
    assert kinds == ["random", "no_memory", "oracle"] and data["certificate"] is None
    assert data["below_no_memory"] == (direct.mean < floor)
    flag = "warning: the genome scores below the best reference without memory ("
    assert (flag in result.stdout) == data["below_no_memory"]
    summary = json.loads((evaluated_run / "summary.json").read_text())
    for genome in ("best", "mean"):
        data = json.loads(_eval(evaluated_run, "--genome", genome, "--json").stdout)
        assert data["mean"] == summary["heldout"][genome]["mean"], genome
    # the run's own seed names the run's stream; another seed, other lifetimes;
    # fewer episodes are the first ones
    same = json.loads(_eval(evaluated_run, "--seed", 0, "--json").stdout)
    other = json.loads(_eval(evaluated_run, "--seed", 1, "--json").stdout)
    assert same["mean"] == direct.mean and other["mean"] != direct.mean
    assert other["stream"] == "seed 1"
    # (eval's own function, without the references: at 4 lifetimes they would
    # be programs of their own; `eqxevo eval --episodes` runs in test_faults.py)
    four, _, _ = experiment.eval_run(
        evaluated_run, num_episodes=4, with_references=False
    )
    assert four.result.mean == pytest.approx(float(direct.values[:4].mean()), rel=1e-12)
    # one lifetime drawn: held-out episode 0
    result = _eval(evaluated_run, "--render", evaluated_run / "life.png")
    assert result.exit_code == 0, result.output
    assert (evaluated_run / "life.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_errors_are_one_line_messages(evaluated_run, tmp_path):
    shutil.copytree(evaluated_run, tmp_path / "r", ignore=shutil.ignore_patterns("ch*"))
    run_dir = tmp_path / "r"
    result = _eval(tmp_path)
    assert result.exit_code == 1
    assert result.stderr == f"Error: {tmp_path} holds no run (no config.toml)\n"
    (run_dir / "mean_genome.eqx").unlink()
    result = _eval(run_dir, "--genome", "mean")
    assert result.stderr == (
        f"Error: {run_dir} holds no mean_genome.eqx: the run has not finished a "
        "segment\n"
    )
    path = run_dir / "best_genome.eqx"
    path.write_bytes(path.read_bytes()[:20])
    result = _eval(run_dir)
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"Error: {path} is damaged: its SHA-256 differs")
    assert result.stderr.count("\n") == 1
    population_based = config.load(None, [*SMALL, "strategy.name=SimpleGA"])
    (run_dir / "config.toml").write_text(config.dumps(population_based))
    result = _eval(run_dir, "--genome", "mean")
    assert result.stderr == (
        "Error: strategy 'SimpleGA' (population family) has no distribution mean; "
        "evaluate the best genome (--genome best)\n"
    )
    result = _eval(tmp_path / "missing")
    assert result.exit_code == 2 and "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("lesion", "message"),
    [
        ("plasticity", "MLPPolicy has no plasticity to lesion"),
        ("memory", "MLPPolicy has no recurrent state to lesion"),
    ],
)
def test_a_lesion_the_network_has_nothing_for_is_one_line(
    evaluated_run, lesion, message
):
    result = _eval(evaluated_run, "--lesion", lesion)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: {message} (")
    assert result.stderr.count("\n") == 1
