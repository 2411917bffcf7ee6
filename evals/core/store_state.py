"""A store's logical state read from its files: every row of every table and the FAISS vectors, as the engine
will see them on open, with the diffs and the canonical form the checks compare.

Why below the stages: an arm reads its own store's state for the checker (hymem's SQLite + FAISS, mem0's tables),
and the checks compare those states, so the state is a shared type of both, not the checker's.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np

from evals.core.rows import is_live
from evals.core.store_view import PageDigests, View, leaf_cells, read_view, table_leaves
from hymem.store import DB_FILE, INDEX_FILE, SIDECAR_FILE

_IGNORED_TABLES = {"meta", "migrations", "sqlite_sequence"}
_ROWID_NAMES = {"rowid", "oid", "_rowid_"}
_VOLATILE = {"id", "created_at", "updated_at", "request_id", "deleted_at", "superseded_by", "result", "payload",
             "memory_id"}  # memory_id: a row's reference to a memory's (random) id, in mem0's history


@dataclass
class StoreState:
    """Every row of every table, plus the FAISS vectors as the engine will see them on open.

    `faiss` maps an id to its vector: raw float32 bytes when read from hymem's files (compared byte for byte),
    a tuple of floats from other readers. `row_keys` and `canonical_form` are memos (see `RowMemo`).
    """

    tables: dict[str, list[dict[str, Any]]]
    faiss: dict[Any, Any]
    faiss_stale: bool = False  # the FAISS file is behind SQLite and will be rebuilt on open
    notes: list[str] = field(default_factory=list)
    canonical_form: dict[str, list[str]] | None = field(default=None, repr=False, compare=False)  # memo
    row_keys: dict[str, set[str]] | None = field(default=None, repr=False, compare=False)  # memo
    live_memories: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)  # memo


_Vector = tuple[Any, bytes, str]  # a live memory's (id, vector bytes, its key in the FAISS part of `canonical`)
# every table's rows, diff keys and sorted canonical keys, the meta table, each table's live rows, and each table's
# live rows' vectors
_Rows = tuple[dict[str, list[dict[str, Any]]], dict[str, set[str]], dict[str, list[str]], dict[str, str],
              dict[str, list[dict[str, Any]]], dict[str, list[_Vector]]]
# a row as a dict, its key for diffs, its key for `canonical`, live, and its vector when it is a live memory
_Row = tuple[dict[str, Any], str, str, bool, _Vector | None]
_LeafKey = tuple[str, str, bytes]  # (table, its CREATE statement, the leaf page's SHA-256)
# rows as dicts, their diff keys, their canonical keys, the live ones among them (not superseded or deleted), and
# those live rows' vectors
_Part = tuple[list[dict[str, Any]], list[str], list[str], list[dict[str, Any]], list[_Vector]]
_LeafRows = tuple[tuple[tuple[int, bytes], ...], _Part]  # ((overflow page, its SHA-256), ...), the leaf's rows


class RowMemo:
    """Rows already read, for one case: each distinct database's, each distinct leaf page's, each distinct row's.

    Why: a sweep reads the store after every faulted write, retry and repeat, so reading every row each time
    costs O(store) per faulted unit. A read trusts nothing the engine reports and nothing but bytes:
    - a database whose pages are all the same bytes as an earlier read's (a failed write rolled back, an
      idempotent repeat, a close that checkpointed the same pages) reuses that read's rows, found by a digest
      of every page a reader sees (`evals.core.store_view`): no SQL at all;
    - otherwise each table's b-tree is walked from its root page, and a leaf page (with its overflow pages)
      that is the same bytes as one read before holds the same rows; only the rows of the other leaves are
      read through SQL, by their rowid range, and the rowids must be the ones the page holds;
    - a row is looked up by its full raw content (every column, the vector's bytes too), so a changed row is
      always a new entry.
    """

    def __init__(self, max_rows: int = 50_000, max_index_bytes: int = 64 << 20, max_database_rows: int = 500_000,
                 max_leaves: int = 20_000):
        self._rows: dict[tuple[Any, ...], _Row] = {}
        self._faiss: dict[bytes, tuple[dict[int, bytes], list[str]]] = {}
        self._max_rows, self._max_index_bytes, self._index_bytes = max_rows, max_index_bytes, 0
        self._databases: dict[bytes, _Rows] = {}
        self._max_database_rows, self._database_rows = max_database_rows, 0  # rows the kept databases hold
        self._leaves: dict[_LeafKey, _LeafRows] = {}
        self._max_leaves = max_leaves
        self.pages = PageDigests()
        # state reads that read SQL / reused a whole database's rows; leaf pages read through SQL / reused
        self.reads = {"rows": 0, "reused": 0, "leaves_read": 0, "leaves_reused": 0}

    def database(self, digest: bytes | None) -> _Rows | None:
        """The rows read from a database with this digest, if one was read."""
        return self._databases.get(digest) if digest is not None else None

    def remember(self, digest: bytes, rows: _Rows, leaves: dict[_LeafKey, _LeafRows]) -> None:
        """Keep a read's rows, and its leaf pages' rows, for later reads (oldest dropped first: a sweep's
        reads of one database are close in time). Bounded in rows held, so a large store's reads stay cheap
        in memory."""
        if digest in self._databases:
            return
        size = sum(len(t) for t in rows[0].values())
        while self._databases and self._database_rows + size > self._max_database_rows:
            dropped = self._databases.pop(next(iter(self._databases)))
            self._database_rows -= sum(len(t) for t in dropped[0].values())
        if size <= self._max_database_rows:
            self._databases[digest] = rows
            self._database_rows += size
        if len(self._leaves) + len(leaves) > self._max_leaves:
            self._leaves.clear()
        self._leaves.update(leaves)

    def leaf(self, key: _LeafKey, view: View) -> _Part | None:
        """The rows of a leaf page read before, if its overflow pages are the same bytes too."""
        hit = self._leaves.get(key)
        if hit is None or any(view.page_digest(pgno) != digest for pgno, digest in hit[0]):
            return None
        return hit[1]

    def row(self, table: str, columns: tuple[str, ...], raw: tuple[Any, ...]) -> _Row:
        """(the row as a dict, its key for diffs, its key for `canonical`, whether it is live, and a live
        memory's vector as the index rebuilt from SQLite holds it: computed once per row, not once per read)."""
        key = (table, columns, raw)
        hit = self._rows.get(key)
        if hit is None:
            if len(self._rows) >= self._max_rows:
                self._rows.clear()
            row = dict(zip(columns, raw, strict=True))
            live = is_live(row)
            vector = None
            if live and table == "memories":
                blob = bytes(row.get("vector") or b"")
                vector = (row.get("id"), blob, _vector_key(blob))
            hit = self._rows[key] = (row, _row_key(row), _canonical_row_key(row), live, vector)
        return hit

    def faiss(self, data: bytes, read: Any) -> tuple[dict[int, bytes], list[str]]:
        """The vectors of an index file and their canonical keys, parsed once per distinct file content."""
        hit = self._faiss.get(data)  # looked up by the file's whole bytes: equal only when identical
        if hit is None:
            if self._index_bytes + len(data) > self._max_index_bytes:
                self._faiss.clear()
                self._index_bytes = 0
            vectors = read(data)
            hit = self._faiss[data] = (vectors, _faiss_canonical(vectors))
            self._index_bytes += len(data)
        return hit


def read_state(store_dir: Path, memo: RowMemo | None = None) -> StoreState:
    """Read a store's files directly: every table (as a new reader of its database sees it) and the FAISS
    index file, whole.

    `memo`: per-row work (dicts, keys) shared with earlier reads of the same case's stores, and the rows of
    each database already read, reused when every page of this one is the same bytes.
    """
    store_dir = Path(store_dir)
    memo = memo if memo is not None else RowMemo()
    db_path = store_dir / DB_FILE
    view = read_view(db_path, memo.pages)
    rows = memo.database(view.digest if view is not None else None)
    if rows is None:
        leaves: dict[_LeafKey, _LeafRows] = {}
        rows = _read_rows(db_path, view, memo, leaves)
        memo.reads["rows"] += 1
        after = read_view(db_path, memo.pages) if view is not None else None
        if view is not None and after is not None and after.digest == view.digest:  # unchanged while read
            memo.remember(view.digest, rows, leaves)
    else:
        memo.reads["reused"] += 1
    tables, keys, shared_canon, meta, live, vectors = rows
    canon = dict(shared_canon)  # this state's own: its FAISS part is added below
    live_memories = live.get("memories", [])
    read = _read_faiss(store_dir, int(meta.get("generation", 0)), memo)
    if read is None:  # stale or missing: the engine rebuilds from SQLite on open, so that is the index it will use
        rebuilt = vectors.get("memories", [])  # each live memory's, found once per row (`RowMemo.row`)
        faiss_vectors = dict(zip(map(itemgetter(0), rebuilt), map(itemgetter(1), rebuilt), strict=True))
        canon["faiss"] = (sorted(map(itemgetter(2), rebuilt)) if len(faiss_vectors) == len(rebuilt)
                          else _faiss_canonical(faiss_vectors))  # an id twice: the dict keeps one, as before
    else:
        faiss_vectors, canon["faiss"] = read
    return StoreState(tables=tables, faiss=faiss_vectors, faiss_stale=read is None, canonical_form=canon,
                      row_keys=keys, live_memories=live_memories)


def _read_rows(db_path: Path, view: View | None, memo: RowMemo, leaves: dict[_LeafKey, _LeafRows]) -> _Rows:
    """Every table's rows (as dicts, diff keys and sorted canonical keys) and the meta table.

    A table is read leaf page by leaf page when `view` (the pages this read sees) is known: the rows of a leaf
    read before are reused, the others read through SQL; their entries are added to `leaves`. Else, and for
    a table that is not a plain rowid table, whole through SQL."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    tables: dict[str, list[dict[str, Any]]] = {}
    keys: dict[str, set[str]] = {}
    canon: dict[str, list[str]] = {}
    live: dict[str, list[dict[str, Any]]] = {}
    vectors: dict[str, list[_Vector]] = {}
    try:
        schema = db.execute("SELECT name, rootpage, sql FROM sqlite_master WHERE type='table' ORDER BY name").fetchall()
        names = [name for name, _, _ in schema]
        for name, root, sql in schema:
            if name in _IGNORED_TABLES:
                continue
            parts = _table_by_leaves(db, view, memo, name, root, sql or "", leaves) if view is not None else None
            if parts is None:
                cursor = db.execute(f'SELECT * FROM "{name}"')
                columns = tuple(d[0] for d in cursor.description)
                parts = [_part([memo.row(name, columns, raw) for raw in cursor.fetchall()])]
            tables[name] = list(chain.from_iterable(part[0] for part in parts))  # no Python work per row
            keys[name] = set(chain.from_iterable(part[1] for part in parts))
            canon[name] = sorted(chain.from_iterable(part[2] for part in parts))
            live[name] = list(chain.from_iterable(part[3] for part in parts))  # found once per distinct leaf
            vectors[name] = list(chain.from_iterable(part[4] for part in parts))
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in names else {}
    finally:
        db.close()
    return tables, keys, canon, meta, live, vectors


def _table_by_leaves(db: sqlite3.Connection, view: View, memo: RowMemo, name: str, root: Any, sql: str,
                     leaves: dict[_LeafKey, _LeafRows]) -> list[_Part] | None:
    """A rowid table's rows in rowid order, one part per leaf page; None when the table cannot be read so
    (not a rowid b-tree, a page out of place, rowids that are not the page's): the caller reads it whole."""
    try:
        pages = table_leaves(view, int(root or 0), memo.pages.btree)
        if pages is None:
            return None
        parts: list[_Part] = []
        read_here: dict[_LeafKey, _LeafRows] = {}  # kept only when the whole table reads so
        for pgno in pages:
            key = (name, sql, view.page_digest(pgno))
            known = memo.leaf(key, view)
            if known is not None:
                memo.reads["leaves_reused"] += 1
                parts.append(known)
                continue
            cells = leaf_cells(view, pgno)
            read: _Part = ([], [], [], [], [])
            if cells.rowids:
                cursor = db.execute(f'SELECT rowid, * FROM "{name}" WHERE rowid BETWEEN ? AND ? ORDER BY rowid',
                                    (cells.rowids[0], cells.rowids[-1]))
                columns = tuple(d[0] for d in cursor.description[1:])
                fetched = cursor.fetchall()
                if {c.lower() for c in columns} & _ROWID_NAMES or [r[0] for r in fetched] != cells.rowids:
                    return None  # a column that hides the rowid, or the page and SQL disagree: read it whole
                read = _part([memo.row(name, columns, raw[1:]) for raw in fetched])
            read_here[key] = (tuple((p, view.page_digest(p)) for p in cells.overflow), read)
            parts.append(read)
        memo.reads["leaves_read"] += len(read_here)
        leaves.update(read_here)
        return parts
    except (ValueError, IndexError):  # a pointer out of the database or a page cut short: not a b-tree we read
        return None


def _part(rows: list[_Row]) -> _Part:
    return ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows if r[3]],
            [r[4] for r in rows if r[4] is not None])


def _read_faiss(store_dir: Path, generation: int, memo: RowMemo) -> tuple[dict[int, bytes], list[str]] | None:
    """The index file's vectors by id, when its sidecar names SQLite's generation; else None (stale)."""
    index_path, sidecar_path = store_dir / INDEX_FILE, store_dir / SIDECAR_FILE
    try:
        sidecar = json.loads(sidecar_path.read_text())
        if int(sidecar.get("generation", -1)) != generation:
            return None
        data = index_path.read_bytes()
        vectors, canon = memo.faiss(data, parse_faiss)
    except Exception:  # missing, unreadable or not an index: the engine rebuilds it
        return None
    return vectors, canon


def parse_faiss(data: bytes) -> dict[int, bytes]:
    import faiss

    index: Any = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))  # an IndexIDMap2 (its id_map, index)
    ids = faiss.vector_to_array(index.id_map).astype(np.int64) if index.ntotal else np.zeros(0, np.int64)
    vectors = index.index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, index.d), np.float32)
    out: dict[int, bytes] = {}
    for mid, vector in zip(ids.tolist(), vectors, strict=True):
        blob = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
        if mid in out:
            out[-mid - 1_000_000_000] = blob  # a duplicate id: keep it visible to the checker
        else:
            out[mid] = blob
    return out


def _faiss_canonical(vectors: dict[Any, Any]) -> list[str]:
    return sorted(_vector_key(v) for v in vectors.values())


def _vector_key(vector: Any) -> str:
    if isinstance(vector, bytes):
        return vector.hex()
    return _row_key({"v": list(vector)})


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items()}, sort_keys=True,
                      ensure_ascii=False, default=str)


def _canonical_row_key(row: dict[str, Any]) -> str:
    rec = {k: v for k, v in row.items() if k not in _VOLATILE}
    if "superseded_by" in row:
        rec["live"] = is_live(row)
    return _row_key(rec)


def _keys(state: StoreState) -> dict[str, set[str]]:
    if state.row_keys is None:
        state.row_keys = {t: {_row_key(r) for r in rows} for t, rows in state.tables.items()}
    return state.row_keys


def diff_states(before: StoreState, after: StoreState) -> dict[str, dict[str, list[str]]]:
    """Rows added and removed per table (a changed row is one removed and one added), and FAISS ids."""
    out: dict[str, dict[str, list[str]]] = {}
    keys_a, keys_b = _keys(before), _keys(after)
    for table in sorted(set(before.tables) | set(after.tables)):
        a, b = keys_a.get(table, set()), keys_b.get(table, set())
        if a != b:
            out[table] = {"added": sorted(b - a), "removed": sorted(a - b)}
    fa, fb = before.faiss, after.faiss
    changed = sorted(i for i in set(fa) | set(fb) if fa.get(i) != fb.get(i))
    if changed:
        out["faiss"] = {"added": [str(i) for i in changed if i in fb], "removed": [str(i) for i in changed if i in fa]}
    return out


def canonical(state: StoreState) -> dict[str, list[str]]:
    """The logical content with ids, timestamps, request ids and payloads left out (for retry equivalence).

    Memoised on the state: a write's pre- and post-control states are compared once per fault.
    """
    if state.canonical_form is not None:
        return state.canonical_form
    out = {table: sorted(_canonical_row_key(row) for row in rows) for table, rows in state.tables.items()}
    out["faiss"] = _faiss_canonical(state.faiss)
    state.canonical_form = out
    return out


def logical_diff(before: StoreState, after: StoreState) -> dict[str, dict[str, list[str]]]:
    """Rows added and removed per table as `canonical` sees them (ids and timestamps left out), counted as
    multisets: what made two states unequal. Why not `diff_states`: an engine with random ids (mem0's uuids)
    shows every re-written row as one removed and one added, hiding the rows that really differ."""
    a, b = canonical(before), canonical(after)
    out: dict[str, dict[str, list[str]]] = {}
    for table in sorted(set(a) | set(b)):
        old, new = Counter(a.get(table, [])), Counter(b.get(table, []))
        if old != new:
            out[table] = {"added": sorted((new - old).elements()), "removed": sorted((old - new).elements())}
    return out


def live_memories(state: StoreState) -> list[dict[str, Any]]:
    """The state's live memory rows: found once per distinct leaf page by `read_state`, else here."""
    if state.live_memories is None:
        state.live_memories = [row for row in state.tables.get("memories", []) if is_live(row)]
    return state.live_memories
