"""Every example experiment loads, validates and builds (no generations run)."""

from pathlib import Path

import pytest

from eqxevo import config
from eqxevo.experiment import build

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.toml"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_builds(path):
    built = build(config.load(path))
    assert built.strategy.num_params > 0
    assert built.genome.obs_size == built.env.obs_size
