"""Ctrl-C and SIGTERM for long runs: the first stops cleanly, the second at once;
and for every command from the process's first instant (`guard_process`).

See docs/internals.md ("Interrupts") for why no handler ever raises into XLA.
Imports the standard library only: the entry point imports it before anything.
"""

import atexit
import contextlib
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)
SHOW_CURSOR = "\x1b[?25h"
"""Gives a terminal its cursor back (rich's live bar hides it)."""


def exit_code(signum: int) -> int:
    """The shell's exit status for a process ended by `signum` (130, 143)."""
    return 128 + signum


def _name(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


SAME_SIGNAL_S = 0.5
"""A signal of the kind just taken that arrives within this many seconds after that
one arrived is the same one delivered twice (a wrapper such as `uv run` forwards a
Ctrl-C its process group got already) and is not counted again."""

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
        self._taken: tuple[int, float] | None = None  # the signal, when taken
        self._previous: dict[int, Any] = {}
        self._wakeup: tuple[int, int] | None = None
        self._watchers: tuple[threading.Thread, ...] = ()
        self._arrivals: queue.SimpleQueue[tuple[int, float] | None] = (
            queue.SimpleQueue()
        )
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
        lines = (*lines, self._last_line(signum))  # after the writes settled
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

    def _last_line(self, signum: int) -> str:
        """The exit message's last line (`describe()`)."""
        del signum
        return self.describe()

    def _same_signal(self, signum: int, arrived: float) -> bool:
        """Whether `signum`, arrived at `arrived`, repeats the signal just taken
        (`SAME_SIGNAL_S` after that one arrived)."""
        return (
            self._taken is not None
            and self._taken[0] == signum
            and arrived - self._taken[1] < SAME_SIGNAL_S
        )

    def _on_signal(self, signum: int, arrived: float) -> None:
        if self._same_signal(signum, arrived):
            return
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
        # Timed from its arrival (`_read`), not from now: a second press that
        # arrived while the lock was held is a second press, and a wrapper's copy
        # of this one arrived within milliseconds of it.
        self._taken = (signum, arrived)

    # -- installation ---------------------------------------------------------------

    def _read(self, fd: int) -> None:
        """Reads each signal as it arrives and queues it with its arrival time,
        for `_handle`: never waits on the run, so no arrival is timed late."""
        while True:
            try:
                data = os.read(fd, 64)
            except OSError:
                break
            if not data:
                break
            arrived = time.monotonic()
            # CPython's C handler writes one byte per signal: its number.
            for byte in data:
                if byte in SIGNALS:
                    self._arrivals.put((byte, arrived))
        self._arrivals.put(None)

    def _handle(self) -> None:
        """Acts on each signal `_read` queued, in order (it may wait for the run's
        lock: `_on_signal`)."""
        while (item := self._arrivals.get()) is not None:
            self._on_signal(*item)

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is not threading.main_thread():
            return self  # signals are only delivered to the main thread
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)  # set_wakeup_fd requires it
        self._wakeup = (read_fd, write_fd)
        for signum in SIGNALS:
            # The Python-level handler does nothing: the watcher threads act, so
            # nothing is ever raised into the main thread (or into XLA).
            self._previous[signum] = signal.signal(signum, lambda s, f: None)
        self._old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        self._installed = True
        self._watchers = (
            threading.Thread(
                target=self._read, args=(read_fd,), name="eqxevo-signals", daemon=True
            ),
            threading.Thread(target=self._handle, name="eqxevo-stop", daemon=True),
        )
        for watcher in self._watchers:
            watcher.start()
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
        os.close(write_fd)  # the reader gets b"" and ends, then the handler
        # Joined before the process can exit: a daemon thread still waking from
        # its read while Python finalizes is ended by a forced unwind that aborts
        # the process ("terminate called ... FATAL: exception not rethrown").
        for watcher in self._watchers:
            if watcher is not threading.current_thread():
                watcher.join(timeout=5)
        with contextlib.suppress(OSError):
            os.close(read_fd)


class ProcessGuard(StopRequest):
    """`StopRequest` for a whole `eqxevo` process (`guard_process`): there is no
    work of its own to save, so every signal exits at once with one line. A
    command's own `StopRequest` takes over while it is installed (it saves and
    restores the handlers and `set_wakeup_fd`)."""

    def __init__(self) -> None:
        super().__init__(lambda: "")

    def _last_line(self, signum: int) -> str:
        return _process_line(signum)


_command: str | None = None
_guarding = False
_finished = False


def _process_line(signum: int) -> str:
    what = f"interrupted ({_name(signum)})"
    if _finished:
        return f"eqxevo: {what} while exiting"
    if _command is None:
        return f"eqxevo: {what} while starting; nothing was written"
    return f"eqxevo {_command}: {what}; stopped at once"


def command_started(name: str | None) -> None:
    """Names the command in the process guard's exit message (called once the
    command line is parsed); nothing outside `guard_process`."""
    global _command
    if _guarding and name:
        _command = name


def _exit_at_once(signum: int, frame: Any) -> None:
    """The Python-level handler while the watcher thread is not up (the first
    and last moments of the process): exit at once with one line."""
    del frame
    with contextlib.suppress(OSError):
        os.write(2, f"\n{_process_line(signum)}\n".encode())
    os._exit(exit_code(signum))


def _ignore_signals() -> None:
    """The last exit function to run. The interpreter's teardown, next, resets
    Python-level handlers to the default, and a signal would then kill the process
    without a word; ignored, it lets the finished command's exit status stand."""
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def guard_process() -> Iterator[ProcessGuard]:
    """SIGINT/SIGTERM handling for a whole `eqxevo` process from its first line
    (docs/internals.md, "Interrupts"): a signal exits at once with one line and
    128 + signal, except while a command's own `StopRequest` is installed, which
    takes over; after the command, while the interpreter's exit functions run,
    too. Main thread only."""
    global _guarding, _finished
    for signum in SIGNALS:  # until the watcher is up, and again once it is gone
        signal.signal(signum, _exit_at_once)
    atexit.register(_ignore_signals)  # registered first, it runs last
    _guarding = True
    guard = ProcessGuard()
    with guard:
        try:
            yield guard
        finally:
            _finished = True


__all__ = [
    "ProcessGuard",
    "StopRequest",
    "command_started",
    "exit_code",
    "guard_process",
]
