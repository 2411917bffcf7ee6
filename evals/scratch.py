"""A unit's scratch directory, removed off the unit's path by one background thread.

Why: removing a unit's stores (a dozen files and directories) waits on the disk for 2-20 ms, and a unit
that waits there holds its concurrency slot without calling the model. Here the unit hands its directory
to one remover thread and its slot goes to the next unit at once. `drain()` waits until every handed
directory is gone: the runner calls it before it closes the unit phase, and it runs at interpreter exit,
so nothing is left behind by a finished run.
"""

from __future__ import annotations

import atexit
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_pending: queue.Queue[Path] = queue.Queue()
_started = False
_start_lock = threading.Lock()


def _remove_forever() -> None:
    while True:
        path = _pending.get()
        try:
            shutil.rmtree(path, ignore_errors=True)
        finally:
            _pending.task_done()


def discard(path: Path) -> None:
    """Remove `path` (a directory tree) in the background."""
    global _started
    with _start_lock:
        if not _started:
            threading.Thread(target=_remove_forever, name="hymem-scratch-remover", daemon=True).start()
            atexit.register(drain)
            _started = True
    _pending.put(path)


def drain() -> None:
    """Wait until every discarded directory is removed."""
    _pending.join()


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new temporary directory, discarded (removed in the background) when the block exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        discard(path)


__all__ = ["discard", "drain", "scratch_dir"]
