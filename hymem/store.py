"""The store: SQLite is the source of truth, FAISS an index derived from it.

Every memory's vector lives in SQLite as a float32 BLOB, so the FAISS index can
always be rebuilt from SQLite alone. A write is one SQLite transaction; the
FAISS changes it recorded are applied only after COMMIT. If that FAISS update
fails, the write still happened and the index is rebuilt from SQLite. Hence the
one rule callers rely on: `store.write()` raises if and only if nothing was committed.

The FAISS file is persisted lazily (on close and every `persist_every` commits),
together with a sidecar holding the SQLite `generation` it reflects (bumped in
every write transaction) and a checksum. On open a missing, stale, corrupt or
mismatching file is rebuilt from SQLite, so a `kill -9` at any point of a write
leaves a consistent store in which the write happened entirely or not at all.

Concurrency: one SQLite connection and one FAISS index behind one re-entrant
lock; a write holds it from BEGIN to the FAISS update, so transactions never
interleave and readers in other threads only ever see committed state. A reader
in the thread that holds an open write sees that write's uncommitted rows.
A lock file keeps a second Store (in any process) off the same directory.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from hymem.failpoints import failpoint
from hymem.models import Memory

__all__ = ["DB_FILE", "INDEX_FILE", "MIGRATIONS", "SIDECAR_FILE", "DimensionMismatchError", "Store",
           "StoreLockedError", "WriteTx"]

_log = logging.getLogger(__name__)

DB_FILE = "hymem.sqlite3"
INDEX_FILE = "hymem.faiss"
SIDECAR_FILE = "hymem.faiss.json"  # generation, dim, size and crc32 of INDEX_FILE
LOCK_FILE = "hymem.lock"

_KINDS = ("fact", "experience")
_OWNERS = ("user", "agent")
_LIVE = "superseded_by IS NULL AND deleted_at IS NULL"
_MEMORY_COLUMNS = "id, user_id, text, subject, owner, kind, request_id, created_at, updated_at"


class DimensionMismatchError(ValueError):
    """The store on disk was created for another embedding dimension."""


class StoreLockedError(RuntimeError):
    """Another Store (this process or another) has the directory open."""


# --- migrations: append-only, applied in order, each recorded by name -------------------------------------

def m001_initial(conn: sqlite3.Connection) -> None:
    """All tables of the first version."""
    for sql in (
        """CREATE TABLE memories (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            text TEXT NOT NULL,
            subject TEXT NOT NULL,
            owner TEXT NOT NULL CHECK (owner IN ('user', 'agent')),
            kind TEXT NOT NULL CHECK (kind IN ('fact', 'experience')),
            vector BLOB NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            request_id TEXT,
            superseded_by INTEGER NULL REFERENCES memories(id),
            deleted_at REAL NULL)""",
        "CREATE INDEX memories_user ON memories(user_id)",
        """CREATE TABLE l1_raw (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            content TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX l1_raw_user ON l1_raw(user_id)",
        "CREATE TABLE episodes (user_id TEXT PRIMARY KEY, counter INTEGER NOT NULL)",
        "CREATE TABLE profiles (user_id TEXT PRIMARY KEY, basic_info TEXT NOT NULL, updated_at REAL NOT NULL)",
        """CREATE TABLE traces (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            path TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX traces_user ON traces(user_id)",
        """CREATE TABLE chain_rounds (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            user_id TEXT NOT NULL,
            request_id TEXT,
            round INTEGER NOT NULL,
            stage TEXT NOT NULL,
            payload TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE INDEX chain_rounds_user ON chain_rounds(user_id)",
        """CREATE TABLE requests (
            request_id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            result TEXT NOT NULL,
            created_at REAL NOT NULL)""",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ):
        conn.execute(sql)


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [m001_initial]


def _migrate(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    done = {row[0] for row in conn.execute("SELECT name FROM migrations")}
    for migration in MIGRATIONS:
        if migration.__name__ in done:
            continue
        conn.execute("BEGIN IMMEDIATE")
        try:
            migration(conn)
            conn.execute("INSERT INTO migrations (name, applied_at) VALUES (?, ?)", (migration.__name__, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


# --- vectors -----------------------------------------------------------------------------------------------

def _checked_vector(vector: Any, dim: int) -> np.ndarray:
    """A vector fit to store: 1-D float32 of length dim, all finite. Nothing is normalised."""
    if not isinstance(vector, np.ndarray) or vector.dtype != np.float32:
        raise ValueError(f"vector must be a float32 numpy array, got {type(vector).__name__}"
                         f"{'/' + str(vector.dtype) if isinstance(vector, np.ndarray) else ''}")
    if vector.shape != (dim,):
        raise ValueError(f"vector must have shape ({dim},), got {vector.shape}")
    if not np.isfinite(vector).all():
        raise ValueError("vector has non-finite values")
    return np.ascontiguousarray(vector)


def _query_vector(vector: Any, dim: int) -> np.ndarray:
    """A query may be any real 1-D array of length dim; it is searched as float32."""
    q = np.asarray(vector)
    if q.shape != (dim,) or not np.issubdtype(q.dtype, np.floating):
        raise ValueError(f"query vector must be a 1-D float array of length {dim}, got {q.dtype}{q.shape}")
    q = np.ascontiguousarray(q, dtype=np.float32)
    if not np.isfinite(q).all():
        raise ValueError("query vector has non-finite values")
    return q


def _from_blob(blob: bytes, dim: int, memory_id: int) -> np.ndarray:
    if len(blob) != 4 * dim:
        raise ValueError(f"memory {memory_id}: vector BLOB has {len(blob)} bytes, expected {4 * dim}")
    return np.frombuffer(blob, dtype=np.float32)


def _memory(row: tuple, score: float | None = None) -> Memory:
    mid, user_id, text, subject, owner, kind, request_id, created_at, updated_at = row
    return Memory(id=mid, user_id=user_id, text=text, subject=subject, owner=owner, kind=kind, score=score,
                  request_id=request_id, created_at=created_at, updated_at=updated_at)


def _atomic_write(path: Path, data: Any) -> None:
    """Write bytes-like data to path via a temp file, fsync and rename, so readers see old or new."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


# --- the store ---------------------------------------------------------------------------------------------

class Store:
    """Memories, L1 history, episodes, profiles, traces and idempotency records of all users."""

    def __init__(self, path: str | os.PathLike, dim: int, *, persist_every: int = 100):
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive int, got {dim!r}")
        self.dim = dim
        self.path = Path(path)
        self.persist_every = max(1, persist_every)
        self.index_rebuild_reason: str | None = None  # why the index was rebuilt on open; None when loaded
        self._lock = threading.RLock()
        self._in_tx = False
        self._closed = True
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._acquire_dir_lock()
        try:
            self._conn = sqlite3.connect(self.path / DB_FILE, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            _migrate(self._conn)
            self._generation = self._init_meta()
            self._needs_rebuild = False
            self._commits_since_persist = 0
            self._index, self._persisted_generation = self._open_index()
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
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('generation', '0')")
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('dim', ?)", (str(self.dim),))
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if int(meta["dim"]) != self.dim:
            raise DimensionMismatchError(
                f"store {self.path} holds {meta['dim']}-dimensional vectors; opened with dim={self.dim}")
        return int(meta["generation"])

    def close(self) -> None:
        """Persist the FAISS index if it changed, then close. Safe to call twice."""
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

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"store {self.path} is closed")

    # the FAISS index

    def _live_vectors(self) -> Iterator[tuple[int, np.ndarray]]:
        cur = self._conn.execute(f"SELECT id, vector FROM memories WHERE {_LIVE} ORDER BY id")
        while rows := cur.fetchmany(4096):
            for mid, blob in rows:
                yield mid, _from_blob(blob, self.dim, mid)

    def _build_index(self) -> faiss.IndexIDMap2:
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim))
        ids: list[int] = []
        vecs: list[np.ndarray] = []
        for mid, vec in self._live_vectors():
            ids.append(mid)
            vecs.append(vec)
            if len(ids) >= 4096:
                index.add_with_ids(np.stack(vecs), np.asarray(ids, dtype=np.int64))
                ids, vecs = [], []
        if ids:
            index.add_with_ids(np.stack(vecs), np.asarray(ids, dtype=np.int64))
        return index

    def _load_index(self) -> tuple[faiss.IndexIDMap2 | None, str | None]:
        """The persisted index if it is exactly the one SQLite implies, else (None, why not)."""
        index_path, sidecar_path = self.path / INDEX_FILE, self.path / SIDECAR_FILE
        if not index_path.exists():
            return None, "index file missing"
        try:
            sidecar = json.loads(sidecar_path.read_text())
            file_gen, file_dim, size, crc = (int(sidecar[k]) for k in ("generation", "dim", "size", "crc32"))
        except (OSError, ValueError, KeyError, TypeError) as e:
            return None, f"sidecar missing or unreadable ({type(e).__name__})"
        if file_gen != self._generation:
            return None, f"stale index (file generation {file_gen}, SQLite generation {self._generation})"
        if file_dim != self.dim:
            return None, f"index dim {file_dim} != {self.dim}"
        data = index_path.read_bytes()
        if len(data) != size or zlib.crc32(data) != crc:
            return None, "index file does not match its checksum"
        try:
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
        except RuntimeError as e:
            return None, f"index file unreadable ({e})"
        if not isinstance(index, faiss.IndexIDMap2) or index.d != self.dim:
            return None, f"index file holds a {type(index).__name__} of dim {index.d}"
        file_ids = np.sort(faiss.vector_to_array(index.id_map))
        live_ids = np.fromiter(
            (r[0] for r in self._conn.execute(f"SELECT id FROM memories WHERE {_LIVE} ORDER BY id")), dtype=np.int64)
        if not np.array_equal(file_ids, live_ids):
            return None, "index ids differ from live rows"
        return index, None

    def _open_index(self) -> tuple[faiss.IndexIDMap2, int]:
        index, reason = self._load_index()
        if index is not None:
            return index, self._generation
        if self._generation > 0 or (self.path / INDEX_FILE).exists():  # not merely a new store
            _log.warning("rebuilding FAISS index of %s from SQLite: %s", self.path, reason)
            self.index_rebuild_reason = reason
        self._index = self._build_index()
        self._persisted_generation = -1
        self._persist_if_changed()
        return self._index, self._persisted_generation

    def _rebuild_after_failure(self) -> None:
        try:
            self._index = self._build_index()
            self._needs_rebuild = False
        except Exception:
            _log.exception("rebuilding the FAISS index failed; will retry on next use")
            self._needs_rebuild = True

    def _ensure_index(self) -> None:
        if self._needs_rebuild:
            self._index = self._build_index()  # raises to the reader if it still fails
            self._needs_rebuild = False

    def _persist_if_changed(self) -> None:
        """Write the index and then its sidecar; a crash in between leaves no valid sidecar, so a rebuild."""
        if self._needs_rebuild or self._persisted_generation == self._generation:
            return
        try:
            data = faiss.serialize_index(self._index)
            (self.path / SIDECAR_FILE).unlink(missing_ok=True)
            _atomic_write(self.path / INDEX_FILE, data)
            failpoint("store.persist")
            sidecar = {"generation": self._generation, "dim": self.dim, "size": int(data.nbytes),
                       "crc32": zlib.crc32(data), "ntotal": int(self._index.ntotal)}
            _atomic_write(self.path / SIDECAR_FILE, json.dumps(sidecar).encode())
        except Exception:
            _log.exception("persisting the FAISS index failed; it will be rebuilt from SQLite on open")
            return
        self._persisted_generation = self._generation
        self._commits_since_persist = 0

    def _apply_faiss(self, changes: dict[int, np.ndarray | None]) -> None:
        """Bring the touched ids to their committed state: removed, then re-added when live."""
        if not changes:
            return
        self._index.remove_ids(np.fromiter(changes, dtype=np.int64, count=len(changes)))
        failpoint("store.faiss_update")
        added = [(mid, vec) for mid, vec in changes.items() if vec is not None]
        if added:
            self._index.add_with_ids(np.stack([v for _, v in added]), np.asarray([m for m, _ in added], np.int64))

    # writes

    def write(self) -> WriteTx:
        """A write transaction: `with store.write() as tx: ...` commits on normal exit, rolls back on error."""
        return WriteTx(self)

    def _begin(self) -> None:
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

    def _commit(self, changes: dict[int, np.ndarray | None]) -> None:
        try:
            generation = self._generation + 1
            self._conn.execute("UPDATE meta SET value = ? WHERE key = 'generation'", (str(generation),))
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
                self._apply_faiss(changes)
                failpoint("store.after_faiss")
                self._needs_rebuild = False
            except Exception:
                _log.exception("FAISS update after commit failed; rebuilding the index from SQLite")
                self._rebuild_after_failure()
            self._commits_since_persist += 1
            if self._commits_since_persist >= self.persist_every:
                self._persist_if_changed()
        finally:
            self._lock.release()

    # reads

    def live_memories(self, user_id: str, kind: str | None = None) -> list[Memory]:
        """The user's live (neither superseded nor deleted) memories, oldest first."""
        sql, args = self._live_query(user_id, kind, _MEMORY_COLUMNS)
        with self._lock:
            self._check_open()
            return [_memory(row) for row in self._conn.execute(sql + " ORDER BY id", args)]

    def get_memory(self, memory_id: int) -> Memory | None:
        """Any memory by id, live or not; None only when no such row exists."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return _memory(row) if row else None

    def search(self, user_id: str, vector: np.ndarray, k: int = 5, kind: str | None = None) -> list[Memory]:
        """The user's k live memories most similar (inner product) to vector, best first, with score set."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        query = _query_vector(vector, self.dim)
        sql, args = self._live_query(user_id, kind, "id")
        with self._lock:
            self._check_open()
            self._ensure_index()
            ids = np.fromiter((r[0] for r in self._conn.execute(sql, args)), dtype=np.int64)
            if ids.size == 0:
                return []
            selector = faiss.IDSelectorBatch(ids)
            params = faiss.SearchParameters(sel=selector)
            scores, found = self._index.search(query[None, :], min(k, ids.size), params=params)
            hits = [(int(i), float(s)) for s, i in zip(scores[0], found[0], strict=True) if i >= 0]
            if not hits:
                return []
            marks = ",".join("?" * len(hits))
            rows = {row[0]: row for row in self._conn.execute(
                f"SELECT {_MEMORY_COLUMNS} FROM memories WHERE id IN ({marks})", [i for i, _ in hits])}
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

    def request_result(self, request_id: str) -> dict | None:
        """The WriteResult JSON recorded for a successful write with this request_id, if any."""
        rows = self._read("SELECT result FROM requests WHERE request_id = ?", (request_id,))
        return json.loads(rows[0][0]) if rows else None

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
        with self._lock:
            self._check_open()
            return self._conn.execute(sql, args).fetchall()

    @staticmethod
    def _live_query(user_id: str, kind: str | None, columns: str) -> tuple[str, tuple]:
        sql = f"SELECT {columns} FROM memories WHERE user_id = ? AND {_LIVE}"
        if kind is None:
            return sql, (user_id,)
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        return sql + " AND kind = ?", (user_id, kind)

    # checking

    def check_consistency(self) -> list[str]:
        """Problems between SQLite and the in-memory FAISS index (empty when consistent).

        Every live memory must have exactly one FAISS vector equal to its BLOB, and no FAISS
        id may lack a live row.
        """
        problems: list[str] = []
        with self._lock:
            self._check_open()
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                problems.append(f"SQLite quick_check: {check}")
            if self._needs_rebuild:
                return [*problems, "FAISS index awaits a rebuild after a failed update"]
            index = self._index
            if index.d != self.dim:
                problems.append(f"FAISS dim {index.d} != store dim {self.dim}")
                return problems
            counts = Counter(int(i) for i in faiss.vector_to_array(index.id_map))
            if index.ntotal != sum(counts.values()):
                problems.append(f"FAISS ntotal {index.ntotal} != {sum(counts.values())} ids")
            live: set[int] = set()
            for mid, blob in self._conn.execute(f"SELECT id, vector FROM memories WHERE {_LIVE}"):
                live.add(mid)
                n = counts.get(mid, 0)
                if len(blob) != 4 * self.dim:
                    problems.append(f"memory {mid}: vector BLOB has {len(blob)} bytes, expected {4 * self.dim}")
                elif n != 1:
                    problems.append(f"live memory {mid} has {n} vectors in FAISS")
                elif not np.array_equal(index.reconstruct(mid), np.frombuffer(blob, dtype=np.float32)):
                    problems.append(f"live memory {mid}: FAISS vector differs from its SQLite BLOB")
            problems += [f"FAISS id {mid} has no live row" for mid in sorted(set(counts) - live)]
        return problems


class WriteTx:
    """One SQLite transaction, plus the FAISS changes to apply once it has committed."""

    def __init__(self, store: Store):
        self._store = store
        self._changes: dict[int, np.ndarray | None] = {}  # memory id -> vector when live after commit, else None
        self._open = False

    def __enter__(self) -> WriteTx:
        self._store._begin()
        self._open = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        self._open = False
        if exc_type is not None:
            self._store._rollback()
            return False
        self._store._commit(self._changes)
        return False

    def _conn(self) -> sqlite3.Connection:
        if not self._open:
            raise RuntimeError("write transaction is not open (use `with store.write() as tx:`)")
        return self._store._conn

    def _live_row(self, memory_id: int) -> tuple[str]:
        row = self._conn().execute(f"SELECT user_id FROM memories WHERE id = ? AND {_LIVE}", (memory_id,)).fetchone()
        if row is None:
            raise ValueError(f"memory {memory_id} does not exist or is not live")
        return row

    def add_memory(self, user_id: str, text: str, subject: str, owner: str, kind: str, vector: np.ndarray,
                   request_id: str | None) -> int:
        """Insert a live memory; returns its id (also its FAISS id)."""
        if owner not in _OWNERS:
            raise ValueError(f"owner must be one of {_OWNERS}, got {owner!r}")
        if kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
        vec = _checked_vector(vector, self._store.dim)
        now = time.time()
        cur = self._conn().execute(
            "INSERT INTO memories (user_id, text, subject, owner, kind, vector, created_at, updated_at, request_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, text, subject, owner, kind, vec.tobytes(), now, now, request_id))
        memory_id = int(cur.lastrowid)
        self._changes[memory_id] = vec.copy()
        return memory_id

    def update_memory(self, memory_id: int, text: str, subject: str, owner: str, vector: np.ndarray,
                      request_id: str | None) -> None:
        """Rewrite a live memory in place (same id, new text and vector)."""
        if owner not in _OWNERS:
            raise ValueError(f"owner must be one of {_OWNERS}, got {owner!r}")
        vec = _checked_vector(vector, self._store.dim)
        self._live_row(memory_id)
        self._conn().execute(
            "UPDATE memories SET text = ?, subject = ?, owner = ?, vector = ?, request_id = ?, updated_at = ?"
            " WHERE id = ?", (text, subject, owner, vec.tobytes(), request_id, time.time(), memory_id))
        self._changes[memory_id] = vec.copy()

    def supersede(self, old_id: int, new_id: int) -> None:
        """Mark a live memory as replaced by another live memory of the same user."""
        if old_id == new_id:
            raise ValueError(f"memory {old_id} cannot supersede itself")
        (old_user,), (new_user,) = self._live_row(old_id), self._live_row(new_id)
        if old_user != new_user:
            raise ValueError(f"memory {new_id} belongs to another user than memory {old_id}")
        self._conn().execute("UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                             (new_id, time.time(), old_id))
        self._changes[old_id] = None

    def delete(self, memory_id: int) -> None:
        """Soft-delete a live memory (the row stays for history; its vector leaves FAISS)."""
        self._live_row(memory_id)
        self._conn().execute("UPDATE memories SET deleted_at = ? WHERE id = ?", (time.time(), memory_id))
        self._changes[memory_id] = None

    def append_l1_raw(self, user_id: str, request_id: str | None, content: str) -> None:
        """Append one rendered conversation to the user's L1 history."""
        self._conn().execute("INSERT INTO l1_raw (user_id, request_id, content, created_at) VALUES (?, ?, ?, ?)",
                             (user_id, request_id, content, time.time()))

    def merge_profile(self, user_id: str, updates: dict) -> None:
        """Merge non-None fields into the user's basic_info (a None never erases a known value)."""
        updates = {k: v for k, v in updates.items() if v is not None}
        if not updates:
            return
        conn = self._conn()
        row = conn.execute("SELECT basic_info FROM profiles WHERE user_id = ?", (user_id,)).fetchone()
        merged = {**(json.loads(row[0]) if row else {}), **updates}
        conn.execute(
            "INSERT INTO profiles (user_id, basic_info, updated_at) VALUES (?, ?, ?) ON CONFLICT(user_id)"
            " DO UPDATE SET basic_info = excluded.basic_info, updated_at = excluded.updated_at",
            (user_id, json.dumps(merged, ensure_ascii=False), time.time()))

    def advance_episode(self, user_id: str) -> int:
        """Increment the user's episode counter; returns the new value (1 for the first episode)."""
        row = self._conn().execute(
            "INSERT INTO episodes (user_id, counter) VALUES (?, 1)"
            " ON CONFLICT(user_id) DO UPDATE SET counter = counter + 1 RETURNING counter", (user_id,)).fetchone()
        return int(row[0])

    def append_trace(self, user_id: str, request_id: str | None, path: str, payload: dict) -> None:
        """Record what this write proposed and applied."""
        self._conn().execute(
            "INSERT INTO traces (user_id, request_id, path, payload, created_at) VALUES (?, ?, ?, ?, ?)",
            (user_id, request_id, path, json.dumps(payload, ensure_ascii=False), time.time()))

    def add_chain_round(self, user_id: str, request_id: str | None, round: int, stage: str, payload: dict) -> None:
        """Record one LM round of the chain (extract, reconcile, ...)."""
        self._conn().execute(
            "INSERT INTO chain_rounds (user_id, request_id, round, stage, payload, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (user_id, request_id, round, stage, json.dumps(payload, ensure_ascii=False), time.time()))

    def record_request(self, request_id: str, user_id: str, result: dict) -> None:
        """Record a successful write's result; a second record of one request_id fails the transaction."""
        self._conn().execute("INSERT INTO requests (request_id, user_id, result, created_at) VALUES (?, ?, ?, ?)",
                             (request_id, user_id, json.dumps(result, ensure_ascii=False), time.time()))
