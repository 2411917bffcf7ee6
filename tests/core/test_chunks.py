"""A state read shares its tables' rows with the last read in chunks (`Chunks`), and the checks' per-write passes
read them chunk by chunk: every value they see equals the one made from scratch, over any writes to a real
SQLite file (inserts, updates, deletes that split and merge pages in a three-level b-tree)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from evals.check.prompt_contract import _kinds_by_id
from evals.core.chunks import ChunkMemo, Chunks, differing_items, shared_prefix
from evals.core.rows import is_live
from evals.core.store_state import (
    RowMemo,
    changed_row_ids,
    live_memories,
    read_state,
    rows_by_id,
    user_live_memories,
)
from hymem.store import DB_FILE
from tests.core.test_store_view import as_read_from_scratch, from_sql
from tests.draws import check_drawn, twin

chunk_lists = st.lists(st.lists(st.integers(0, 9), max_size=5), max_size=6)


@given(chunks=chunk_lists, start=st.integers(-40, 40), stop=st.integers(-40, 40), step=st.sampled_from([1, 2, -1]))
def test_chunks_read_as_the_list_they_join(chunks, start, stop, step):
    flat = [x for c in chunks for x in c]
    seq = Chunks(chunks)
    assert len(seq) == len(flat) and list(seq) == flat and list(reversed(seq)) == flat[::-1]
    assert seq == flat and flat == seq and seq == Chunks([flat]) and not seq != flat
    assert seq != flat + [1]
    assert seq[start:stop:step] == flat[start:stop:step]
    for i in range(-len(flat), len(flat)):
        assert seq[i] == flat[i]
    for i in (len(flat), -len(flat) - 1):
        try:
            seq[i]
        except IndexError:
            pass
        else:
            raise AssertionError(f"index {i} of {len(flat)} items")


@given(chunks=chunk_lists, keep=st.integers(0, 6), new=chunk_lists)
def test_chunk_comparisons_find_every_item_not_shared(chunks, keep, new):
    """Two sequences sharing their first chunks: the shared prefix counts those chunks' items and the same
    objects after them; every item not at the same place in both is among the differing items."""
    rows = [[{"id": x} for x in c] for c in chunks]
    fresh = [[{"id": x} for x in c] for c in new]
    old, now = Chunks(rows), Chunks(rows[:keep] + fresh)
    flat_old, flat_now = list(old), list(now)
    plain = next((i for i, (a, b) in enumerate(zip(flat_old, flat_now, strict=False)) if a is not b),
                 min(len(flat_old), len(flat_now)))
    assert shared_prefix(old, now) == plain == shared_prefix(flat_old, flat_now)
    gone, added = differing_items(old, now)
    assert {id(r) for r in flat_old[plain:]} <= {id(r) for r in gone}
    assert {id(r) for r in flat_now[plain:]} <= {id(r) for r in added}


def memories_store(path: Path, rows: int = 3000) -> sqlite3.Connection:
    """hymem's memories columns in a three-level b-tree (512-byte pages): a few thousand rows of two users."""
    path.mkdir(exist_ok=True)
    conn = sqlite3.connect(path / DB_FILE, isolation_level=None)
    conn.execute("PRAGMA page_size=512")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # no fsync per autocommitted row: the same file bytes, ~15x faster
    conn.execute("CREATE TABLE memories (id INTEGER PRIMARY KEY, user_id TEXT, text TEXT, kind TEXT, "
                 "vector BLOB, superseded_by INTEGER, deleted_at REAL)")
    conn.executemany("INSERT INTO memories (id, user_id, text, kind, vector) VALUES (?, ?, ?, ?, ?)",
                     [(10 * i, "ana" if i % 3 else "bo", f"row {i}", "fact" if i % 4 else "event",
                       bytes([i % 256]) * (i % 90)) for i in range(rows)])
    return conn


def as_made_from_scratch(state: Any, before: Any, path: Path) -> None:
    """The state's rows, its rows by id, its live and user rows and the reconcile check's kinds equal those made
    from plain SQL; the ids `changed_row_ids` gives cover every id whose row changed."""
    assert as_read_from_scratch(state, path)
    rows = from_sql(path)["memories"]
    by_id = {r["id"]: r for r in rows}
    assert dict(rows_by_id(state)) == by_id and len(rows_by_id(state)) == len(by_id)
    assert all(rows_by_id(state).get(i) == by_id.get(i) for i in (-1, 5, 10, 10 ** 9, "10", None, 10.0))
    live = [r for r in rows if is_live(r)]
    assert live_memories(state) == live
    for user in ("ana", "bo", "nobody"):
        mine = [r for r in live if r["user_id"] == user]
        assert user_live_memories(state, user) == mine
        kinds, counts = _kinds_by_id(user_live_memories(state, user))
        assert dict(kinds) == {r["id"]: r["kind"] for r in mine}
        assert counts == Counter(r["kind"] for r in mine)
    if before is not None:
        old = rows_by_id(before)
        changed = {i for i in set(old) | set(by_id) if old.get(i) != by_id.get(i)}
        assert changed <= changed_row_ids(before, state)


WRITES = st.lists(st.tuples(st.sampled_from(["append", "insert", "update", "same_size", "supersede", "grow",
                                             "delete", "checkpoint"]),
                            st.integers(0, 3100), st.integers(1, 400)), min_size=1, max_size=10)


@twin(default=3, heavy=40)  # each history: a 3,000-row store read after every write, about 1 s
def test_every_incremental_read_equals_one_from_scratch(tmp_path_factory, draws):
    check_drawn(draws, lambda ops: replay_and_compare(tmp_path_factory, ops), ops=WRITES)


def replay_and_compare(tmp_path_factory: Any, ops: list[tuple[str, int, int]]) -> None:
    """Random appends, inserts between rows, updates (of the same size too), supersedes, rows grown onto overflow pages and range
    deletes (pages split and merged anywhere in the b-tree), each read after one sharing the last read's chunks:
    every value a check reads equals the one made from scratch."""
    path = tmp_path_factory.mktemp("mem")
    conn = memories_store(path)
    memo = RowMemo()
    before = read_state(path, memo)
    as_made_from_scratch(before, None, path)
    for op, at, n in ops:
        if op == "append":
            conn.executemany("INSERT INTO memories (user_id, text, kind, vector) VALUES (?, ?, ?, ?)",
                             [("ana", f"new {i}", "fact", b"\x07" * (i % 70)) for i in range(n)])
        elif op == "insert":  # between existing rows (their ids are multiples of 10)
            conn.executemany("INSERT OR IGNORE INTO memories (id, user_id, text, kind) VALUES (?, ?, ?, ?)",
                             [(10 * at + 1 + i % 9, "bo", f"between {i}", "event") for i in range(min(n, 9))])
        elif op == "update":
            conn.execute("UPDATE memories SET text = ?, kind = ? WHERE id BETWEEN ? AND ?",
                         (f"changed {n}", "event" if n % 2 else "fact", 10 * at, 10 * at + 10 * n))
        elif op == "same_size":  # rows changed in their leaves, no page split: those leaves alone read again
            conn.execute("UPDATE memories SET text = CASE WHEN text = upper(text) THEN lower(text) ELSE upper(text) "
                         "END WHERE id BETWEEN ? AND ?", (10 * at, 10 * at + 10 * n))
        elif op == "supersede":
            conn.execute("UPDATE memories SET superseded_by = ? WHERE id BETWEEN ? AND ?",
                         (10 * at + 5, 10 * at, 10 * at + 2 * n))
        elif op == "grow":  # a row onto overflow pages
            conn.execute("UPDATE memories SET vector = ? WHERE id = ?", (bytes([n % 256]) * (600 + 5 * n), 10 * at))
        elif op == "delete":
            conn.execute("DELETE FROM memories WHERE id BETWEEN ? AND ?", (10 * at, 10 * at + 10 * n))
        else:
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
        state = read_state(path, memo)
        assert isinstance(state.tables["memories"], Chunks)
        as_made_from_scratch(state, before, path)
        before = state
    conn.close()


def test_an_append_shares_all_but_the_last_chunks_with_the_last_read(tmp_path):
    """After an append only the last chunk of a big table is new: a read costs O(chunks), and the checks'
    passes (rows by id, the user's rows, the changed ids) read the new chunk only."""
    conn = memories_store(tmp_path / "s")
    memo = RowMemo()
    before = read_state(tmp_path / "s", memo)
    rows_by_id(before), user_live_memories(before, "ana")
    for i in range(20):
        conn.execute("INSERT INTO memories (user_id, text, kind) VALUES ('ana', ?, 'fact')", (f"appended {i}",))
        state = read_state(tmp_path / "s", memo)
        old, new = before.tables["memories"], state.tables["memories"]
        assert isinstance(old, Chunks) and isinstance(new, Chunks) and len(new.chunks) > 5
        assert all(a is b for a, b in zip(old.chunks[:-2], new.chunks, strict=False))
        assert len(changed_row_ids(before, state)) < len(new) // 4
        as_made_from_scratch(state, before, tmp_path / "s")
        before = state
    conn.close()


@given(reads=st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=8), min_size=1, max_size=60),
       bound=st.integers(1, 12))
def test_a_chunk_memo_answers_as_its_pass_and_keeps_the_chunks_read_last(reads, bound):
    """A bounded memo over chunks read as a long case reads them (a few old chunks again, a new one each read):
    every answer is the pass's over that chunk, it never holds more than its bound, and a chunk read again
    before `bound` other chunks were is not made again (the least recently used go first)."""
    made: list[int] = []

    def total(chunk: list[int], scale: int) -> int:
        made.append(id(chunk))
        return scale * sum(chunk)

    memo: ChunkMemo[int] = ChunkMemo(total, max_entries=bound)
    chunks = [[i, i + 1] for i in range(31)]  # chunk i, the same object every time it is read
    recent: list[int] = []  # the chunks read, the most recent last, each once
    for read in reads:
        for i in read:
            before = len(made)
            assert memo.of(chunks[i], 3) == 3 * sum(chunks[i])
            kept = i in recent[-bound:]
            assert (len(made) == before) == kept, (i, recent, bound)
            if i in recent:
                recent.remove(i)
            recent.append(i)
            assert len(memo) <= bound
