import io
import json

import numpy as np
import pytest

from eqxevo._app.metrics import MetricsLog, Progress, history_records


def chunk(generations, seeds=None):
    g = np.asarray(generations)
    shape = (len(g),) if seeds is None else (seeds, len(g))
    base = np.broadcast_to(g, shape).astype(np.float32)
    return {
        "generation": np.broadcast_to(g, shape),
        "best": base,
        "mean": base - 1,
        "best_so_far": base,
        "num_nonfinite": np.zeros(shape, np.int32),
        "aux": {"steps": base * 10, "vector": np.zeros((*shape, 3))},
    }


def test_records_one_per_generation_and_seed():
    records = history_records(chunk([4, 5], seeds=3))
    assert [(r["generation"], r["seed"]) for r in records] == [
        (4, 0),
        (4, 1),
        (4, 2),
        (5, 0),
        (5, 1),
        (5, 2),
    ]
    assert records[0]["aux.steps"] == 40.0
    assert "aux.vector" not in records[0]  # only scalars become fields
    single = history_records(chunk([0]))
    assert "seed" not in single[0]


def test_nonfinite_values_become_null():
    h = chunk([0])
    h["mean"] = np.array([np.nan])
    (record,) = history_records(h)
    assert record["mean"] is None
    json.dumps(record, allow_nan=False)


def test_metrics_log_appends_and_truncates(tmp_path):
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append(history_records(chunk([0, 1, 2])))
    log.append(history_records(chunk([3, 4])))
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"generation": 5, "be')  # a line cut short by a crash
    log.truncate(3)
    assert [r["generation"] for r in log.read()] == [0, 1, 2]


def test_progress_plain_lines_when_not_a_terminal():
    out = io.StringIO()
    with Progress(10, 100, stream=out, every=0.0) as progress:
        progress.update(history_records(chunk([0, 1, 2])))  # includes compilation
        progress.update(history_records(chunk([3, 4])))
    text = out.getvalue()
    assert "generation 3/10" in text and "generation 5/10" in text
    assert "agent-steps/s" in text.splitlines()[-1] and "eta" in text
    assert progress.agent_steps_per_second > 0
    assert text.count("generation 5/10") == 1


def test_progress_quiet_prints_nothing():
    out = io.StringIO()
    with Progress(10, 100, stream=out, quiet=True) as progress:
        progress.update(history_records(chunk([0])))
    assert out.getvalue() == ""


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_eta_after_the_first_chunk_leaves_compilation_out(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("eqxevo._app.metrics.time.perf_counter", clock)
    out = io.StringIO()
    with Progress(301, 1000, stream=out, every=1e9) as progress:
        clock.now += 60.0  # compiling
        progress.start_running()
        clock.now += 44.0  # the first chunk: one generation of 44 s
        progress.update(history_records(chunk([0])))
        assert progress.seconds_per_generation == pytest.approx(44.0)
        assert progress.eta == pytest.approx(300 * 44.0)
        assert progress.agent_steps_per_second == pytest.approx(1000 / 44.0)
        clock.now += 10.0  # 10 s into the next generation: eta counts down
        assert progress.eta == pytest.approx(300 * 44.0 - 10.0)
    text = out.getvalue()
    assert (
        "warning: long run. 44 s per generation here: the remaining 300 generations "
        "take about 3.7 h." in text
    )


def test_short_runs_get_a_projection_without_a_warning(monkeypatch):
    clock = Clock()
    monkeypatch.setattr("eqxevo._app.metrics.time.perf_counter", clock)
    out = io.StringIO()
    with Progress(11, 10, stream=out, every=1e9) as progress:
        progress.start_running()
        clock.now += 2.0
        progress.update(history_records(chunk([0])))
    text = out.getvalue()
    assert (
        "2 s per generation here: the remaining 10 generations take about 20 s" in text
    )
    assert "warning" not in text


def test_format_seconds_and_bytes():
    from eqxevo._app.metrics import format_seconds
    from eqxevo._src.memory import format_bytes

    assert [format_seconds(s) for s in (0.123, 42, 450, 13320)] == [
        "0.12 s",
        "42 s",
        "7.5 min",
        "3.7 h",
    ]
    assert [format_bytes(b) for b in (512, 13752, 16.2e9)] == [
        "512 B",
        "13.8 kB",
        "16.2 GB",
    ]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_live_bar_fits_the_terminal_width(monkeypatch):
    import re

    monkeypatch.setenv("COLUMNS", "150")
    out = Terminal()
    with Progress(10, 100, stream=out) as progress:
        progress.start_running()
        progress.update(history_records(chunk([0, 1, 2])))
    visible = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    lines = [line for line in visible.replace("\r", "\n").splitlines() if line]
    assert max(len(line) for line in lines) <= 150
    final = [line for line in lines if re.search(r"gen +3/10", line)][-1]
    assert "agent-steps/s" in final and "eta" in final  # not cut at 80 columns
