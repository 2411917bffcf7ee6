"""Passes over a list of rows made again only from where the list differs from the last one the pass read.

Why: after every write of a long case the checks read the user's live memory rows of the store's new state:
a list that holds the rows of the last one in the same places (a state read reuses the row objects of the
leaves the write did not change) and the new rows after them. A pass that touches every row made each write
O(store) (issue 35). `ListMemo` keeps the last list a pass read (a copy: the caller's list may change) and what
the pass made of it; the next list is compared with it object by object at C speed (pointers, not the rows),
and only the rows from the first place that holds another object are read again. The answer is the pass's
over the whole list as long as a row dict is not changed once read: what `RowMemo` already relies on (a row
read once is one object, shared by every state that holds it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from evals.core import chunks
from evals.core.chunks import Chunks

T = TypeVar("T")


def shared_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many leading items of the two lists are the same objects (compared at C speed; chunk by chunk for
    two `Chunks`)."""
    return chunks.shared_prefix(old, new)


class ListMemo(Generic[T]):
    """The last list a pass read under each key, with what the pass made of it (a few keys kept, oldest
    dropped; shared by threads, so what it hands out is never changed by it)."""

    def __init__(self, max_keys: int = 64):
        self._last: dict[Any, tuple[Sequence[Any], T]] = {}
        self._max_keys = max_keys
        self._lock = threading.Lock()

    def last(self, key: Any, rows: Sequence[Any]) -> tuple[int, Sequence[Any], T] | None:
        """(how many leading rows of `rows` are the last list's objects, that list, what the pass made of it)."""
        with self._lock:
            hit = self._last.get(key)
        return None if hit is None else (shared_prefix(hit[0], rows), hit[0], hit[1])

    def keep(self, key: Any, rows: Sequence[Any], made: T) -> None:
        """Keep `rows` (copied, but a `Chunks`: never changed) and what the pass made of them (which the caller
        must not change after)."""
        with self._lock:
            self._last.pop(key, None)
            if len(self._last) >= self._max_keys:
                self._last.pop(next(iter(self._last)))
            self._last[key] = (rows if isinstance(rows, Chunks) else list(rows), made)


__all__ = ["ListMemo", "shared_prefix"]
