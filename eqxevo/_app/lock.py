"""One writer per directory: a lease lock (filelock's `SoftFileLease`) on each run
directory and study folder, naming its holder. The rule: docs/operations.md.
"""

import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from filelock import SoftFileLease, Timeout

LOCK_FILE = ".eqxevo.lock"
"""The lock: filelock's marker (host, pid, process start, lease token)."""
WRITER_FILE = ".eqxevo.writer.json"
"""Who holds the lock, for people: host, pid, start time and command."""
LEASE_S = 120.0
"""A lock from another host is honoured until unrefreshed for this long; its
holder refreshes it every `LEASE_S / 3` seconds while it lives."""


class LockedError(RuntimeError):
    """Another live process writes the directory (one line naming it)."""


def _holder(folder: Path) -> str:
    """The holder of `folder`'s lock, in words (from its writer record)."""
    try:
        writer = json.loads((folder / WRITER_FILE).read_text())
        return (
            f"pid {writer['pid']} on host {writer['host']} since "
            f"{writer['started']} ({writer['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:  # the record is written just after the lock: the marker names the holder
        lines = (folder / LOCK_FILE).read_text().splitlines()
    except OSError:
        return "another process"
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return f"pid {fields.get('pid', '?')} on host {fields.get('host', '?')}"


def holder(folder: str | Path) -> str | None:
    """Who writes `folder` now, in words; None when nobody holds its lock.
    Only reads (`eqxevo study status` shows it)."""
    folder = Path(folder)
    return _holder(folder) if (folder / LOCK_FILE).exists() else None


class WriterLock:
    """The one writer's hold on `folder` (a run directory or study folder).

    `acquire` takes it or raises `LockedError`: a holder alive on this host, or
    one on another host that refreshed its lease in the last `LEASE_S` seconds,
    keeps it; a dead holder's lock is taken over (on another host, after seeing
    it unrefreshed for a lease). Works on network file systems (the lock is a
    file created exclusively, not an fcntl lock).
    """

    def __init__(self, folder: str | Path, what: str, lease: float = LEASE_S):
        self.folder = Path(folder)
        self.what = what
        self._lease = SoftFileLease(
            self.folder / LOCK_FILE, lease_duration=lease, thread_local=False
        )

    @property
    def held(self) -> bool:
        return self._lease.is_locked

    def acquire(self) -> "WriterLock":
        """Take the lock (see the class); returns self.

        Raises:
            LockedError: another live process holds it; names it.
        """
        try:
            self._lease.acquire(timeout=0)
        except Timeout:
            if not self._expired():
                raise LockedError(
                    f"{self.folder} is being written by {_holder(self.folder)}: one "
                    f"writer per {self.what}; wait for it to end or stop it"
                ) from None
            try:  # filelock takes it over once it saw it unchanged for a lease
                self._lease.acquire(timeout=self._lease.lease_duration * 1.5)
            except Timeout:
                raise LockedError(
                    f"{self.folder} is being written by {_holder(self.folder)} (its "
                    "lease was renewed while we waited)"
                ) from None
        record = {
            "host": platform.node(),
            "pid": os.getpid(),
            "started": datetime.datetime.now().astimezone().isoformat("T", "seconds"),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:80],
        }
        tmp = self.folder / f".{WRITER_FILE}.tmp"
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, self.folder / WRITER_FILE)
        return self

    def _expired(self) -> bool:
        """Whether the lock looks unrefreshed for a lease by its file time (a
        holder on another host that died); filelock confirms it by watching."""
        try:
            age = time.time() - (self.folder / LOCK_FILE).stat().st_mtime
        except OSError:
            return False
        return age >= self._lease.lease_duration

    def release(self) -> None:
        """Let go (idempotent); the writer record goes first."""
        if self._lease.is_locked:
            (self.folder / WRITER_FILE).unlink(missing_ok=True)
            self._lease.release(force=True)

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


__all__ = ["LEASE_S", "LOCK_FILE", "WRITER_FILE", "LockedError", "WriterLock", "holder"]
