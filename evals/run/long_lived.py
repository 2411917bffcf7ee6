"""A long unit's heap settled every so many writes: collected once, then what survived left out of later scans.

Why (issue 35, point 3): a unit keeps what it learns until it ends (its records, the rows and pages its checks
memo, the model's history), so a 10,000-write unit's heap grows by tens of objects a write. CPython starts a full
collection each time a quarter of the heap has been promoted since the last, and a full collection walks the
whole heap: the collector then costs a long unit more per write than a short one. `gc.freeze()` moves every
object tracked now to a permanent generation that collections skip; collected first, it freezes only what is
alive. What it trades: an object frozen and later dropped is still freed when its last reference goes, but a
reference cycle among frozen objects waits for the unfreeze, which comes when no long unit is left running in
the process (units on other threads share the process's collector). The first settle, after `FIRST` writes,
collects the whole heap (the process's modules too, ~0.1 s); each later one, every `EVERY` writes, only what
is not frozen: the last `EVERY` writes' survivors and garbage. No settle follows a unit's last write, so units of
`FIRST` writes or fewer never freeze anything: a usual case runs with the collector exactly as before.
"""

from __future__ import annotations

import gc
import threading
from types import TracebackType

FIRST = 1000  # the first settle's write: its collection of the whole heap is ~0.1 ms a write of the unit so far
EVERY = 100  # writes between later settles: each collects only what is not frozen yet

_lock = threading.Lock()
_settling = 0  # units that froze the heap and have not ended: the last to end unfreezes it


class SettledHeap:
    """Context manager around one unit's writes, told `written(done, total)` after each; the heap is unfrozen once
    no unit that froze it is still running."""

    def __init__(self, first: int | None = None, every: int | None = None):
        self.first = first if first is not None else FIRST
        self.every = every if every is not None else EVERY
        self.froze = False

    def written(self, done: int, total: int) -> None:
        """After the unit's `done`-th write of `total`: at `first`, then every `every` writes, collect and freeze what
        is left; never after its last write (the unit ends: nothing would gain)."""
        global _settling
        if done < self.first or (done - self.first) % self.every or done >= total:
            return
        if not gc.isenabled():  # a caller that turned the collector off keeps it that way
            return
        gc.collect()
        with _lock:
            gc.freeze()
            if not self.froze:
                self.froze = True
                _settling += 1

    def __enter__(self) -> SettledHeap:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        global _settling
        if not self.froze:
            return
        with _lock:
            _settling -= 1
            if _settling == 0:
                gc.unfreeze()  # into the oldest generation: the next full collection walks it once more
        self.froze = False


__all__ = ["EVERY", "FIRST", "SettledHeap"]
