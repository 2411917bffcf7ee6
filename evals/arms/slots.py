"""Per-provider connection slots: a concurrency limit plus a shared pause after a 429.

Why a class of its own: the limit and the rate-limit pause must hold for every caller of one provider
(every thread of a local run; every worker of a Ray run, through `evals.run.executors.ray_executor`), not
per LM object. A 429's Retry-After pauses every caller, not only the one that was told.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Slots(Protocol):
    """What an LM call holds while it runs: this process's `ConnectionSlots` or a Ray run's cluster-wide ones."""

    def pause(self, seconds: float) -> None: ...

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> None: ...


class ConnectionSlots:
    """At most `limit` calls at once; after `pause(seconds)` no new call starts before that time."""

    def __init__(self, limit: int):
        self.limit = limit
        self._semaphore = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._resume_at = 0.0  # time.monotonic() before which no call starts

    def pause(self, seconds: float) -> None:
        """A provider asked for a break (429 Retry-After): hold every new call for `seconds`."""
        with self._lock:
            self._resume_at = max(self._resume_at, time.monotonic() + max(0.0, seconds))

    def __enter__(self) -> ConnectionSlots:
        self._semaphore.acquire()
        with self._lock:
            wait = self._resume_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        return self

    def __exit__(self, *exc: object) -> None:
        self._semaphore.release()


__all__ = ["ConnectionSlots"]
