"""The checker reuses a state read only when the database is the same bytes a reader would see: reads with
the reuse equal reads of the files from scratch, on real SQLite files in WAL mode and through a sweep."""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evals.arms.hymem_system as hymem_system
from evals.cases.dataset import Case
from evals.core.store_state import RowMemo, StoreState, _canonical_row_key, _keys, _row_key, canonical, read_state
from evals.core.store_view import (
    COARSE_SETTLED_NS,
    INTERIOR_TABLE,
    LEAF_TABLE,
    SETTLED_NS,
    PageDigests,
    _btree_page,
    btree_page,
    read_view,
    table_leaves,
    view_digest,
)
from evals.faults.plan import FaultPlan
from evals.run.replay import CaseReplayer, UnitModels
from hymem import HashEmbedder
from hymem.offline import offline_lm
from hymem.store import DB_FILE
from tests.draws import check_drawn, twin


def same(a: StoreState, b: StoreState) -> bool:
    return (a.tables, _keys(a), a.canonical_form, a.faiss, a.faiss_stale) == \
        (b.tables, _keys(b), b.canonical_form, b.faiss, b.faiss_stale)


def from_sql(store: Path) -> dict[str, list[dict[str, Any]]]:
    """Every table the checker reads, through plain SQL: the reference the page-reading reads are held to."""
    db = sqlite3.connect(f"file:{store / DB_FILE}?mode=ro", uri=True)
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        out = {}
        for name in set(names) - {"meta", "migrations", "sqlite_sequence"}:
            cursor = db.execute(f'SELECT * FROM "{name}" ORDER BY rowid')
            columns = [d[0] for d in cursor.description]
            out[name] = [dict(zip(columns, raw, strict=True)) for raw in cursor.fetchall()]
        return out
    finally:
        db.close()


def as_read_from_scratch(state: StoreState, store: Path) -> bool:
    """The state holds exactly the rows plain SQL reads, with their keys, and the FAISS part a fresh read has."""
    tables = from_sql(store)
    fresh = read_state(store, RowMemo())
    return (state.tables == tables
            and _keys(state) == {t: {_row_key(r) for r in rows} for t, rows in tables.items()}
            and canonical(state) == {**{t: sorted(_canonical_row_key(r) for r in rows) for t, rows in tables.items()},
                                     "faiss": canonical(fresh)["faiss"]}
            and (state.faiss, state.faiss_stale) == (fresh.faiss, fresh.faiss_stale))


def writer(store: Path) -> sqlite3.Connection:
    store.mkdir(exist_ok=True)
    conn = sqlite3.connect(store / DB_FILE, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, sqlite3.Connection]:
    conn = writer(tmp_path / "s")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT NOT NULL, blob BLOB)")
    conn.executemany("INSERT INTO notes (text, blob) VALUES (?, ?)",
                     [(f"note {i:04d}", bytes([i % 256]) * 900) for i in range(40)])  # several pages
    return tmp_path / "s", conn


def test_each_read_equals_a_read_from_scratch_and_unchanged_databases_are_reused(store):
    path, conn = store
    memo = RowMemo()

    def reads() -> dict[str, int]:
        return {k: memo.reads[k] for k in ("rows", "reused")}

    def check() -> StoreState:
        state = read_state(path, memo)
        assert as_read_from_scratch(state, path)
        return state

    first = check()
    assert reads() == {"rows": 1, "reused": 0}
    conn.execute("BEGIN")
    conn.execute("INSERT INTO notes (text) VALUES ('rolled back')")
    conn.execute("DELETE FROM notes WHERE id = 3")
    conn.execute("ROLLBACK")
    check()
    assert reads() == {"rows": 1, "reused": 1}  # a rolled-back write left every page as it was
    conn.execute("UPDATE notes SET text = 'note 9999' WHERE id = 7")  # same length, in place, one byte apart
    changed = check()
    assert reads() == {"rows": 2, "reused": 1}
    assert changed.tables["notes"] != first.tables["notes"]
    conn.execute("UPDATE notes SET blob = ? WHERE id = 30", (b"\xff" * 900,))
    conn.execute("INSERT INTO notes (text) VALUES ('new')")
    last = check()
    assert memo.reads["rows"] == 3
    conn.close()  # the last connection checkpoints the WAL into the main file and deletes it
    assert not (path / f"{DB_FILE}-wal").exists()
    closed = check()
    assert reads() == {"rows": 3, "reused": 2}  # the same pages, now in the main file
    assert same(closed, last)


def test_the_databases_kept_for_reuse_are_the_most_recently_read(store, tmp_path):
    """A memo keeps at most `max_databases` whole databases: one read again since (a sweep's pre-write state,
    read after each fault) stays, the least recently read goes and is read again, equal to a read from scratch."""
    path, conn = store
    copies = []
    for i in range(3):  # three databases, each a copy of the store's files (the same bytes: the same digest)
        conn.execute("UPDATE notes SET text = ? WHERE id = 5", (f"version {i}",))
        copies.append(tmp_path / f"copy-{i}")
        shutil.copytree(path, copies[-1])
    conn.close()
    a, b, c = copies
    memo = RowMemo(max_databases=2)
    for where, reused in ((a, 0), (b, 0), (a, 1), (c, 1), (a, 2), (b, 2)):
        state = read_state(where, memo)
        assert as_read_from_scratch(state, where)
        assert memo.reads["reused"] == reused, where  # c dropped b (read least recently), not a


def test_a_wal_restarted_after_a_checkpoint_is_read_right(store):
    path, conn = store
    memo = RowMemo()
    read_state(path, memo)
    conn.execute("UPDATE notes SET text = 'first' WHERE id = 1")
    conn.execute("PRAGMA wal_checkpoint(RESTART)")  # every frame copied into the main file
    conn.execute("UPDATE notes SET text = 'again' WHERE id = 2")  # the WAL starts over with new salts
    assert as_read_from_scratch(read_state(path, memo), path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert as_read_from_scratch(read_state(path, memo), path)
    conn.close()


def test_frames_no_reader_was_shown_make_the_digest_unknown(store, tmp_path):
    """A commit written to the WAL but not published in its index (a writer killed in between) would be
    replayed by a new reader's recovery: no digest, so the rows are read."""
    path, conn = store
    conn.execute("UPDATE notes SET text = 'published' WHERE id = 1")
    index_before = (path / f"{DB_FILE}-shm").read_bytes()
    conn.execute("UPDATE notes SET text = 'unpublished' WHERE id = 1")
    assert view_digest(path / DB_FILE) is not None
    crashed = tmp_path / "crashed"
    shutil.copytree(path, crashed)
    (crashed / f"{DB_FILE}-shm").write_bytes(index_before)  # the index as it was before the last commit
    assert view_digest(crashed / DB_FILE) is None
    (crashed / f"{DB_FILE}-shm").unlink()  # a WAL without its index
    assert view_digest(crashed / DB_FILE) is None
    conn.close()


def test_old_frames_past_a_restarted_wal_are_not_read_and_recovery_decides_what_counts(store, tmp_path):
    """After a checkpoint restarts the WAL, its new frames are followed by the last generation's. A read stops
    at the frame after the published ones, as SQLite's recovery stops at the first frame that does not belong:
    a later frame given this generation's salts (its checksum chain broken) is not a state any reader sees."""
    path, conn = store
    for i in range(1, 31):  # the first generation: dozens of frames
        conn.execute("UPDATE notes SET text = ? WHERE id = ?", (f"first {i}", i))
    conn.execute("PRAGMA wal_checkpoint(RESTART)")
    conn.execute("UPDATE notes SET text = 'second' WHERE id = 1")  # the WAL starts over with new salts
    wal_file = path / f"{DB_FILE}-wal"
    wal = bytearray(wal_file.read_bytes())
    frame_size = 24 + int.from_bytes(wal[8:12], "big")
    frames = (len(wal) - 32) // frame_size
    new = [wal[32 + i * frame_size + 8:32 + i * frame_size + 16] == wal[16:24] for i in range(frames)]
    published = new.index(False)
    assert published < frames - 1 and not any(new[published:])  # old frames follow the new ones
    assert view_digest(path / DB_FILE) is not None
    assert as_read_from_scratch(read_state(path, RowMemo()), path)
    crafted = tmp_path / "crafted"
    shutil.copytree(path, crafted)
    at = 32 + (published + 1) * frame_size + 8  # the second frame past the published ones: given the new salts
    wal[at:at + 8] = wal[16:24]
    (crafted / f"{DB_FILE}-wal").write_bytes(wal)
    state = read_state(crafted, RowMemo())
    assert view_digest(crafted / DB_FILE) is not None
    recovered = tmp_path / "recovered"  # without its index, SQLite recovers the WAL from its frames
    shutil.copytree(crafted, recovered)
    (recovered / f"{DB_FILE}-shm").unlink()
    assert state.tables == from_sql(recovered)
    assert state.tables["notes"][0]["text"] == "second" and state.tables["notes"][1]["text"] == "first 2"
    conn.close()


@pytest.mark.ci_heavy  # a default sweep, each state read twice (run by `nox -s heavy`); the random histories stay
def test_a_sweep_reads_every_state_as_a_read_from_scratch_would(monkeypatch):
    """Through the replayer: every state a sweep reads with the reuse equals the files read from scratch, and
    most reads are reused (a failed write's rollback, the idempotent repeat, the close)."""
    case = Case.model_validate({"id": "c", "lang": "en", "user_id": "tim", "turns": [
        [{"role": "user", "name": "Tim", "content": text}]
        for text in ("I live in Paris.", "I work at Acme.", "I moved to Berlin.")]})
    memos: list[RowMemo] = []
    reads = {"n": 0}

    def checked(store_dir: Path, memo: RowMemo | None = None) -> StoreState:
        state = read_state(store_dir, memo)
        assert as_read_from_scratch(state, store_dir), store_dir
        reads["n"] += 1
        if memo is not None and all(m is not memo for m in memos):
            memos.append(memo)
        return state

    monkeypatch.setattr(hymem_system, "read_state", checked)
    run = CaseReplayer(case, "view", "offline", UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                       FaultPlan.parse("sweep"), seed=0).run()
    assert run.status == "ok", run.error
    assert run.faults and all(f.outcome != "infra_error" for f in run.faults)
    (memo,) = memos
    assert memo.reads["rows"] + memo.reads["reused"] == reads["n"]
    assert memo.reads["reused"] > 2 * memo.reads["rows"]


def test_only_the_leaf_pages_a_write_changed_are_read_again(store):
    """A database not seen before is read leaf page by leaf page: a leaf that is the same bytes as one read
    before (its overflow pages too) holds the same rows; the others are read through SQL."""
    path, conn = store
    conn.execute("CREATE TABLE big (id INTEGER PRIMARY KEY, payload BLOB)")  # rows spill to overflow pages
    conn.executemany("INSERT INTO big (payload) VALUES (?)", [(bytes([i]) * 9000,) for i in range(6)])
    memo = RowMemo()

    def check() -> StoreState:
        state = read_state(path, memo)
        assert as_read_from_scratch(state, path)
        return state

    check()
    leaves = memo.reads["leaves_read"]
    conn.execute("UPDATE notes SET text = 'note 9999' WHERE id = 20")  # one leaf of `notes`
    check()
    assert memo.reads["leaves_read"] == leaves + 1
    leaves = memo.reads["leaves_read"]
    # the same size and the same first bytes: SQLite overwrites the overflow pages in place, the leaf page
    # stays the same bytes, and only the overflow pages' digests tell the rows apart
    conn.execute("UPDATE big SET payload = ? WHERE id = 3", (b"\x02" * 8000 + b"\x08" * 1000,))
    state = check()
    assert memo.reads["leaves_read"] == leaves + 1
    assert state.tables["big"][2]["payload"][8000:] == b"\x08" * 1000
    conn.close()


@pytest.mark.parametrize("small", [False, True], ids=["default", "tiny-memo"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["insert", "update", "delete", "rollback", "checkpoint", "reopen"]),
                          st.integers(0, 60), st.integers(0, 6000)), max_size=12))
def test_any_history_of_writes_reads_as_a_read_from_scratch(tmp_path_factory, ops, small):
    """Random writes, rolled-back writes, checkpoints and reopens, each followed by a read with the reuse and
    one from scratch: always the same state, also when the memo keeps almost nothing (`small`)."""
    path = tmp_path_factory.mktemp("history")
    conn = writer(path)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT, blob BLOB)")
    conn.executemany("INSERT INTO t (text, blob) VALUES (?, ?)", [(f"row {i}", b"\x01" * (i * 97)) for i in range(40)])
    memo = RowMemo(max_database_rows=30, max_leaves=3) if small else RowMemo()
    if small:
        memo.pages = PageDigests(max_bytes=3 * 4096)
    for op, row, size in ops:
        if op == "insert":
            conn.execute("INSERT INTO t (text, blob) VALUES (?, ?)", (f"new {row}", bytes([row % 256]) * size))
        elif op == "update":
            conn.execute("UPDATE t SET blob = ?, text = ? WHERE id = ?", (bytes([size % 256]) * size, str(size), row))
        elif op == "delete":
            conn.execute("DELETE FROM t WHERE id = ?", (row,))
        elif op == "rollback":
            conn.execute("BEGIN")
            conn.execute("UPDATE t SET text = 'gone' WHERE id = ?", (row,))
            conn.execute("ROLLBACK")
        elif op == "checkpoint":
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
        else:
            conn.close()
            conn = writer(path)
        assert as_read_from_scratch(read_state(path, memo), path)
    conn.close()


@pytest.mark.ci_heavy  # 60 writes, each state read twice (run by `nox -s heavy`)
def test_every_read_of_a_long_case_equals_a_read_from_scratch_and_reads_only_changed_leaves(monkeypatch):
    """A case long enough for its tables' b-trees to grow interior pages: each state read after a write (table
    by table from the file's last read, `_TableRead`) equals the files read from scratch, FAISS part and keys
    too; and after the first writes a read looks up a few leaves, not every leaf of the store."""
    case = Case.model_validate({"id": "long", "lang": "en", "user_id": "ana", "turns": [
        [{"role": "user", "name": "Ana", "content": f"I visited city {i} in year {1000 + i}."}] for i in range(60)]})
    memos: list[RowMemo] = []
    looked_up: list[int] = []

    def checked(store_dir: Path, memo: RowMemo | None = None) -> StoreState:
        before = (memo.reads["leaves_read"] + memo.reads["leaves_reused"]) if memo is not None else 0
        state = read_state(store_dir, memo)
        assert as_read_from_scratch(state, store_dir), store_dir
        if memo is not None:
            looked_up.append(memo.reads["leaves_read"] + memo.reads["leaves_reused"] - before)
            if all(m is not memo for m in memos):
                memos.append(memo)
        return state

    monkeypatch.setattr(hymem_system, "read_state", checked)
    run = CaseReplayer(case, "view", "offline", UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                       FaultPlan.parse("none"), seed=0).run()
    assert run.status == "ok", run.error
    assert len(run.memories) == 60
    (memo,) = memos
    late = [n for n in looked_up[len(looked_up) // 2:] if n]  # the reads that read rows, in the case's second half
    assert late and sorted(late)[len(late) // 2] < 12  # a few leaves per read: a store of 60 memories has ~30


def test_a_settled_main_file_is_trusted_by_its_stat_until_it_changes(store):
    """A main database file unchanged for `SETTLED_NS` before a read is not read again while its stat is the
    same; a checkpoint, or bytes written into it behind SQLite's back (the same size), are read."""
    path, conn = store
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    memo = RowMemo()
    db = path / DB_FILE
    read_state(path, memo)  # changed just now: not settled
    assert memo.pages.settled(str(db), os.stat(db)) is None
    time.sleep(SETTLED_NS / 1e9 + 0.05)
    read_state(path, memo)
    assert memo.pages.settled(str(db), os.stat(db)) is not None
    conn.execute("UPDATE notes SET text = 'note 7777' WHERE id = 7")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the main file written at once
    state = read_state(path, memo)
    assert as_read_from_scratch(state, path) and state.tables["notes"][6]["text"] == "note 7777"
    conn.close()
    time.sleep(SETTLED_NS / 1e9 + 0.05)
    read_state(path, memo)
    assert memo.pages.settled(str(db), os.stat(db)) is not None
    data = db.read_bytes()
    at = data.rindex(b"note 0012")
    with open(db, "r+b") as f:  # the same size and mtime untouched by SQLite: only the file's own stat says
        f.seek(at)
        f.write(b"note 0099")
    state = read_state(path, memo)
    assert as_read_from_scratch(state, path) and state.tables["notes"][12]["text"] == "note 0099"


def test_a_main_file_with_whole_second_times_waits_out_its_file_systems_granularity(tmp_path):
    """A file system that keeps times to the second (FAT: 2 s) stamps a change made a second after a read with the
    time the read saw: its stat vouches for its bytes only after `COARSE_SETTLED_NS`, not `SETTLED_NS`."""
    db = tmp_path / "main.db"
    db.write_bytes(b"\0" * 4096)
    real = os.stat(db)
    second = 1_000_000_000

    def stat(changed_ns: int) -> os.stat_result:  # `real`, with both times set to `changed_ns`
        fields = list(real)
        fields[8] = fields[9] = changed_ns // second
        return os.stat_result(fields, {"st_mtime_ns": changed_ns, "st_ctime_ns": changed_ns})

    for changed, settled_after in ((100 * second + 1_234_567, SETTLED_NS), (100 * second, COARSE_SETTLED_NS)):
        for started, trusted in ((changed + SETTLED_NS + 1, settled_after == SETTLED_NS),
                                 (changed + COARSE_SETTLED_NS + 1, True)):
            pages = PageDigests()
            pages.of_pages(str(db), db.read_bytes(), 0, 4096, 0, 1)
            pages.read_whole(str(db), stat(changed), started, 4096)
            assert (pages.settled(str(db), stat(changed)) is not None) == trusted, (changed, started)


def deep_store(path: Path, rows: int = 3000) -> sqlite3.Connection:
    """A table whose b-tree is three levels deep: small pages (512 bytes) and a few thousand rows."""
    path.mkdir(exist_ok=True)
    conn = sqlite3.connect(path / DB_FILE, isolation_level=None)
    conn.execute("PRAGMA page_size=512")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=OFF")  # no fsync per autocommitted row: the same file bytes, ~15x faster
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, text TEXT, blob BLOB)")
    conn.executemany("INSERT INTO t (id, text, blob) VALUES (?, ?, ?)",
                     [(10 * i, f"row {i}", bytes([i % 256]) * (i % 90)) for i in range(rows)])
    return conn


DEEP_WRITES = st.lists(st.tuples(st.sampled_from(["append", "insert", "update", "grow", "delete", "checkpoint"]),
                                 st.integers(0, 3100), st.integers(1, 400)), min_size=1, max_size=10)


@twin(default=3, heavy=20)  # each history: a 3,000-row store read after every write, about 1 s
def test_a_deep_b_tree_read_again_after_any_writes_reads_as_a_read_from_scratch(tmp_path_factory, draws):
    check_drawn(draws, lambda ops: read_deep_after_writes(tmp_path_factory, ops), ops=DEEP_WRITES)


def read_deep_after_writes(tmp_path_factory: Any, ops: list[tuple[str, int, int]]) -> None:
    """Writes that split and merge pages anywhere in a three-level b-tree (appends at its end, inserts between
    rows, rows grown onto overflow pages, ranges deleted): each read after one, re-walking only the subtrees
    whose interior pages changed, equals a read from scratch."""
    path = tmp_path_factory.mktemp("deep")
    conn = deep_store(path)
    memo = RowMemo()
    assert as_read_from_scratch(read_state(path, memo), path)
    for op, at, n in ops:
        if op == "append":
            conn.executemany("INSERT INTO t (text, blob) VALUES (?, ?)", [(f"new {i}", b"\x07" * (i % 70))
                                                                           for i in range(n)])
        elif op == "insert":  # between existing rows (their ids are multiples of 10)
            conn.executemany("INSERT OR IGNORE INTO t (id, text) VALUES (?, ?)",
                             [(10 * at + 1 + i % 9, f"between {i}") for i in range(min(n, 9))])
        elif op == "update":
            conn.execute("UPDATE t SET text = ? WHERE id BETWEEN ? AND ?", (f"changed {n}", 10 * at, 10 * at + 10 * n))
        elif op == "grow":  # a row onto overflow pages
            conn.execute("UPDATE t SET blob = ? WHERE id = ?", (bytes([n % 256]) * (600 + 5 * n), 10 * at))
        elif op == "delete":
            conn.execute("DELETE FROM t WHERE id BETWEEN ? AND ?", (10 * at, 10 * at + 10 * n))
        else:
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
        assert as_read_from_scratch(read_state(path, memo), path)
    conn.close()


def test_a_read_after_an_append_to_a_deep_b_tree_parses_a_few_pages(tmp_path, monkeypatch):
    """An append that changes interior pages re-walks the subtrees under them only: the pages parsed for the
    read are a few of the table's, and the read equals one from scratch."""
    import evals.core.store_state as store_state

    conn = deep_store(tmp_path / "s")
    memo = RowMemo()
    read_state(tmp_path / "s", memo)
    parsed: list[int] = []
    real = store_state.btree_page

    def counted(view, pgno, cache=None):
        parsed.append(pgno)
        return real(view, pgno, cache)

    monkeypatch.setattr(store_state, "btree_page", counted)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    walked = []
    for i in range(40):  # enough appends to split the last leaf and the interior page above it several times
        conn.execute("INSERT INTO t (text, blob) VALUES (?, ?)", (f"appended {i}", b"\x05" * 60))
        before = len(parsed)
        state = read_state(tmp_path / "s", memo)
        walked.append(len(parsed) - before)
        assert as_read_from_scratch(state, tmp_path / "s")
    assert max(walked) < pages // 4, (walked, pages)  # a walk of the whole b-tree parses every page
    assert sum(walked)  # the interior pages changed and were walked again
    conn.close()


def test_keys_a_read_never_compared_are_made_whole_when_a_later_read_is(store):
    """A read's canonical and diff keys are made when first compared: two reads of the same database compare
    equal without making them (the same lists), and a read after several never compared makes its keys
    whole, equal to a read from scratch; one after it updates them from its."""
    path, conn = store
    memo = RowMemo()
    first, again = read_state(path, memo), read_state(path, memo)
    assert canonical(first) == canonical(again) and not first.canonical_form["notes"].made
    for i in range(5):
        conn.execute("UPDATE notes SET text = ? WHERE id = ?", (f"changed {i}", 3 + 7 * i))
        conn.execute("INSERT INTO notes (text, blob) VALUES (?, ?)", (f"added {i}", b"\x03" * 700))
        state = read_state(path, memo)
        assert not state.canonical_form["notes"].made
    assert as_read_from_scratch(state, path)
    conn.execute("DELETE FROM notes WHERE id = 5")
    later = read_state(path, memo)
    assert canonical(later) != canonical(state) and as_read_from_scratch(later, path)
    assert _keys(state)["notes"] - _keys(later)["notes"] == {_row_key(r) for r in state.tables["notes"] if r["id"] == 5}
    conn.close()


def _children_byte_by_byte(page: bytes, pgno: int) -> tuple[int, tuple[int, ...]]:
    """An interior table page's kind and children read one slice at a time (the reference)."""
    at = 100 if pgno == 1 else 0
    kind, cells = page[at], int.from_bytes(page[at + 3:at + 5], "big")
    if kind != 0x05:
        return kind, ()
    pointers = page[at + 12:at + 12 + 2 * cells]
    children = [int.from_bytes(page[o:o + 4], "big")
                for o in (int.from_bytes(pointers[2 * i:2 * i + 2], "big") for i in range(cells))]
    return kind, (*children, int.from_bytes(page[at + 8:at + 12], "big"))


def test_interior_pages_with_hundreds_of_children_read_as_byte_by_byte(tmp_path):
    """The children of every interior page of a real table whose interior pages hold hundreds of cells (4 KB
    pages, as a long case's store has) are read at C speed as a byte-by-byte reading reads them, and the walk
    finds every leaf of the table."""
    path = tmp_path / "s"
    path.mkdir()
    conn = sqlite3.connect(path / DB_FILE, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, blob BLOB)")
    conn.executemany("INSERT INTO t (id, blob) VALUES (?, ?)", [(i, b"\x07" * 900) for i in range(4000)])
    view = read_view(path / DB_FILE)
    assert view is not None
    root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    widest = 0
    for pgno in range(1, view.count + 1):
        kind, children = btree_page(view, pgno)
        assert (kind, children) == _children_byte_by_byte(bytes(view.page(pgno)), pgno)
        if kind == INTERIOR_TABLE:
            widest = max(widest, len(children))
    assert widest > 300  # the pages the C-speed reading is for
    leaves = table_leaves(view, root)
    assert leaves is not None and all(btree_page(view, p)[0] == LEAF_TABLE for p in leaves)
    assert len(leaves) == conn.execute("SELECT count(*) FROM t").fetchone()[0] // 4  # four 900-byte rows a leaf
    conn.close()


@settings(max_examples=200, deadline=None)
@given(page=st.binary(min_size=512, max_size=512), extra=st.integers(-3, 3), first=st.booleans(),
       pointers=st.lists(st.one_of(st.integers(0, 507), st.integers(505, 512)), max_size=200))
def test_any_interior_page_bytes_read_as_byte_by_byte(page, extra, first, pointers):
    """Whatever an interior page holds (pointers past its end, cells cut short, more cells than fit), its
    children are the byte-by-byte reading's."""
    at = 100 if first else 0
    cells = max(0, len(pointers) + extra)  # a few cells more or fewer than the pointers written
    raw = bytearray(page)
    raw[at] = 0x05
    raw[at + 3:at + 5] = cells.to_bytes(2, "big")
    for i, pointer in enumerate(pointers[:(len(raw) - at - 12) // 2]):
        raw[at + 12 + 2 * i:at + 14 + 2 * i] = pointer.to_bytes(2, "big")
    pgno = 1 if first else 2
    assert _btree_page(memoryview(bytes(raw)), pgno) == _children_byte_by_byte(bytes(raw), pgno)


def test_a_view_has_the_digests_of_a_view_from_scratch_through_writes_checkpoints_and_a_settled_file(store):
    """A view's page digests and digest, taken from the last view of the same files when those did not change
    (`PageDigests.view_digests`), are those of a view read with nothing kept; and any page changed changes it."""
    path, conn = store
    db = path / DB_FILE
    pages = PageDigests()

    def read() -> bytes:
        view, fresh = read_view(db, pages), read_view(db)
        assert view is not None and fresh is not None
        assert (view.digests, view.digest) == (fresh.digests, fresh.digest)
        again = read_view(db, pages)  # nothing changed: taken from the last view
        assert again is not None and (again.digests, again.digest) == (fresh.digests, fresh.digest)
        return view.digest

    seen = [read()]
    for i in range(6):
        conn.execute("INSERT INTO notes (text, blob) VALUES (?, ?)", (f"more {i}", bytes([i]) * 900))
        seen.append(read())
        conn.execute("UPDATE notes SET text = ? WHERE id = ?", (f"note {9000 + i}", 5 + i))
        seen.append(read())
        if i == 2:
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
            read()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    time.sleep(SETTLED_NS / 1e9 + 0.05)
    read()
    read()  # the main file trusted by its stat now: its digests list is the last read's
    assert pages.settled(str(db), os.stat(db)) is not None
    conn.execute("UPDATE notes SET text = 'after settled' WHERE id = 1")
    seen.append(read())
    assert len(set(seen)) == len(seen)  # every write changed the digest
    conn.close()
