"""A run directory is owned by one process at a time: an advisory lock on RUN/.hymem-run.lock.

Why: two `run`s with the same `--out` both passed the "empty directory" check, then interleaved their units in
one units.jsonl and overwrote each other's manifest and tables. The lock is `fcntl.flock` on a file in the run
directory, held for the whole run (a `--resume` takes it too); the kernel drops it when the holder exits, however
it exits, so a crashed run never leaves a stale lock. The file records who holds it (pid, host, start time), so a
second writer is told whom it is waiting for.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK_FILE = ".hymem-run.lock"


class RunDirBusy(RuntimeError):
    """Another process holds the run directory's lock (bad usage: exit 2 at once, naming the holder)."""


class RunDirLock:
    """The held lock of one run directory; `release()` (or leaving the process) frees it."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir = run_dir
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, run_dir: Path, what: str = "--out") -> RunDirLock:
        """Take the lock of `run_dir` (which must exist) without waiting; RunDirBusy names the holder."""
        path = Path(run_dir) / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirBusy(f"{what} {run_dir} is in use by another run ({holder(path)}): wait for it to finish, "
                             "or give another --out") from None
        except BaseException:
            os.close(fd)
            raise
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record + b"\n", 0)
        return cls(Path(run_dir), fd)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def holder(path: Path, attempts: int = 20) -> str:
    """Who holds the lock, as the lock file says: `pid 123 on host h, started 2026-01-01T00:00:00Z`. The holder
    writes it just after taking the lock, so an empty file is read again for a moment before giving up."""
    for _ in range(attempts):
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8") or "null")
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict):
            return f"pid {data.get('pid')} on host {data.get('host')}, started {data.get('started')}"
        time.sleep(0.025)
    return "holder unknown"


__all__ = ["LOCK_FILE", "RunDirBusy", "RunDirLock", "holder"]
