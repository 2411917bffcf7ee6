"""The Store: lifecycle and directory lock, the commit protocol, reads, and the consistency check.

A write is one SQLite transaction; the FAISS changes it recorded are applied only after COMMIT, and if
that fails the write still happened and the index is rebuilt from SQLite. Hence `store.write()` raises
if and only if nothing was committed.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
from pathlib import Path

import numpy as np

from hymem.failpoints import failpoint
from hymem.models import Memory
from hymem.store._ann import Centre, centre_key, wants_centre
from hymem.store._index import INDEX_FILE, apply_changes, build_index, load_index, persist_index, read_centres
from hymem.store._schema import DB_FILE, KINDS, LIVE, MEMORY_COLUMNS, migrate
from hymem.store._tx import WriteTx
from hymem.store._vectors import add_to_checksum, checksum_of, query_vector

_log = logging.getLogger("hymem.store")  # one name for the whole package: harnesses silence it by that name

LOCK_FILE = "hymem.lock"
PERSIST_SHARE = 10  # commits between two writes of the index file: at least `persist_every` and ntotal / 10


class DimensionMismatchError(ValueError):
    """The store on disk was created for another embedding dimension."""


class StoreLockedError(RuntimeError):
    """Another Store (this process or another) has the directory open."""


class StoreForkedError(RuntimeError):
    """The Store was opened in another process: a forked child must open its own (and close none of the parent's)."""


def _memory(row: tuple, score: float | None = None) -> Memory:
    mid, user_id, text, subject, owner, kind, request_id, created_at, updated_at = row
    return Memory(id=mid, user_id=user_id, text=text, subject=subject, owner=owner, kind=kind, score=score,
                  request_id=request_id, created_at=created_at, updated_at=updated_at)


class Store:
    """Memories, L1 history, episodes, profiles, traces and idempotency records of all users."""

    def __init__(self, path: str | os.PathLike, dim: int, *, persist_every: int = 100, synchronous: str = "NORMAL"):
        """`synchronous`: SQLite's, in WAL mode; which failures a commit that returned survives.

        NORMAL (default): a crash of the application (an exception, kill -9, the OOM killer). COMMIT appends the
        transaction to the WAL file through the OS, which keeps it whatever happens to the process; the WAL is
        fsynced only at checkpoints. A power loss or OS crash can lose the last commits (never part of one: the
        store stays consistent and each write all-or-nothing). The FAISS index file is then persisted without
        fsync too: after a power loss it is checked and rebuilt.
        FULL: power loss and OS crashes as well, at one fsync (fdatasync of the WAL) per commit. The writer then
        sleeps on the disk, and on a busy machine waits for the scheduler to run it again: issue 35 measured
        writes of exactly one and two 4 ms scheduler ticks. Ask for it when the last writes must survive power loss."""
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.dim = dim
        self.path = Path(path)
        self.persist_every = max(1, persist_every)
        self._durable_index = synchronous == "FULL"  # fsync the index file as SQLite fsyncs its commits
        self.index_rebuild_reason: str | None = None  # why the index was rebuilt on open; None when loaded
        self._pid = os.getpid()  # the process that owns the connection, the index and the directory lock
        self._lock = threading.RLock()
        self._in_tx = False
        self._closed = True
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd: int | None = self._acquire_dir_lock()
        try:
            self._conn = sqlite3.connect(self.path / DB_FILE, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute(f"PRAGMA synchronous={synchronous}")
            self._conn.execute("PRAGMA foreign_keys=ON")
            migrate(self._conn)
            self._generation = self._init_meta()
            self._needs_rebuild = False
            self._commits_since_persist = 0
            self._open_index()
        except BaseException:
            if hasattr(self, "_conn"):
                self._conn.close()
            self._release_dir_lock()
            raise
        self._closed = False

    # lifecycle

    def _acquire_dir_lock(self) -> int:
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(f"store {self.path} is already open (by this or another process)") from None
        return fd

    def _release_dir_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _init_meta(self) -> int:
        """The store's generation, after checking its dim; a new (or older) store gets its meta rows first.

        An existing store is only read: the write transaction runs when a row is missing."""
        conn = self._conn
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        if {"generation", "dim", "vectors_checksum"} <= meta.keys():
            return self._checked_generation(meta)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', '0')")
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('dim', ?)", (str(self.dim),))
            if conn.execute("SELECT 1 FROM meta WHERE key = 'vectors_checksum'").fetchone() is None:  # new or older store
                checksum = checksum_of(conn.execute(f"SELECT id, vector FROM memories WHERE {LIVE}"))
                conn.execute("INSERT INTO meta (key, value) VALUES ('vectors_checksum', ?)", (checksum,))
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return self._checked_generation(meta)

    def _checked_generation(self, meta: dict[str, str]) -> int:
        if int(meta["dim"]) != self.dim:
            raise DimensionMismatchError(
                f"store {self.path} holds {meta['dim']}-dimensional vectors; opened with dim={self.dim}")
        return int(meta["generation"])

    def close(self) -> None:
        """Persist the FAISS index if it changed, then close. Safe to call twice.

        In a forked child this only marks the child's copy closed: the SQLite connection, the index and the
        directory lock (an flock shared with the parent across fork) stay the parent's, untouched.
        """
        if os.getpid() != self._pid:
            self._closed = True
            return
        with self._lock:
            if self._closed:
                return
            if self._in_tx:
                raise RuntimeError("close() inside an open write transaction")
            try:
                self._persist_if_changed()
            finally:
                self._closed = True
                self._conn.close()
                self._release_dir_lock()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_process(self) -> None:
        """Refuse use from a forked child before touching the lock, the connection or the index."""
        if os.getpid() != self._pid:
            raise StoreForkedError(
                f"store {self.path} was opened by process {self._pid} and cannot be used in process {os.getpid()}"
                " (a fork): open the store (or HyMemoryClient) again in the child, after the parent closed it")

    def _check_open(self) -> None:
        self._check_process()
        if self._closed:
            raise RuntimeError(f"store {self.path} is closed")

    # the FAISS index: which one is current, and when it is rebuilt or persisted

    def _open_index(self) -> None:
        """Load the persisted index if it matches SQLite; else rebuild it from SQLite and persist it."""
        index, reason = load_index(self.path, self._conn, self.dim, self._generation)
        if index is not None:
            self._index, self._persisted_generation = index, self._generation
            return
        if self._generation > 0 or (self.path / INDEX_FILE).exists():  # not merely a new store
            _log.warning("rebuilding FAISS index of %s from SQLite: %s", self.path, reason)
            self.index_rebuild_reason = reason
        self._index, self._persisted_generation = build_index(self._conn, self.dim), -1
        self._persist_if_changed()

    def _rebuild_after_failure(self) -> None:
        try:
            self._index = build_index(self._conn, self.dim)
            self._needs_rebuild = False
        except Exception:
            _log.exception("rebuilding the FAISS index failed; will retry on next use")
            self._needs_rebuild = True

    def _ensure_index(self) -> None:
        if self._needs_rebuild:
            self._index = build_index(self._conn, self.dim)  # raises to the reader if it still fails
            self._needs_rebuild = False

    def _persist_if_changed(self) -> None:
        """Persist the index unless it awaits a rebuild or is already on disk; a failure only logs."""
        if self._needs_rebuild or self._persisted_generation == self._generation:
            return
        try:
            persist_index(self.path, self._index, self._generation, self.dim, durable=self._durable_index)
        except Exception:
            _log.exception("persisting the FAISS index failed; it will be rebuilt from SQLite on open")
            return
        self._persisted_generation = self._generation
        self._commits_since_persist = 0

    # writes

    def write(self) -> WriteTx:
        """A write transaction: `with store.write() as tx: ...` commits on normal exit, rolls back on error."""
        return WriteTx(self)

    def _begin(self) -> None:
        self._check_process()  # before the lock: a child forked while a thread held it would wait forever
        self._lock.acquire()
        try:
            self._check_open()
            if self._in_tx:
                raise RuntimeError("nested write transactions are not supported")
            self._conn.execute("BEGIN IMMEDIATE")
            self._in_tx = True
        except BaseException:
            self._lock.release()
            raise

    def _rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        finally:
            self._in_tx = False
            self._lock.release()

    def _commit(self, changes: dict[int, tuple[str, str, np.ndarray] | None], checksum_delta: int) -> None:
        try:
            # a group this write makes large gets its sketch centre in the same transaction (`_ann`)
            centres = {} if self._needs_rebuild else self._due_centres(changes)
            for key, centre in centres.items():
                self._conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                                   " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                                   (centre_key(*key), centre.to_meta()))
            if centres:
                failpoint("store.sketch_centre")
            # the generation is counted in the transaction itself: no process can reuse a number
            if checksum_delta:  # and the live vectors' checksum moved by the same statement
                (checksum,) = self._conn.execute("SELECT value FROM meta WHERE key = 'vectors_checksum'").fetchone()
                rows = dict(self._conn.execute(
                    "UPDATE meta SET value = CASE key WHEN 'generation' THEN CAST(value AS INTEGER) + 1 ELSE ? END"
                    " WHERE key IN ('generation', 'vectors_checksum') RETURNING key, value",
                    (add_to_checksum(checksum, checksum_delta),)).fetchall())
                generation = int(rows["generation"])
            else:
                generation = int(self._conn.execute(
                    "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'generation' RETURNING value"
                ).fetchone()[0])
            failpoint("store.before_commit")
            self._conn.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        try:
            self._generation = generation
            self._in_tx = False
            pending, self._needs_rebuild = self._needs_rebuild, True  # until the index matches this commit
            try:  # committed: from here on nothing may fail the write
                failpoint("store.after_commit")
                if pending:
                    raise RuntimeError("index awaits a rebuild")
                apply_changes(self._index, changes)
                for key, centre in centres.items():
                    self._index.set_centre(key, centre)
                failpoint("store.after_faiss")
                self._needs_rebuild = False
            except Exception:
                _log.exception("FAISS update after commit failed; rebuilding the index from SQLite")
                self._rebuild_after_failure()
            self._commits_since_persist += 1
            # Persisting writes the whole index (O(rows)): spaced by at least 10% of its size in commits, it costs
            # about one row's bytes per commit. Spaced by 1%, it was 0.13-0.3 ms of CPU per commit at 10,000 and
            # 100,000 rows, 5-15% of a write (BENCHMARKS.md, issue 35). A file is valid only if no commit came after
            # it, so persisting more often would barely change how often an open after a crash has to rebuild.
            if self._commits_since_persist >= max(self.persist_every, self._index.ntotal // PERSIST_SHARE):
                self._persist_if_changed()
        finally:
            self._lock.release()

    def _due_centres(self, changes: dict[int, tuple[str, str, np.ndarray] | None]) -> dict[tuple[str, str], Centre]:
        """The sketch centres this write computes: for each group it adds to that it leaves at `ANN_MIN_ROWS` rows
        or more, with no centre yet or one computed over a quarter of its rows or fewer; each the mean of the
        group's live vectors as they will be after COMMIT."""
        leaving: dict[tuple[str, str], set[int]] = {}
        arriving: dict[tuple[str, str], list[np.ndarray]] = {}
        for memory_id, live in changes.items():
            placed = self._index.placement(memory_id)
            if placed is not None:
                leaving.setdefault(placed, set()).add(memory_id)
            if live is not None:
                arriving.setdefault((live[0], live[1]), []).append(live[2])
        due = {}
        for key, added in arriving.items():
            gone = leaving.get(key, set())
            rows_after = self._index.group_size(key) - len(gone) + len(added)
            current = self._index.centre(key)
            if not wants_centre(rows_after, None if current is None else current.rows, self.dim):
                continue
            ids, vectors = self._index.group_members(key)
            total = vectors.sum(axis=0, dtype=np.float64) + np.sum(added, axis=0, dtype=np.float64)
            if gone:
                total -= vectors[np.isin(ids, np.fromiter(gone, dtype=np.int64, count=len(gone)))].sum(
                    axis=0, dtype=np.float64)
            due[key] = Centre((total / rows_after).astype(np.float32), rows_after)
        return due

    # reads

    def live_memories(self, user_id: str, kind: str | None = None) -> list[Memory]:
        """The user's live (neither superseded nor deleted) memories, oldest first."""
        sql, args = self._live_query(user_id, kind, MEMORY_COLUMNS)
        return [_memory(row) for row in self._read(sql + " ORDER BY id", args)]

    def get_memory(self, memory_id: int) -> Memory | None:
        """Any memory by id, live or not; None only when no such row exists."""
        rows = self._read(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,))
        return _memory(rows[0]) if rows else None

    def search(self, user_id: str, vector: np.ndarray, k: int = 5, kind: str | None = None) -> list[Memory]:
        """The user's k live memories most similar (inner product) to vector, best first, with score set.

        Only the user's own vectors are scored (the index keeps them apart), and only the k hits are read
        from SQLite: the cost does not grow with other users' memories or with rows already written.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        self._check_process()
        query = query_vector(vector, self.dim)
        with self._lock:
            self._check_open()
            self._ensure_index()
            hits = self._index.search(user_id, query, k, KINDS if kind is None else (kind,))
            if not hits:
                return []
            marks = ",".join("?" * len(hits))
            rows = {row[0]: row for row in self._conn.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", [i for i, _ in hits])}
        return [_memory(rows[i], score=s) for i, s in hits if i in rows]

    def l1_raw(self, user_id: str) -> list[str]:
        """The user's rendered L1 history entries, oldest first."""
        return [r[0] for r in self._read("SELECT content FROM l1_raw WHERE user_id = ? ORDER BY id", (user_id,))]

    def profile(self, user_id: str) -> dict:
        """The user's L0 basic_info ({} when none)."""
        rows = self._read("SELECT basic_info FROM profiles WHERE user_id = ?", (user_id,))
        return json.loads(rows[0][0]) if rows else {}

    def episode(self, user_id: str) -> int:
        """The user's episode counter (0 when none)."""
        rows = self._read("SELECT counter FROM episodes WHERE user_id = ?", (user_id,))
        return int(rows[0][0]) if rows else 0

    def request_result(self, user_id: str, request_id: str) -> dict | None:
        """The WriteResult JSON recorded for this user's successful write with this request_id, if any."""
        recorded = self.recorded_request(user_id, request_id)
        return recorded[1] if recorded else None

    def recorded_request(self, user_id: str, request_id: str) -> tuple[str | None, dict] | None:
        """(payload fingerprint, WriteResult JSON) of this user's successful write with this request_id, if any.

        The fingerprint is None for a request recorded before fingerprints were kept.
        """
        rows = self._read("SELECT fingerprint, result FROM requests WHERE user_id = ? AND request_id = ?",
                          (user_id, request_id))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    def traces(self, user_id: str) -> list[dict]:
        """The user's write traces, oldest first: {id, request_id, path, payload, created_at}."""
        rows = self._read("SELECT id, request_id, path, payload, created_at FROM traces WHERE user_id = ? ORDER BY id",
                          (user_id,))
        return [{"id": i, "request_id": r, "path": p, "payload": json.loads(pl), "created_at": t}
                for i, r, p, pl, t in rows]

    def chain_rounds(self, user_id: str, request_id: str | None = None) -> list[dict]:
        """The user's recorded LM rounds (optionally of one request), oldest first."""
        sql = "SELECT id, request_id, round, stage, payload, created_at FROM chain_rounds WHERE user_id = ?"
        args: tuple = (user_id,)
        if request_id is not None:
            sql, args = sql + " AND request_id = ?", (user_id, request_id)
        return [{"id": i, "request_id": r, "round": n, "stage": st, "payload": json.loads(pl), "created_at": t}
                for i, r, n, st, pl, t in self._read(sql + " ORDER BY id", args)]

    def _read(self, sql: str, args: tuple) -> list[tuple]:
        self._check_process()
        with self._lock:
            self._check_open()
            return self._conn.execute(sql, args).fetchall()

    @staticmethod
    def _live_query(user_id: str, kind: str | None, columns: str) -> tuple[str, tuple]:
        sql = f"SELECT {columns} FROM memories WHERE user_id = ? AND {LIVE}"
        if kind is None:
            return sql, (user_id,)
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return sql + " AND kind = ?", (user_id, kind)

    # checking

    def check_consistency(self) -> list[str]:
        """Problems between SQLite and the in-memory FAISS index (empty when consistent).

        Every live memory must have exactly one indexed vector, equal to its BLOB and filed under its
        user and kind, and no indexed id may lack a live row.
        """
        problems: list[str] = []
        self._check_process()
        with self._lock:
            self._check_open()
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                problems.append(f"SQLite quick_check: {check}")
            if self._needs_rebuild:
                return [*problems, "FAISS index awaits a rebuild after a failed update"]
            index = self._index
            if index.d != self.dim:
                problems.append(f"index dim {index.d} != store dim {self.dim}")
                return problems
            live: set[int] = set()
            for mid, user_id, kind, blob in self._conn.execute(f"SELECT id, user_id, kind, vector FROM memories WHERE {LIVE}"):
                live.add(mid)
                indexed = index.vector(mid)
                if len(blob) != 4 * self.dim:
                    problems.append(f"memory {mid}: vector BLOB has {len(blob)} bytes, expected {4 * self.dim}")
                elif indexed is None:
                    problems.append(f"live memory {mid} has no vector in the index")
                elif index.placement(mid) != (user_id, kind):
                    problems.append(f"live memory {mid} is indexed under {index.placement(mid)}, not {(user_id, kind)}")
                elif not np.array_equal(indexed, np.frombuffer(blob, dtype=np.float32)):
                    problems.append(f"live memory {mid}: indexed vector differs from its SQLite BLOB")
            problems += [f"index id {mid} has no live row" for mid in sorted(set(index.ids()) - live)]
            if index.centres() != read_centres(self._conn, self.dim):
                problems.append("the index's sketch centres differ from those SQLite records")
            problems += index.sketch_problems()
        return problems
