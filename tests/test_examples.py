"""Every example experiment builds; every example script starts (no generations)."""

import runpy
from pathlib import Path

import equinox as eqx
import jax
import pytest

from eqxevo._app import config
from eqxevo.experiment import build

FOLDER = Path(__file__).parent.parent / "examples"
EXAMPLES = sorted(FOLDER.glob("*.toml"))
SCRIPTS = sorted(FOLDER.glob("*.py"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 3
    assert {p.stem for p in SCRIPTS} >= {"baselines", "cartpole", "l0_vs_braitenberg"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_builds(path):
    built = build(config.load(path))
    evolvable = eqx.filter(built.genome, built.strategy.filter_spec)
    sizes = [x.size for x in jax.tree.leaves(evolvable)]
    assert built.strategy.num_params == sum(sizes) and len(sizes) >= 2
    assert built.genome.obs_size == built.env.obs_size


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_example_script_imports_and_parses_its_arguments(path, monkeypatch, capsys):
    namespace = runpy.run_path(str(path), run_name="example")  # imports resolve
    monkeypatch.setattr("sys.argv", [path.name, "--help"])
    with pytest.raises(SystemExit) as exit_:
        namespace["main"]()
    assert exit_.value.code == 0
    summary = " ".join(namespace["__doc__"].splitlines()[0].split())
    assert summary in " ".join(capsys.readouterr().out.split())
