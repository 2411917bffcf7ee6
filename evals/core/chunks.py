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
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, compress, islice, repeat
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")
R = TypeVar("R")


class Chunks(Sequence[T]):
    """The items of `chunks` in order, as one read-only sequence. The chunks must never change once given: they
    are shared with other `Chunks` (an empty chunk is kept, so chunk `i` stays the i-th group of its maker)."""

    __slots__ = ("chunks", "ends", "_flat")

    def __init__(self, chunks: Sequence[Sequence[T]] = ()):
        self.chunks: tuple[Sequence[T], ...] = tuple(chunks)
        self.ends: tuple[int, ...] = tuple(accumulate(map(len, self.chunks)))  # where each chunk ends (untracked)
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
    (shared by threads).

    Bounded, least recently used dropped first: each read of a long case makes a new last chunk, and the ones
    before it are read no more. Kept until a bound of 8,192 entries, they were a long case's largest part of the
    heap (1.3 million row pointers after 2,000 writes, in three memos), which every full collection of the
    garbage collector walks; a state's own chunks (about 50 at 10,000 memories) are the ones read again."""

    def __init__(self, make: Callable[..., R], max_entries: int = 1024):
        self._make = make
        self._found: dict[tuple[Any, ...], tuple[Sequence[Any], R]] = {}  # the least recently used first
        self._max = max_entries
        self._lock = threading.Lock()

    def of(self, chunk: Sequence[Any], *key: Any) -> R:
        """`make(chunk, *key)`, made once per chunk object and key (while its entry is kept)."""
        at = (id(chunk), *key)
        with self._lock:
            hit = self._found.pop(at, None)
            if hit is not None and hit[0] is chunk:
                self._found[at] = hit  # now the most recently used
                return hit[1]
        made = self._make(chunk, *key)
        with self._lock:
            while len(self._found) >= self._max:
                del self._found[next(iter(self._found))]
            self._found[at] = (chunk, made)
        return made

    def __len__(self) -> int:
        return len(self._found)


def chunks_of(items: Sequence[T]) -> tuple[Sequence[Sequence[T]], Sequence[int]]:
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


def _by_id(chunk: Sequence[dict[str, Any]], field: str | None) -> tuple[dict[int, Any], int, int] | None:
    """A chunk's rows (`field` None) or their `field` by id, with its first and last id; None when its ids are not
    integers increasing from row to row."""
    ids: list[Any] = list(map(dict.get, chunk, repeat("id")))
    if not all(type(i) is int for i in ids) or any(map(operator.ge, ids, ids[1:])):
        return None
    values = chunk if field is None else map(dict.get, chunk, repeat(field))
    return dict(zip(ids, values, strict=True)), (ids[0] if ids else 0), (ids[-1] if ids else 0)


_BY_ID: ChunkMemo[tuple[dict[int, Any], int, int] | None] = ChunkMemo(_by_id)


class ChunkedById(Mapping[Any, Any]):
    """Rows (or one field of them) by id over a `Chunks`, when the ids are distinct integers increasing from row to
    row (hymem's memories: the id is the rowid, so a leaf holds them in order): each chunk's dict made once per
    chunk (`ChunkMemo`), the chunk of an id found by bisecting the chunks' first ids. Why: a dict of every row
    copied per read made each write O(store) in copies and in the garbage collector's passes over them."""

    def __init__(self, maps: list[dict[int, Any]], firsts: list[int]):
        self._maps, self._firsts = maps, firsts

    @classmethod
    def of(cls, rows: Sequence[dict[str, Any]], field: str | None = None) -> ChunkedById | None:
        """The rows (or their `field`) by id, or None when `rows` is not a `Chunks` or their ids are not distinct
        increasing integers (then the caller makes its dict whole)."""
        if not isinstance(rows, Chunks):
            return None
        made = [_BY_ID.of(chunk, field) for chunk in rows.chunks if chunk]
        if any(m is None for m in made):
            return None
        parts = [m for m in made if m is not None]
        if any(a[2] >= b[1] for a, b in zip(parts, parts[1:], strict=False)):
            return None  # a chunk's last id not below the next chunk's first
        return cls([m[0] for m in parts], [m[1] for m in parts])

    def __getitem__(self, key: Any) -> Any:
        try:
            at = bisect_right(self._firsts, key) - 1
        except TypeError:  # not comparable with an integer: no row's id
            raise KeyError(key) from None
        if at < 0:
            raise KeyError(key)
        return self._maps[at][key]

    def __iter__(self) -> Iterator[Any]:
        return chain.from_iterable(self._maps)

    def __len__(self) -> int:
        return sum(map(len, self._maps))


__all__ = ["ChunkMemo", "ChunkedById", "Chunks", "chunks_of", "differing_items", "shared_prefix"]
