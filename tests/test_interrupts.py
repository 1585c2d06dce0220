"""The exit message of a signal before any work is done stays the last line, even
while the main thread is printing (a race CI once lost: a progress line printed
between the message and the exit)."""

import signal
import subprocess
import sys
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
