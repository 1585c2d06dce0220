"""The exit message of a signal before any work is done stays the last line, even
while the main thread is printing (a race CI once lost: a progress line printed
between the message and the exit; and one the suite lost under load: a write
waiting on a full pipe, woken by its reader after the message went out)."""

import contextlib
import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import time
import tomllib
from pathlib import Path

import pytest
from helpers import SAVED, SMALL_EXPERIMENT, handles_sigterm

from eqxevo._app.checkpoint import Checkpointer

# Prints to stderr without pause, as a run's progress lines may, until a signal
# before any finished chunk makes the watcher exit with its message.
CHILD = """
import sys
from eqxevo._app.interrupts import StopRequest
with StopRequest(lambda: "LAST LINE"):
    print("ready", flush=True)
    while True:
        print("a progress line", file=sys.stderr, flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_exit_message_is_the_last_line_while_the_main_thread_prints(signum):
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n"
        time.sleep(0.2)
        for child in children:
            child.send_signal(signum)
        for child in children:
            _, err = child.communicate(timeout=60)
            assert child.returncode == 128 + signum, err[-300:]
            assert err.splitlines()[-1] == "LAST LINE", err[-300:]
    finally:
        for child in children:
            child.kill()
            child.communicate()


# A thread's write waits on a full pipe (stderr, read only after the exit) when
# the signal comes, as eqxevo's progress thread may; the main thread sleeps and
# takes the signal; the message goes to stdout. `describe` reports whether that
# write had ended when the exit called it (waiting at most 10 s): cut short where
# it waited.
BLOCKED_CHILD = """
import sys, threading, time
from eqxevo._app.interrupts import StopRequest
ended = threading.Event()
def write():
    sys.stderr.write("x" * (1 << 22))
    sys.stderr.flush()
    ended.set()
def describe():
    return f"LAST LINE; the waiting write had ended: {ended.wait(10)}"
with StopRequest(describe, stream=sys.stdout):
    threading.Thread(target=write, daemon=True).start()
    print("ready", flush=True)
    time.sleep(60)
"""


def _unread_bytes(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_write_waiting_on_a_full_pipe_ends_before_the_exit_message(signum):
    child = subprocess.Popen(
        [sys.executable, "-c", BLOCKED_CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stderr is not None
        assert child.stdout.readline() == "ready\n"
        pipe = child.stderr.fileno()
        capacity = fcntl.fcntl(pipe, fcntl.F_GETPIPE_SZ)
        deadline = time.monotonic() + 60
        while _unread_bytes(pipe) < capacity:  # full: the write now waits
            assert time.monotonic() < deadline, "the child's stderr never filled"
            time.sleep(0.05)
        child.send_signal(signum)
        out = child.stdout.read()  # to the end: the child has exited
        child.wait(timeout=60)
        err = child.stderr.read()  # read only now: the pipe stayed full
    finally:
        child.kill()
        child.communicate()
    assert child.returncode == 128 + signum, err[-300:]
    assert out.splitlines()[-1] == "LAST LINE; the waiting write had ended: True"


# -- every command, from the process's first instant -----------------------------

ROOT = Path(__file__).resolve().parent.parent
EQXEVO = [sys.executable, "-m", "eqxevo"]
"""What the `eqxevo` script runs: eqxevo/__main__.py's `main`."""

RUN = ["run", *(x for item in SMALL_EXPERIMENT for x in ("--set", item)), "--quiet"]

# A run that is still running well after its first chunk (a first signal then
# stops it after the running chunk, with a checkpoint).
LONG_RUN = [
    "run",
    *(
        x
        for item in [
            "net.name=mlp",
            "net.options.width=8",
            "net.options.depth=1",
            "strategy.population_size=32",
            "run.lifetime=40",
            "run.generations=400",
            "run.chunk_seconds=0.3",
            "run.checkpoint_every=4",
        ]
        for x in ("--set", item)
    ),
    "--quiet",
]

# eqxevo's last line after a signal: the process guard's (eqxevo._app.interrupts), or
# a run's StopRequest's (nothing saved yet; a checkpoint saved).
INTERRUPT_LINE = re.compile(
    r"^eqxevo( [\w-]+)?: interrupted \((Ctrl-C|SIGTERM)\)"
    r"|^no checkpoint yet: nothing to resume$"
    r"|^checkpoint at generation \d+ saved; `eqxevo resume "
)


def _jax_loaded(pid):
    try:
        return "jaxlib" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def _interrupt_at(command, moment, signum, cwd):
    """`eqxevo COMMAND` in `cwd`, sent `signum` `moment` seconds after it was
    started, or once it handles signals if that is later (the interpreter starts
    before any code of eqxevo can run: about 0.06 s here, idle); asserts that it
    did before JAX loaded. Returns (exit status, stdout, stderr)."""
    started = time.monotonic()
    process = subprocess.Popen(
        [*EQXEVO, *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    try:
        while not handles_sigterm(process.pid):
            assert process.poll() is None and time.monotonic() < started + 60
            time.sleep(0.001)
        assert not _jax_loaded(process.pid), "signals taken over after JAX loaded"
        time.sleep(max(0.0, started + moment - time.monotonic()))
        process.send_signal(signum)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
        process.communicate()
    return process.returncode, out, err


def _assert_ended_in_one_line(code, err, signum):
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert code == 128 + signum, (code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert INTERRUPT_LINE.match(lines[-1]), err
    assert sum(bool(INTERRUPT_LINE.match(line)) for line in lines) == 1, err


def test_the_entry_point_imports_nothing_heavy_before_taking_signals_over():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert scripts["scripts"]["eqxevo"] == "eqxevo.__main__:main"
    probe = (
        "import sys, eqxevo.__main__; "
        "print(sorted({m.split('.')[0] for m in sys.modules} "
        "& {'click', 'equinox', 'jax', 'jaxlib', 'numpy'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


# Before the guard, at 0.3 s a KeyboardInterrupt landed in JAX's garbage-collection
# callback ("Exception ignored in _xla_gc_callback") and the run went on to exit
# 0; from 0.6 s it was an import traceback.
@pytest.mark.parametrize(
    "moment, signum",
    [
        (0.1, signal.SIGINT),
        (0.3, signal.SIGINT),
        (0.6, signal.SIGINT),
        (1.0, signal.SIGINT),
        (2.0, signal.SIGINT),
        (0.3, signal.SIGTERM),
        (1.5, signal.SIGTERM),
    ],
    ids=lambda value: f"{value}s" if isinstance(value, float) else value.name,
)
def test_a_signal_at_any_moment_of_a_run_ends_it_in_one_line(tmp_path, moment, signum):
    code, out, err = _interrupt_at(RUN, moment, signum, tmp_path)
    if code == 0:  # the run had finished: it says so
        assert "best training fitness" in out and "Traceback" not in err, err
        return
    _assert_ended_in_one_line(code, err, signum)


@pytest.mark.parametrize(
    "command, moment",
    [
        (["strategies"], 0.2),
        (["study", "plan", str(ROOT / "examples/studies/l4_plasticity.toml")], 1.5),
    ],
    ids=["strategies-0.2s", "study-plan-1.5s"],
)
def test_a_signal_ends_any_command_in_one_line(tmp_path, command, moment):
    code, out, err = _interrupt_at(command, moment, signal.SIGINT, tmp_path)
    if code == 0:  # finished first: its output is all there
        assert out.strip() and "Traceback" not in err, err
        return
    _assert_ended_in_one_line(code, err, signal.SIGINT)


# Some wrappers (`uv run`, which waits 200 ms first) forward a SIGINT to their
# child, which had it from the process group already: one Ctrl-C reaches eqxevo
# twice. Forwarded 0.1 s later, it counted as a second Ctrl-C ("again: quitting at
# once") before eqxevo._app.interrupts.SAME_SIGNAL_S.
FORWARDING_WRAPPER = """
import signal, subprocess, sys, time
child = subprocess.Popen(sys.argv[1:])
def forward(signum, frame):
    time.sleep(0.1)
    child.send_signal(signum)
signal.signal(signal.SIGINT, forward)
sys.exit(child.wait() % 256)
"""


def _metrics_lines(run_dir):
    path = run_dir / "metrics.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


def _stopped_by_one_group_sigint(prefix, run_dir):
    """`eqxevo run` (behind `prefix`) in its own process group, sent one SIGINT
    through the group once its first chunk is saved: (exit status, stderr)."""
    where = ["--out", str(run_dir.parent), "--name", run_dir.name]
    process = subprocess.Popen(
        [*prefix, *EQXEVO, *LONG_RUN, *where],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as in a terminal
    )
    try:
        deadline = time.monotonic() + 240
        while _metrics_lines(run_dir) < 2 and process.poll() is None:
            assert time.monotonic() < deadline, "no chunk finished"
            time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=240)
    finally:
        process.kill()
        process.communicate()
    return process.returncode, err


@pytest.mark.parametrize("wrapped", [False, True], ids=["alone", "wrapped"])
def test_one_sigint_to_the_process_group_counts_once(tmp_path, wrapped):
    """A SIGINT to the process group after the first chunk stops the run after the
    running chunk with a checkpoint, eqxevo alone in its group or under a wrapper
    that forwards the signal: never "again: quitting at once"."""
    run_dir = tmp_path / "run"
    prefix = [sys.executable, "-c", FORWARDING_WRAPPER] if wrapped else []
    code, err = _stopped_by_one_group_sigint(prefix, run_dir)
    assert code == 130, err
    assert "Traceback" not in err and "again: quitting at once" not in err, err
    assert err.count("Ctrl-C: stopping after the chunk") == 1, err
    match = SAVED.match(err.strip().splitlines()[-1])
    assert match and match.group(2) == str(run_dir), err
    checkpoints = Checkpointer(run_dir / "checkpoints")
    assert checkpoints.latest() == int(match.group(1))
    checkpoints.close()
