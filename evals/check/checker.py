"""The rollback checker: store files → logical state → named anomalies with witnesses.

Like Elle, it trusts no report from the engine about itself: it reads every
table listed in `sqlite_master` and the FAISS ids and vectors from disk, diffs
the state around each faulted write, and names what it finds.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from evals.core.store_view import PageDigests, View, leaf_cells, read_view, table_leaves
from evals.faults.plan import Expected
from evals.record import Anomaly, AnomalyKind
from hymem.store import DB_FILE, INDEX_FILE, SIDECAR_FILE

# Which anomaly a leftover change in each table is.
_K = AnomalyKind
_TABLE_ANOMALY = {"memories": _K.PARTIAL_WRITE, "profiles": _K.PARTIAL_WRITE, "requests": _K.PARTIAL_WRITE,
                  "l1_raw": _K.L1_NOT_ROLLED_BACK, "episodes": _K.EPISODE_ADVANCED, "traces": _K.TRACE_APPENDED,
                  "chain_rounds": _K.TRACE_APPENDED, "faiss": _K.PARTIAL_WRITE,
                  # mem0's logical state (evals.arms.mem0_system): saved messages are its raw log
                  "messages": _K.L1_NOT_ROLLED_BACK, "history": _K.TRACE_APPENDED, "entities": _K.PARTIAL_WRITE}
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


# every table's rows, diff keys and sorted canonical keys, the meta table, and each table's live rows
_Rows = tuple[dict[str, list[dict[str, Any]]], dict[str, set[str]], dict[str, list[str]], dict[str, str],
              dict[str, list[dict[str, Any]]]]
_Row = tuple[dict[str, Any], str, str, bool]  # a row as a dict, its key for diffs, its key for `canonical`, live
_LeafKey = tuple[str, str, bytes]  # (table, its CREATE statement, the leaf page's SHA-256)
# rows as dicts, their diff keys, their canonical keys, the live ones among them (not superseded or deleted)
_Part = tuple[list[dict[str, Any]], list[str], list[str], list[dict[str, Any]]]
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
        """(the row as a dict, its key for diffs, its key for `canonical`, whether it is live)."""
        key = (table, columns, raw)
        hit = self._rows.get(key)
        if hit is None:
            if len(self._rows) >= self._max_rows:
                self._rows.clear()
            row = dict(zip(columns, raw, strict=True))
            hit = self._rows[key] = (row, _row_key(row), _canonical_row_key(row), _live(row))
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
    tables, keys, shared_canon, meta, live = rows
    canon = dict(shared_canon)  # this state's own: its FAISS part is added below
    live_memories = live.get("memories", [])
    read = _read_faiss(store_dir, int(meta.get("generation", 0)), memo)
    if read is None:  # stale or missing: the engine rebuilds from SQLite on open, so that is the index it will use
        faiss_vectors = {row["id"]: bytes(row["vector"] or b"") for row in live_memories}
        canon["faiss"] = _faiss_canonical(faiss_vectors)
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
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in names else {}
    finally:
        db.close()
    return tables, keys, canon, meta, live


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
            read: _Part = ([], [], [], [])
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
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], [r[0] for r in rows if r[3]]


def _read_faiss(store_dir: Path, generation: int, memo: RowMemo) -> tuple[dict[int, bytes], list[str]] | None:
    """The index file's vectors by id, when its sidecar names SQLite's generation; else None (stale)."""
    index_path, sidecar_path = store_dir / INDEX_FILE, store_dir / SIDECAR_FILE
    try:
        sidecar = json.loads(sidecar_path.read_text())
        if int(sidecar.get("generation", -1)) != generation:
            return None
        data = index_path.read_bytes()
        vectors, canon = memo.faiss(data, _parse_faiss)
    except Exception:  # missing, unreadable or not an index: the engine rebuilds it
        return None
    return vectors, canon


def _parse_faiss(data: bytes) -> dict[int, bytes]:
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


def _live(row: dict[str, Any]) -> bool:
    return row.get("superseded_by") is None and row.get("deleted_at") is None


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items()}, sort_keys=True,
                      ensure_ascii=False, default=str)


def _canonical_row_key(row: dict[str, Any]) -> str:
    rec = {k: v for k, v in row.items() if k not in _VOLATILE}
    if "superseded_by" in row:
        rec["live"] = _live(row)
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


def _live_memories(state: StoreState) -> list[dict[str, Any]]:
    """The state's live memory rows: found once per distinct leaf page by `read_state`, else here."""
    if state.live_memories is None:
        state.live_memories = [row for row in state.tables.get("memories", []) if _live(row)]
    return state.live_memories


@lru_cache(maxsize=8192)
def _usable_vector(blob: bytes, dim: int) -> bool:
    """A vector BLOB of `dim` finite float32s (checked once per distinct BLOB)."""
    return len(blob) == 4 * dim and bool(np.isfinite(np.frombuffer(blob, dtype=np.float32)).all())


def consistency_anomalies(state: StoreState, dim: int) -> list[Anomaly]:
    """An anomaly for every live row without exactly one good vector and every orphan vector."""
    found: list[Anomaly] = []
    live = {row["id"]: row for row in _live_memories(state)}
    for mid, row in sorted(live.items()):
        blob = row.get("vector") or b""
        if isinstance(blob, (bytearray, memoryview)):
            blob = bytes(blob)
        if not isinstance(blob, bytes) or not _usable_vector(blob, dim):
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no usable vector BLOB"))
        elif mid not in state.faiss:
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no FAISS vector"))
    for mid in sorted(state.faiss):
        if mid not in live:
            found.append(Anomaly(kind=_K.ORPHAN_VECTOR, witness=f"FAISS id {mid} has no live row"))
    found += [Anomaly(kind=_K.SUPERSEDED_BY_WRONG, witness=w) for w in superseded_by_problems(state)]
    return found


def superseded_by_problems(state: StoreState) -> list[str]:
    """A witness for every memory whose `superseded_by` (left out of every state comparison, as ids are) names
    no other memory of the same user, or starts a chain that comes back to itself: the record of which memory
    replaced which is lost. Rows without the column (another engine's state) have nothing to check."""
    rows = state.tables.get("memories", [])
    pointing = [row for row in rows if row.get("superseded_by") is not None]
    if not pointing:
        return []
    by_id: dict[Any, dict[str, Any]] = {row.get("id"): row for row in rows}
    found = []
    for row in sorted(pointing, key=lambda r: str(r.get("id"))):
        mid, target = row.get("id"), row.get("superseded_by")
        head = f"memory {mid} ({str(row.get('text'))[:80]!r}, user {row.get('user_id')!r}) is superseded by"
        other: dict[str, Any] | None = by_id.get(target)
        if target == mid:
            found.append(f"{head} itself")
        elif other is None:
            found.append(f"{head} memory {target}, which does not exist")
        elif other.get("user_id") != row.get("user_id"):
            found.append(f"{head} memory {target} of user {other.get('user_id')!r}")
        else:
            seen: set[Any] = {mid}
            at: dict[str, Any] | None = other  # follow the chain: it must end, never come back
            while at is not None and at.get("superseded_by") is not None:
                if at.get("id") in seen:
                    found.append(f"{head} memory {target}, whose chain of superseded_by comes back to memory "
                                 f"{at.get('id')}")
                    break
                seen.add(at.get("id"))
                at = by_id.get(at.get("superseded_by"))
    return found


def closed_store_anomalies(open_state: StoreState, closed: StoreState, dim: int) -> list[Anomaly]:
    """The store as its close left it, against its last state read while open: the same rows, and the index
    it persisted holding exactly the live memories' vectors (the index the next open will serve)."""
    found = consistency_anomalies(closed, dim)
    if not found and canonical(closed) != canonical(open_state):
        diff = diff_states(open_state, closed)
        kind = _K.VECTORLESS_NODE if set(diff) == {"faiss"} else _K.PARTIAL_WRITE
        found.append(Anomaly(kind=kind, witness="closing the store changed it: " + short_diff(diff)))
    return found


def short_diff(diff: dict[str, dict[str, list[str]]], limit: int = 600) -> str:
    parts = []
    for table, change in diff.items():
        head = (change["added"] or change["removed"] or [""])[0]
        parts.append(f"{table}: +{len(change['added'])} -{len(change['removed'])} e.g. {head[:160]}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def codes_of(result: Any) -> dict[str, Any]:
    """The outcome fields a fault's expected outcome is compared on (a system's `WriteOutcome.codes` as given)."""
    if isinstance(getattr(result, "codes", None), dict):
        return dict(result.codes)
    return {"success": result.success, "error_code": result.error_code,
            "agent_error_code": result.agent_error_code, "reconcile_error_code": result.reconcile_error_code,
            "retry_safe": result.retry_safe}


def check_faulted_write(expected: Expected, result: Any, before: StoreState, after: StoreState,
                        control_after: StoreState, retry_result: Any, retry_after: StoreState,
                        repeat_after: StoreState, dim: int, *, same_as_control: bool = True,
                        control_failed: bool = False, retry_natural: bool = False) -> list[Anomaly]:
    """Anomalies of one faulted write and its retry, each with its witness. Pure: no I/O.

    `same_as_control=False`: a fault that changes what the write decides (an adversarial reply) need not
    leave the fault-free run's state; what it must leave is checked by `evals.faults.adversarial`.
    `control_failed`: the fault-free write failed on the model's own reply (`control_after` is the store as it
    was). A retry the model broke the same way (`retry_natural`) must leave the store as it was; one that got
    through has no fault-free state to match, so only its consistency is checked.
    """
    found: list[Anomaly] = []
    actual = codes_of(result)
    want = expected.model_dump()
    if expected.success:
        if not result.success:
            found.append(Anomaly(kind=_K.WRONG_ERROR_CODE,
                                 witness=f"write failed under a fault that must not fail it: {actual}"))
        elif same_as_control and canonical(after) != canonical(control_after):
            found.append(Anomaly(kind=_K.RETRY_DIVERGED,
                                 witness="state after the write differs from the fault-free run: "
                                 + short_diff(logical_diff(control_after, after))))
    else:
        diff = diff_states(before, after)
        if result.success:
            found.append(Anomaly(kind=_K.DEGRADED_SUCCESS,
                                 witness=f"success=true under a fault that must fail; ops={len(result.ops)}"
                                 + (f"; state diff: {short_diff(diff)}" if diff else "")))
        elif {k: actual.get(k) for k in want} != want:  # a system may report more fields (e.g. what it raised)
            found.append(Anomaly(kind=_K.WRONG_ERROR_CODE, witness=f"expected {want}, got {actual}"))
        found += _leftovers(diff)
    found += consistency_anomalies(after, dim)
    if not expected.success:
        if control_failed and retry_result is not None and not retry_result.success and retry_natural:
            found += [Anomaly(kind=a.kind, witness="after a retry the model's reply failed too: " + a.witness)
                      for a in leftover_anomalies(control_after, retry_after)]
        elif retry_result is None or not retry_result.success:
            codes = codes_of(retry_result) if retry_result else None
            found.append(Anomaly(kind=_K.RETRY_DIVERGED, witness=f"the retry without fault failed: {codes}"))
        elif control_failed:
            pass  # the retry got through where the fault-free write did not: no fault-free state to match
        elif canonical(retry_after) != canonical(control_after):
            extra = _extra_rows(control_after, retry_after)
            kind = _K.DOUBLE_WRITE if extra else _K.RETRY_DIVERGED
            found.append(Anomaly(kind=kind, witness=short_diff(logical_diff(control_after, retry_after))))
        found += [Anomaly(kind=a.kind, witness="after retry: " + a.witness) for a in consistency_anomalies(retry_after, dim)]
    if not retry_natural and canonical(repeat_after) != canonical(retry_after if not expected.success else after):
        found.append(Anomaly(kind=_K.DOUBLE_WRITE, witness="re-sending the same request_id changed the store: "
                             + short_diff(logical_diff(retry_after if not expected.success else after, repeat_after))))
    return list(dict.fromkeys(found))  # each (kind, witness) once, in the order found


def leftover_anomalies(before: StoreState, after: StoreState) -> list[Anomaly]:
    """What a failed write left behind: one anomaly per kind of leftover (rows, vectors, L1 raw, episodes, traces),
    each with the tables' diff as its witness. Empty when the store is as it was."""
    return _leftovers(diff_states(before, after))


def _leftovers(diff: dict[str, dict[str, list[str]]]) -> list[Anomaly]:
    found = []
    for kind in sorted({_TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) for t in diff}):
        tables = [t for t in diff if _TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) == kind]
        found.append(Anomaly(kind=kind, witness=short_diff({t: diff[t] for t in tables})))
    return found


def _extra_rows(control: StoreState, other: StoreState) -> bool:
    """True when `other` holds more live memories than the control run: a write landed twice."""
    return len(_live_memories(other)) > len(_live_memories(control))
