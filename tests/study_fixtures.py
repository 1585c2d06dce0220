"""A tiny finished study, shared by the study tests (run once per session).

Chemotaxis with a small MLP: 2 arms (the `wide` arm changes the network's
shape, so it needs a program of its own) x 2 sensor-noise values (an
environment param: traced) x 2 seeds = 4 cells, 8 runs, 2 programs.
"""

import dataclasses
from pathlib import Path

import equinox as eqx
import pytest

TINY = """
[study]
name = "tiny"
seeds = 2

[study.axes]
"env.params.sensor_noise" = [0.05, 0.3]

[[study.arms]]
name = "wide"
"net.options.width" = 12

[env]
name = "chemotaxis"

[net]
name = "mlp"
[net.options]
width = 8
depth = 1

[strategy]
population_size = 8

[run]
lifetime = 40
generations = 6
chunk_size = 2
checkpoint_every = 2
chunk_seconds = 0
"""


def write_study(folder: Path, text: str = TINY, name: str = "tiny.toml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


@dataclasses.dataclass(frozen=True)
class Finished:
    file: Path
    out: Path
    traces: int  # programs compiled while it ran


_FINISHED: list[Finished] = []


@pytest.fixture(scope="session")
def finished_study(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """The tiny study, run once per process (test modules import this fixture,
    and each import is a fixture of its own: the cache makes them one run)."""
    from eqxevo._src.program import run_chunk
    from eqxevo.study import load, run_study

    if _FINISHED:
        return _FINISHED[0]
    folder = tmp_path_factory.mktemp("study")
    file = write_study(folder)
    before = eqx.debug.get_num_traces(run_chunk)
    run_study(load(file), folder / "out", quiet=True)
    traces = eqx.debug.get_num_traces(run_chunk) - before
    _FINISHED.append(Finished(file, folder / "out", traces))
    return _FINISHED[0]
