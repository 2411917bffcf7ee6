"""A unit's scratch directory, removed off the unit's path by one background thread.

Why: removing a unit's stores (a dozen files and directories) waits on the disk for 2-20 ms, and a unit
that waits there holds its concurrency slot without calling the model. Here the unit hands its directory
to one remover thread and its slot goes to the next unit at once. `drain()` waits until every handed
directory is gone: the runner calls it before it closes the unit phase, and it runs at interpreter exit,
so nothing is left behind by a finished run.
"""

from __future__ import annotations

import atexit
import os
import queue
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PERIOD = 0.2  # seconds between the remover's rounds: a round removes every directory handed since the last one
_pending: queue.Queue[Path] = queue.Queue()
_wake = threading.Event()  # set by drain(): start a round now
_started_in: int | None = None  # the process whose remover thread runs (a forked child starts its own)
_start_lock = threading.Lock()


def _remove_forever(pending: queue.Queue[Path], wake: threading.Event) -> None:
    while True:
        wake.wait(_PERIOD)
        wake.clear()
        while True:
            try:
                path = pending.get_nowait()
            except queue.Empty:
                break
            try:
                shutil.rmtree(path, ignore_errors=True)
            finally:
                pending.task_done()


def discard(path: Path) -> None:
    """Remove `path` (a directory tree) in the background, in the remover's next round.

    The remover is not woken per directory: it never waits in `get()`, so handing a directory over wakes no
    thread. A wake-up per unit cost the unit's thread the GIL while the woken remover took its CPU (4-5% of the
    GIL-held samples at concurrency 16 under load)."""
    global _pending, _wake, _started_in
    with _start_lock:
        if _started_in != os.getpid():
            if _started_in is not None:  # a forked child: the parent's queue and thread are not ours
                _pending, _wake = queue.Queue(), threading.Event()
            threading.Thread(target=_remove_forever, args=(_pending, _wake), name="hymem-scratch-remover",
                             daemon=True).start()
            atexit.register(drain)
            _started_in = os.getpid()
    _pending.put(path)


def drain() -> None:
    """Wait until every directory this process discarded is removed (the remover starts a round at once)."""
    if _started_in != os.getpid():
        return
    done = _pending.all_tasks_done
    while True:
        _wake.set()
        with done:
            if not _pending.unfinished_tasks:
                return
            done.wait(_PERIOD)


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A new temporary directory, discarded (removed in the background) when the block exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        discard(path)


__all__ = ["discard", "drain", "scratch_dir"]
