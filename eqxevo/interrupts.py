"""Ctrl-C and SIGTERM for long runs: the first stops cleanly, the second at once.

See docs/internals.md ("Interrupts") for why no handler ever raises into XLA.
"""

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SHOW_CURSOR = "\x1b[?25h"
"""Gives a terminal its cursor back (rich's live bar hides it)."""


def exit_code(signum: int) -> int:
    """The shell's exit status for a process ended by `signum` (130, 143)."""
    return 128 + signum


def _name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


SETTLE_S = 0.1
"""How long an exit at once waits, after interrupting the threads' writes, for a
write that its pipe's reader had already woken to land (before the message)."""


def _interrupt_system_calls(signum: int) -> None:
    """Sends `signum` (its handler installed, doing nothing) to every Python thread
    but this one: a write waiting on a full pipe returns at once (EINTR, or the
    bytes written so far), and nothing more of it reaches the old file (a retry,
    if Python makes one, goes to the descriptor, by then /dev/null).
    Threads that C code started are left alone."""
    for thread in threading.enumerate():
        if thread is threading.current_thread() or thread.ident is None:
            continue
        if isinstance(thread, threading._DummyThread):  # started outside Python
            continue
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(thread.ident, signum)


def _last_words_fd(stream: Any, interrupt: int | None) -> int | None:
    """A copy of `stream`'s file descriptor, after stdout, stderr and the stream's
    own descriptor were pointed at /dev/null and the writes to the old files
    settled: another thread may be printing while the watcher exits, and the exit
    message must stay the last line. `interrupt`: a signal whose handler is
    installed, to cut writes waiting on a full pipe short. None when `stream` has
    no descriptor."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    try:
        saved = os.dup(fd)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for target in {1, 2, fd}:
            os.dup2(null, target)
    # A write that began before dup2 still goes to the old file. Waiting on a
    # full pipe, it is interrupted; one that the pipe's reader has just woken
    # writes its bytes once it runs, even after the exit began (Linux's
    # pipe_write checks for signals only while the pipe is full): give it
    # SETTLE_S.
    if interrupt is not None:
        _interrupt_system_calls(interrupt)
    time.sleep(SETTLE_S)
    return saved


class StopRequest:
    """Installs the SIGINT/SIGTERM handling of docs/internals.md ("Interrupts").

    Arguments:
        describe: `describe() -> str`, the one-line message printed when the
            process exits at once: it names the newest complete checkpoint, or
            says there is none. Called from the watcher thread.
        stream: where messages go (default stderr).

    Attributes:
        requested: True once a first signal asked the run to stop after the
            running chunk.
        signum: the signal that asked.
        work_done: set by the run after its first finished chunk: from then on a
            first signal stops after a chunk instead of exiting at once.
        lock: held by the run while it writes a chunk's results, so that an
            exit never cuts a write short on the first signal.
    """

    def __init__(self, describe: Callable[[], str], stream: Any = None) -> None:
        self.describe = describe
        self.stream = stream
        self.requested = False
        self.signum: int | None = None
        self.work_done = False
        self.lock = threading.Lock()
        self._exiting = threading.Lock()
        self._count = 0
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._old_wakeup = -1
        self._installed = False

    # -- messages and exits ---------------------------------------------------------

    def _write(self, text: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        try:
            if stream.isatty():
                text = SHOW_CURSOR + "\n" + text
            stream.write(text + "\n")
            stream.flush()
        except (OSError, ValueError):
            pass

    def _exit_now(self, signum: int, *lines: str) -> None:
        # Held until the process ends: __exit__ waits, so the handlers that
        # _last_words_fd signals threads with stay installed.
        self._exiting.acquire()
        stream = self.stream if self.stream is not None else sys.stderr
        fd = _last_words_fd(stream, signum if self._installed else None)
        lines = (*lines, self.describe())  # after the earlier writes settled
        if fd is None:  # not a file (a test's buffer): nothing else writes there
            for line in lines:
                self._write(line)
        else:
            # From a new line: print() writes a line's text and its newline
            # apart, and the exit may fall between them.
            text = "\n" + "".join(line + "\n" for line in lines)
            if os.isatty(fd):
                text = SHOW_CURSOR + text
            with contextlib.suppress(OSError):
                os.write(fd, text.encode())
        os._exit(exit_code(signum))

    def _on_signal(self, signum: int) -> None:
        self._count += 1
        if self._count > 1:
            self._exit_now(signum, f"{_name(signum)} again: quitting at once.")
        # The run holds the lock while it writes a chunk's results: an exit
        # waits for the write to finish instead of cutting it short.
        with self.lock:
            if not self.work_done:
                self._exit_now(signum)
            self.signum = signum
            self.requested = True
        self._write(
            f"{_name(signum)}: stopping after the chunk of generations running now, "
            "then saving a checkpoint (press Ctrl-C again to quit at once)."
        )

    # -- installation ---------------------------------------------------------------

    def _watch(self, fd: int) -> None:
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:
                return
            # CPython's C handler writes one byte per signal: its number.
            for byte in data:
                if byte in SIGNALS:
                    self._on_signal(byte)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals are only delivered to the main thread
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        self._wakeup = (read_fd, write_fd)
        for signum in SIGNALS:
            # The Python-level handler does nothing: the watcher thread acts, so
            # nothing is ever raised into the main thread (or into XLA).
            self._previous[signum] = signal.signal(signum, lambda s, f: None)
        self._old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._installed = True
        self._watcher = threading.Thread(
            target=self._watch, args=(read_fd,), name="eqxevo-signals", daemon=True
        )
        self._watcher.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._installed:
            return
        with self._exiting:  # an exit under way holds it: this thread waits for it
            self._installed = False
        signal.set_wakeup_fd(self._old_wakeup)
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        assert self._wakeup is not None
        read_fd, write_fd = self._wakeup
        os.close(write_fd)  # the watcher's read returns b"" and it ends
        # Joined before the process can exit: a daemon thread still waking from
        # its read while Python finalizes is ended by a forced unwind that aborts
        # the process ("terminate called ... FATAL: exception not rethrown").
        if (
            self._watcher is not None
            and self._watcher is not threading.current_thread()
        ):
            self._watcher.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(read_fd)


__all__ = ["StopRequest", "exit_code"]
