"""The notice of a run whose fitness has no spread
(`eqxevo._src.fitness.SpreadWatch`)."""

import io

import pytest
from helpers import small_experiment

from eqxevo import experiment
from eqxevo._src.fitness import NO_SPREAD_GENERATIONS, SpreadWatch


def records(values, seed=None, start=0):
    """One record per generation: `(min, max)` pairs."""
    out = []
    for g, (low, high) in enumerate(values, start):
        record = {"generation": g, "min": low, "max": high}
        if seed is not None:
            record["seed"] = seed
        out.append(record)
    return out


def test_the_notice_comes_once_after_enough_flat_generations_in_a_row():
    watch = SpreadWatch()
    flat = [(3.0, 3.0)] * (NO_SPREAD_GENERATIONS - 1)
    assert watch.notice(records(flat)) is None
    # chunks join up: the fifth flat generation, in the next chunk
    notice = watch.notice(records([(3.0, 3.0), (3.0, 3.0)], start=4))
    assert notice == (
        "warning: no fitness spread for 5 generations in a row (0-4): every "
        "genome scored 3.0, so selection has nothing to rank (a reward no policy "
        "changes? a fitness that ignores the genome? genomes too alike: "
        "strategy.init_scale?)"
    )
    assert watch.notice(records([(3.0, 3.0)] * 10, start=6)) is None  # said once


def test_spread_resets_the_count_and_missing_values_are_not_flat():
    watch = SpreadWatch(generations=3)
    varied = [(1.0, 1.0), (1.0, 1.0), (0.5, 1.0), (1.0, 1.0), (1.0, 1.0)]
    assert watch.notice(records(varied)) is None
    # no finite fitness at all (min and max null): nothing to say about spread
    assert watch.notice(records([(None, None)] * 5, start=5)) is None
    # seeds count apart, and the notice names the seed
    both = records([(2.0, 2.0)] * 3, seed=1) + records([(0.0, 1.0)] * 3, seed=0)
    notice = watch.notice(both)
    assert notice is not None and "(0-2, seed 1): every genome scored 2.0" in notice


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Progress output of a run whose reward no policy changes (a reward length
    of 1e30: every step pays exp(-distance / 1e30) = 1), and of a normal one.
    Both are the small experiment's program (the reward length is a traced
    parameter), which other test modules compile too."""
    out = {}
    for name, extra in (("flat", ["env.params.reward_length=1e30"]), ("varied", [])):
        stream = io.StringIO()
        folder = tmp_path_factory.mktemp(name)
        config = small_experiment(*extra)
        experiment.run_experiment(config, folder / "r", stream=stream)
        out[name] = stream.getvalue()
    return out


def test_a_run_without_fitness_spread_says_so_while_it_runs(outputs):
    lines = outputs["flat"].splitlines()
    (notice,) = [x for x in lines if x.startswith("warning: no fitness spread")]
    assert notice.startswith(
        "warning: no fitness spread for 5 generations in a row (0-4): every genome "
        "scored 40.0"  # 40 steps paying 1
    )
    # said while it runs: the progress goes on after it
    later = lines[lines.index(notice) + 1 :]
    assert any(x.startswith("generation 6/6 ") for x in later)
    assert "no fitness spread" not in outputs["varied"]
