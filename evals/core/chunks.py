"""A list read as the lists it is joined from, never joined: a table's rows as its leaf pages hold them.

Why: a long case reads its store after every write, and a write changes a few leaf pages of a store that grows
with the case. Joining each table's rows into one list per read, copying the memories by id, and comparing every
row with the last read's made each write O(store) (issue 35, point 3), in copies and in the garbage collector's
passes over them. A `Chunks` holds the leaves' own row lists (shared, never changed, by every read whose leaf is
the same), so a read is O(leaves) pointers, and two reads are compared chunk by chunk: same chunk object, same
rows (`shared_prefix`, `differing_items`).

It reads like a list (len, index, negative index, slices, iteration, `==` with a list), so a check that reads
`state.tables[...]` needs no change; one that must stay O(changed) uses the helpers below.
"""

from __future__ import annotations

import operator
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate, chain, compress, islice
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
R = TypeVar("R")


class Chunks(Sequence[T]):
    """The items of `chunks` in order, as one read-only sequence. The chunks must never change once given: they
    are shared with other `Chunks` (an empty chunk is kept, so chunk `i` stays the i-th group of its maker)."""

    __slots__ = ("chunks", "ends", "_flat")

    def __init__(self, chunks: Sequence[Sequence[T]] = ()):
        self.chunks: tuple[Sequence[T], ...] = tuple(chunks)
        self.ends: list[int] = list(accumulate(map(len, self.chunks)))  # where each chunk ends
        self._flat: list[T] | None = None

    def __len__(self) -> int:
        return self.ends[-1] if self.ends else 0

    @overload
    def __getitem__(self, at: int) -> T: ...

    @overload
    def __getitem__(self, at: slice) -> list[T]: ...

    def __getitem__(self, at: int | slice) -> T | list[T]:
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self))
            if step != 1:
                return self.flat()[at]
            if start >= stop:
                return []
            c = bisect_right(self.ends, start)  # the chunk `start` is in: the items before it are not walked
            skip = start - (self.ends[c - 1] if c else 0)
            return list(islice(chain.from_iterable(islice(self.chunks, c, None)), skip, skip + stop - start))
        n = len(self)
        i = operator.index(at)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("Chunks index out of range")
        c = bisect_right(self.ends, i)
        return self.chunks[c][i - (self.ends[c - 1] if c else 0)]

    def __iter__(self) -> Iterator[T]:
        return chain.from_iterable(self.chunks)

    def __reversed__(self) -> Iterator[T]:
        return chain.from_iterable(map(reversed, reversed(self.chunks)))

    def flat(self) -> list[T]:
        """The items as one list (made once: for a reader that needs a real list)."""
        if self._flat is None:
            self._flat = list(self)
        return self._flat

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Chunks):
            if len(self) != len(other):
                return False
            return all(map(operator.eq, self, other))
        if isinstance(other, list):
            return len(self) == len(other) and all(map(operator.eq, self, other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.flat())


class ChunkMemo(Generic[R]):
    """What a pass made of each chunk, found once per chunk (and extra key): a read shares the chunks of the
    leaves a write did not change, so a pass over a state's `Chunks` costs O(chunks), not O(rows). Keyed by the
    chunk's identity, the chunk kept with its entry so the identity is not reused while the entry lives
    (bounded: cleared when full; shared by threads)."""

    def __init__(self, make: Callable[..., R], max_entries: int = 8192):
        self._make = make
        self._found: dict[tuple[Any, ...], tuple[Sequence[Any], R]] = {}
        self._max = max_entries
        self._lock = threading.Lock()

    def of(self, chunk: Sequence[Any], *key: Any) -> R:
        """`make(chunk, *key)`, made once per chunk object and key."""
        at = (id(chunk), *key)
        hit = self._found.get(at)
        if hit is not None and hit[0] is chunk:
            return hit[1]
        made = self._make(chunk, *key)
        with self._lock:
            if len(self._found) >= self._max:
                self._found.clear()
            self._found[at] = (chunk, made)
        return made


def chunks_of(items: Sequence[T]) -> tuple[Sequence[Sequence[T]], list[int]]:
    """(the chunks, where each ends) of a `Chunks`; a plain sequence as one chunk."""
    if isinstance(items, Chunks):
        return items.chunks, items.ends
    return ((items,), [len(items)]) if len(items) else ((), [])


def shared_prefix(old: Sequence[Any], new: Sequence[Any]) -> int:
    """How many leading items of the two sequences are the same objects: chunk by chunk when both are `Chunks`
    (the same chunk object: the same items; O(chunks) plus the first chunk that differs), else item by item
    at C speed."""
    if isinstance(old, Chunks) and isinstance(new, Chunks):
        a, b = old.chunks, new.chunks
        shared = min(len(a), len(b))
        c = next(compress(range(shared), map(operator.is_not, a, b)), shared)
        start = old.ends[c - 1] if c else 0
        if c == shared:
            return start
        x, y = a[c], b[c]
        m = min(len(x), len(y))
        return start + next(compress(range(m), map(operator.is_not, x, y)), m)
    shared = min(len(old), len(new))
    return next(compress(range(shared), map(operator.is_not, old, new)), shared)


def differing_items(old: Sequence[T], new: Sequence[T]) -> tuple[list[T], list[T]]:
    """(the items of `old`, the items of `new`) in the chunks the two do not share, for two `Chunks` (each
    chunk of one that is not a chunk of the other, found by identity in O(chunks)); for plain sequences, the
    items at the positions where the two hold different objects and past the shorter one's end. Every item that
    is not the same object at the same place in both is in one of the lists (an item of a chunk both hold, in
    the same order among their shared chunks, keeps its place relative to every other shared item)."""
    if isinstance(old, Chunks) and isinstance(new, Chunks):
        was, now = set(map(id, old.chunks)), set(map(id, new.chunks))
        if [c for c in old.chunks if id(c) in now] != [c for c in new.chunks if id(c) in was]:
            return differing_items(old.flat(), new.flat())  # shared chunks in another order: item by item
        return (list(chain.from_iterable(c for c in old.chunks if id(c) not in now)),
                list(chain.from_iterable(c for c in new.chunks if id(c) not in was)))
    shared = min(len(old), len(new))
    moved = list(compress(range(shared), map(operator.is_not, old, new)))
    return ([old[i] for i in moved] + list(old[shared:]), [new[i] for i in moved] + list(new[shared:]))


__all__ = ["ChunkMemo", "Chunks", "chunks_of", "differing_items", "shared_prefix"]
