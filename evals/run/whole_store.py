"""Which control writes of a case get the whole-store reads: get_all(), searches with k = every live memory, and
history() compared with every message written so far.

Why: those reads answer the whole store, so making them after every write costs O(store) per write and O(N²)
for a case of N writes (issue 35: a 10,000-turn case never finished). They are made after every write while the
user has few live memories (every short case, so its records do not change), then once every `live / SPREAD`
writes, and always after the case's last successful write: their total cost is O(SPREAD) rows per write, and
a wrong answer is still found, at the next whole-store read (a row get_all drops stays dropped; a message
history() lost stays lost). The checks of the write's own rows (its ops, its replay, its changed payloads, the
reconcile prompt's candidates) still run after every write.
"""

from __future__ import annotations

SMALL_STORE = 64  # live memories up to which every write gets the whole-store reads
SPREAD = 8  # past that, one whole-store read per live/SPREAD writes: about SPREAD rows read per write


class WholeStoreSchedule:
    """The writes whose whole-store reads are due, and whether the case's end must still make them."""

    def __init__(self, writes: int):
        self._last = writes - 1
        self._last_due = -1  # the last write the reads were due at
        self._checked = -1  # the last write the reads were made after
        self._succeeded = -1  # the last successful write

    def due(self, index: int, live: int | None) -> bool:
        """Whether write `index` gets the whole-store reads; `live`: the user's live memories before it (None:
        not known, so they are due)."""
        if (live is None or live <= SMALL_STORE or index == self._last
                or (index - self._last_due) * SPREAD >= live):
            self._last_due = index
            return True
        return False

    def succeeded(self, index: int, *, checked: bool) -> None:
        """Write `index` succeeded; `checked`: its whole-store reads were made."""
        self._succeeded = index
        if checked:
            self._checked = index

    def pending(self) -> int | None:
        """The last successful write, when no whole-store read was made after it (the case's end makes one)."""
        return self._succeeded if self._succeeded > self._checked else None


__all__ = ["SMALL_STORE", "SPREAD", "WholeStoreSchedule"]
