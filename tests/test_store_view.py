"""The checker reuses a state read only when the database is the same bytes a reader would see: reads with
the reuse equal reads of the files from scratch, on real SQLite files in WAL mode and through a sweep."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import evals.systems.hymem_system as hymem_system
from evals.checker import RowMemo, StoreState, read_state
from evals.dataset import Case
from evals.faults import FaultPlan
from evals.replay import CaseReplayer
from evals.store_view import view_digest
from hymem import HashEmbedder
from hymem.offline import offline_lm
from hymem.store import DB_FILE


def same(a: StoreState, b: StoreState) -> bool:
    return (a.tables, a.row_keys, a.canonical_form, a.faiss, a.faiss_stale) == \
        (b.tables, b.row_keys, b.canonical_form, b.faiss, b.faiss_stale)


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

    def check() -> StoreState:
        state = read_state(path, memo)
        assert same(state, read_state(path, RowMemo()))
        return state

    first = check()
    assert memo.reads == {"rows": 1, "reused": 0}
    conn.execute("BEGIN")
    conn.execute("INSERT INTO notes (text) VALUES ('rolled back')")
    conn.execute("DELETE FROM notes WHERE id = 3")
    conn.execute("ROLLBACK")
    check()
    assert memo.reads == {"rows": 1, "reused": 1}  # a rolled-back write left every page as it was
    conn.execute("UPDATE notes SET text = 'note 9999' WHERE id = 7")  # same length, in place, one byte apart
    changed = check()
    assert memo.reads == {"rows": 2, "reused": 1}
    assert changed.tables["notes"] != first.tables["notes"]
    conn.execute("UPDATE notes SET blob = ? WHERE id = 30", (b"\xff" * 900,))
    conn.execute("INSERT INTO notes (text) VALUES ('new')")
    last = check()
    assert memo.reads["rows"] == 3
    conn.close()  # the last connection checkpoints the WAL into the main file and deletes it
    assert not (path / f"{DB_FILE}-wal").exists()
    closed = check()
    assert memo.reads == {"rows": 3, "reused": 2}  # the same pages, now in the main file
    assert same(closed, last)


def test_a_wal_restarted_after_a_checkpoint_is_read_right(store):
    path, conn = store
    memo = RowMemo()
    read_state(path, memo)
    conn.execute("UPDATE notes SET text = 'first' WHERE id = 1")
    conn.execute("PRAGMA wal_checkpoint(RESTART)")  # every frame copied into the main file
    conn.execute("UPDATE notes SET text = 'again' WHERE id = 2")  # the WAL starts over with new salts
    assert same(read_state(path, memo), read_state(path, RowMemo()))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert same(read_state(path, memo), read_state(path, RowMemo()))
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
        assert same(state, read_state(store_dir, RowMemo())), store_dir
        reads["n"] += 1
        if memo is not None and all(m is not memo for m in memos):
            memos.append(memo)
        return state

    monkeypatch.setattr(hymem_system, "read_state", checked)
    run = CaseReplayer(case, "view", "offline", lambda c: offline_lm(), HashEmbedder(), FaultPlan.parse("sweep"),
                       seed=0).run()
    assert run.status == "ok", run.error
    assert run.faults and all(f.outcome != "infra_error" for f in run.faults)
    (memo,) = memos
    assert memo.reads["rows"] + memo.reads["reused"] == reads["n"]
    assert memo.reads["reused"] > 2 * memo.reads["rows"]
