"""The exit message of a signal before any work is done stays the last line, even
while the main thread is printing (a race CI once lost: a progress line printed
between the message and the exit; and one the suite lost under load: a write
waiting on a full pipe, woken by its reader after the message went out)."""

import fcntl
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest

# Prints to stderr without pause, as a run's progress lines may, until a signal
# before any finished chunk makes the watcher exit with its message.
CHILD = """
import sys
from eqxevo.interrupts import StopRequest
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
from eqxevo.interrupts import StopRequest
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
