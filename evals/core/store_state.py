"""A store's logical state read from its files: every row of every table and the FAISS vectors, as the engine
will see them on open, with the diffs and the canonical form the checks compare.

Why below the stages: an arm reads its own store's state for the checker (hymem's SQLite + FAISS, mem0's tables),
and the checks compare those states, so the state is a shared type of both, not the checker's.
"""

from __future__ import annotations

import json
import operator
import sqlite3
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from evals.core.chunks import ChunkedById, ChunkMemo, Chunks, differing_items
from evals.core.row_passes import ListMemo
from evals.core.rows import is_live
from evals.core.store_view import (
    INTERIOR_TABLE,
    LEAF_TABLE,
    PageDigests,
    View,
    btree_page,
    changed_pages,
    is_table_leaf,
    leaf_cells,
    read_view,
)
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

    tables: Mapping[str, Sequence[dict[str, Any]]]  # a list, or `Chunks` from `read_state` (reads as a list)
    faiss: Mapping[Any, Any]
    faiss_stale: bool = False  # the FAISS file is behind SQLite and will be rebuilt on open
    notes: list[str] = field(default_factory=list)
    canonical_form: dict[str, Sequence[str]] | None = field(default=None, repr=False, compare=False)  # memo
    row_keys: dict[str, set[str]] | None = field(default=None, repr=False, compare=False)  # memo
    key_lists: dict[str, Sequence[str]] | None = field(default=None, repr=False, compare=False)  # `row_keys`' source
    derived: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)  # memos of the helpers below
    live_memories: Sequence[dict[str, Any]] | None = field(default=None, repr=False, compare=False)  # memo


_Vector = tuple[Any, bytes, str]  # a live memory's (id, vector bytes, its key in the FAISS part of `canonical`)
# every table's rows, diff keys and sorted canonical keys, the meta table, each table's live rows, each table's
# live rows' vectors and the FAISS part of `canonical` for an index rebuilt from them, those vectors by id, and
# the `StoreState.derived` memos the read knows
_Rows = tuple[dict[str, Sequence[dict[str, Any]]], dict[str, Sequence[str]], dict[str, Sequence[str]], dict[str, str],
              dict[str, Sequence[dict[str, Any]]], dict[str, Sequence[_Vector]], dict[str, Sequence[str]],
              dict[str, Mapping[Any, bytes]], dict[Any, Any]]
# a row as a dict, its key for diffs, its key for `canonical`, live, and its vector when it is a live memory
_Row = tuple[dict[str, Any], str, str, bool, _Vector | None]
_LeafKey = tuple[str, str, bytes]  # (table, its CREATE statement, the leaf page's SHA-256)
# rows as dicts, their diff keys, their canonical keys, the live ones among them (not superseded or deleted), and
# those live rows' vectors. Tuples, not lists: a leaf's part is kept as long as its page is unchanged, and the
# garbage collector stops tracking a tuple of strings or of vectors (its full collections walk what is tracked)
_Part = tuple[tuple[dict[str, Any], ...], tuple[str, ...], tuple[str, ...], tuple[dict[str, Any], ...],
              tuple[_Vector, ...]]
_LeafRows = tuple[tuple[tuple[int, bytes], ...], _Part]  # ((overflow page, its SHA-256), ...), the leaf's rows


class _Table(NamedTuple):
    """A table's rows as a state holds them: grouped by `_GROUP` leaves (`Chunks`), so the next read shares the
    groups whose leaves did not change instead of copying every row."""

    rows: Chunks[dict[str, Any]]
    keys: Lazy  # each row's diff key
    canon: Lazy  # the rows' canonical keys, sorted
    live: Chunks[dict[str, Any]]  # (the memories table's only)
    vectors: Chunks[_Vector]  # the live memories' vectors
    vector_keys: Lazy  # their canonical keys, sorted
    faiss: LazyMapping  # id -> vector, as an index rebuilt from these rows holds them
    by_id: Mapping[Any, dict[str, Any]] | None = None  # the rows by id (`rows_by_id`), for the memories table
    faiss_canon: Lazy | None = None  # the FAISS part of `canonical` for an index rebuilt from these rows


@dataclass
class _TableRead:
    """A table as the last read of its database file assembled it, leaf page by leaf page.

    Why: a long case reads its store after every write, and a write changes a few pages of a store that
    grows with the case. A later read of the same file compares every page's SHA-256 with this read's (at C
    speed, `changed_pages`) and reads again only the leaves whose page or overflow pages changed; the b-tree is
    walked again only below the interior pages that changed (`_Tree`). Still bytes only: an unchanged page is
    the same bytes, so it holds the same rows (and an unchanged interior page the same children)."""

    root: int
    sql: str
    interior: set[int]  # the b-tree's interior pages: one changed and the leaves are walked again
    leaves: Sequence[int]  # the leaf pages in rowid order
    where: dict[int, int]  # a leaf page or an overflow page -> the index of its leaf in `leaves`
    parts: list[_Part]  # each leaf's rows
    overflow: Sequence[tuple[tuple[int, bytes], ...]]  # each leaf's overflow pages (and their SHA-256): a tuple
    table: _Table
    tree: _Tree  # each interior page's subtree, so a walk again re-walks only the subtrees that changed


class _Tree(NamedTuple):
    """A table b-tree's interior pages as a walk found them: each one's leaves and interior pages below it (itself
    first), and its parent. A later walk takes an interior page's subtree whole from here when neither it nor
    any interior page below it changed: the same bytes, so the same children (its leaves, checked to be leaves
    still where they changed, hold the rows `_TableRead.parts` says)."""

    below: dict[int, tuple[int, ...]]  # interior page -> the leaves under it, in rowid order
    inner: dict[int, tuple[int, ...]]  # interior page -> the interior pages under it, itself first
    parent: dict[int, int]  # interior page -> its parent (the root has none)


class RowMemo:
    """Rows already read, for one case: each distinct database's, each distinct leaf page's, each distinct row's.

    Why: a sweep reads the store after every faulted write, retry and repeat, so reading every row each time
    costs O(store) per faulted unit. A read trusts nothing the engine reports and nothing but bytes (and, for
    a main database file unchanged since a read that found it settled, its stat: `PageDigests.settled`):
    - a database whose pages are all the same bytes as an earlier read's (a failed write rolled back, an
      idempotent repeat, a close that checkpointed the same pages) reuses that read's rows, found by a digest
      of every page a reader sees (`evals.core.store_view`): no SQL at all;
    - otherwise each table's b-tree is walked from its root page, and a leaf page (with its overflow pages)
      that is the same bytes as one read before holds the same rows; only the rows of the other leaves are
      read through SQL, by their rowid range, and the rowids must be the ones the page holds;
    - a later read of the same database file reuses that file's last read table by table: a table none of
      whose pages changed is taken whole, and of the others only the leaves whose pages changed are looked
      up again (`_TableRead`), so a long case's read after each write costs O(changed), not O(store);
    - a row is looked up by its full raw content (every column, the vector's bytes too), so a changed row is
      always a new entry.
    """

    def __init__(self, max_rows: int = 50_000, max_index_bytes: int = 64 << 20, max_database_rows: int = 500_000,
                 max_leaves: int = 20_000, max_databases: int = 8):
        self._rows: dict[tuple[Any, ...], _Row] = {}
        self._faiss: dict[bytes, tuple[dict[int, bytes], list[str]]] = {}
        self._max_rows, self._max_index_bytes, self._index_bytes = max_rows, max_index_bytes, 0
        self._databases: dict[bytes, _Rows] = {}  # the least recently read first
        self._max_database_rows, self._database_rows = max_database_rows, 0  # rows the kept databases hold
        self._max_databases = max_databases
        self._leaves: dict[_LeafKey, _LeafRows] = {}
        self._max_leaves = max_leaves
        self.pages = PageDigests()
        # each database file's last read kept: (its pages' digests, its tables) -> `_TableRead`
        self._files: dict[str, tuple[bytes, dict[str, _TableRead]]] = {}
        self._max_files = 16
        # state reads that read SQL / reused a whole database's rows; leaf pages read through SQL / reused
        self.reads = {"rows": 0, "reused": 0, "leaves_read": 0, "leaves_reused": 0}

    def database(self, digest: bytes | None) -> _Rows | None:
        """The rows read from a database with this digest, if one was read (now the most recently read)."""
        if digest is None:
            return None
        rows = self._databases.pop(digest, None)
        if rows is not None:
            self._databases[digest] = rows
        return rows

    def remember(self, digest: bytes, rows: _Rows, leaves: dict[_LeafKey, _LeafRows]) -> None:
        """Keep a read's rows, and its leaf pages' rows, for later reads (the least recently read dropped first:
        a sweep's reads of one database are close in time). Bounded in rows held, so a large store's reads stay
        cheap in memory, and in databases: a long case's store changes with every write, so the reads of a
        database are a few reads apart; each kept one holds its read's tables (tracked objects made per read),
        and keeping them for many writes made the garbage collector promote, then walk, hundreds of them a write
        (a 3,000-turn case kept the last 27 writes' databases: ~340 objects promoted a write, ~150 with none)."""
        if digest in self._databases:
            return
        size = sum(len(t) for t in rows[0].values())
        while self._databases and (self._database_rows + size > self._max_database_rows
                                   or len(self._databases) >= self._max_databases):
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
        hit = self.leaf_rows(key, view)
        return hit[1] if hit is not None else None

    def leaf_rows(self, key: _LeafKey, view: View) -> _LeafRows | None:
        """A leaf page read before (its overflow pages and rows), if its overflow pages are the same bytes too."""
        hit = self._leaves.get(key)
        if hit is None or any(view.page_digest(pgno) != digest for pgno, digest in hit[0]):
            return None
        return hit

    def last_read(self, path: str) -> tuple[bytes, dict[str, _TableRead]] | None:
        """The last kept read of this database file: its pages' digests and its tables as read."""
        return self._files.get(path)

    def keep_read(self, path: str, digests: bytes, tables: dict[str, _TableRead]) -> None:
        """Keep a read of a database file (one whose pages did not change while it was read) for the next."""
        self._files.pop(path, None)
        if len(self._files) >= self._max_files:
            self._files.pop(next(iter(self._files)))
        self._files[path] = (digests, tables)

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
        read_tables: dict[str, _TableRead] = {}
        rows = _read_rows(db_path, view, memo, leaves, read_tables)
        memo.reads["rows"] += 1
        after = read_view(db_path, memo.pages) if view is not None else None
        if view is not None and after is not None and after.digest == view.digest:  # unchanged while read
            memo.remember(view.digest, rows, leaves)
            memo.keep_read(str(db_path), view.digests, read_tables)
    else:
        memo.reads["reused"] += 1
    tables, keys, shared_canon, meta, live, _, faiss_canon, rebuilt_faiss, derived = rows
    canon: dict[str, Sequence[str]] = dict(shared_canon)  # this state's own: its FAISS part is added below
    live_memories = live.get("memories", [])
    read = _read_faiss(store_dir, int(meta.get("generation", 0)), memo)
    faiss_vectors: Mapping[Any, Any]
    if read is None:  # stale or missing: the engine rebuilds from SQLite on open, so that is the index it will use
        # each live memory's vector, found once per row (`RowMemo.row`), by id: shared by the states of this
        # read, never changed (an id twice: the dict keeps one, and its canonical keys are the dict's)
        faiss_vectors = rebuilt_faiss.get("memories", {})
        canon["faiss"] = faiss_canon.get("memories", [])
    else:
        faiss_vectors, canon["faiss"] = read
    return StoreState(tables=tables, faiss=faiss_vectors, faiss_stale=read is None, canonical_form=canon,
                      key_lists=keys, live_memories=live_memories, derived=dict(derived))


def _read_rows(db_path: Path, view: View | None, memo: RowMemo, leaves: dict[_LeafKey, _LeafRows],
               read_tables: dict[str, _TableRead]) -> _Rows:
    """Every table's rows (as dicts, diff keys and sorted canonical keys) and the meta table.

    A table is read leaf page by leaf page when `view` (the pages this read sees) is known: a table none of
    whose pages changed since the last read of the same file is that read's; of the others, the rows of a leaf
    read before are reused, the others read through SQL; their entries are added to `leaves`, and each table
    so read to `read_tables`. Else, and for a table that is not a plain rowid table, whole through SQL."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    tables: dict[str, Sequence[dict[str, Any]]] = {}
    keys: dict[str, Sequence[str]] = {}
    canon: dict[str, Sequence[str]] = {}
    live: dict[str, Sequence[dict[str, Any]]] = {}
    vectors: dict[str, Sequence[_Vector]] = {}
    faiss_canon: dict[str, Sequence[str]] = {}
    faiss: dict[str, Mapping[Any, bytes]] = {}
    derived: dict[Any, Any] = {}  # `StoreState.derived` memos this read knows: every table's rows have the same
    # columns (one SELECT * of one schema), and the memories by id (updated from the file's last read)
    last = memo.last_read(str(db_path)) if view is not None else None
    changed = changed_pages(last[0], view.digests) if last is not None and view is not None else None
    try:
        schema = db.execute("SELECT name, rootpage, sql FROM sqlite_master WHERE type='table' ORDER BY name").fetchall()
        names = [name for name, _, _ in schema]
        for name, root, sql in schema:
            if name in _IGNORED_TABLES:
                continue
            table: _Table | None = None
            if view is not None:
                before = last[1].get(name) if last is not None else None
                read = _table_by_leaves(db, view, memo, name, root, sql or "", leaves, before, changed)
                if read is not None:
                    read_tables[name] = read
                    table = read.table
            if table is None:
                cursor = db.execute(f'SELECT * FROM "{name}"')
                columns = tuple(d[0] for d in cursor.description)
                table = _assemble([_part([memo.row(name, columns, raw) for raw in cursor.fetchall()])],
                                  by_id=name == "memories")
            tables[name], keys[name], canon[name], live[name], vectors[name] = table[:5]
            faiss[name] = table.faiss
            # not `or []`: a `Lazy`'s truth is its length, which makes it (a copy of every vector by id per read)
            faiss_canon[name] = table.faiss_canon if table.faiss_canon is not None else []
            derived[("uniform", name)] = True
            if table.by_id is not None:
                derived[("by_id", name)] = table.by_id
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in names else {}
    finally:
        db.close()
    return tables, keys, canon, meta, live, vectors, faiss_canon, faiss, derived


def _table_by_leaves(db: sqlite3.Connection, view: View, memo: RowMemo, name: str, root: Any, sql: str,
                     leaves: dict[_LeafKey, _LeafRows], before: _TableRead | None = None,
                     changed: set[int] | None = None) -> _TableRead | None:
    """A rowid table's rows in rowid order, one part per leaf page; None when the table cannot be read so
    (not a rowid b-tree, a page out of place, rowids that are not the page's): the caller reads it whole.

    `before`, `changed`: the table as the last read of the same file read it, and the pages changed since
    (see `_TableRead`): the b-tree is walked again only below the interior pages that changed (`_walk`), and
    of the leaves only those whose page, overflow pages or place changed are looked up again."""
    try:
        root = int(root or 0)
        dirty: set[int] = set()  # the leaves of `before` whose page or overflow pages changed
        if before is not None and changed is not None and before.root == root and before.sql == sql:
            count = len(before.leaves)
            dirty = {i for i in map(before.where.get, changed) if i is not None and i < count}
            if not dirty and not (changed & before.interior):
                return before  # not one of its pages changed
            if not changed & before.interior and all(is_table_leaf(view, before.leaves[i]) for i in dirty):
                return _reread_leaves(db, view, memo, name, sql, leaves, before, sorted(dirty))
            if not all(is_table_leaf(view, before.leaves[i]) for i in dirty if before.leaves[i] in changed):
                before = None  # a changed leaf page is a leaf no more: walked whole
        else:
            before = None
        walked = _walk(view, root, memo.pages.btree, before, changed or set())
        if walked is None:
            return None
        pages, tree = walked
        read_here: dict[_LeafKey, _LeafRows] = {}  # kept only when the whole table reads so
        laid = _lay_out(db, view, memo, name, sql, pages, before, dirty, read_here)
        if laid is None:
            return None
        parts, overflow = laid
        memo.reads["leaves_read"] += len(read_here)
        leaves.update(read_here)
        where = dict(zip(pages, range(len(pages)), strict=True))
        where.update(zip(map(itemgetter(0), chain.from_iterable(overflow)),
                         chain.from_iterable(map(repeat, range(len(pages)), map(len, overflow))), strict=True))
        first, changed_parts = (_common_prefix(before.parts, parts) if before is not None else (0, None))
        return _TableRead(root=root, sql=sql, interior=set(tree.inner.get(root, ())), leaves=pages, where=where,
                          parts=parts, overflow=tuple(overflow),
                          table=_assemble(parts, before, changed_parts, first, by_id=name == "memories"), tree=tree)
    except (ValueError, IndexError, _NotATree):  # a pointer out of the database or a page cut short: not a
        return None  # b-tree we read


class _NotATree(Exception):
    """A page is not a table b-tree page, or one is reached twice."""


def _walk(view: View, root: int, parsed: dict[tuple[bool, bytes], tuple[int, tuple[int, ...]]],
          before: _TableRead | None, changed: set[int]) -> tuple[tuple[int, ...], _Tree] | None:
    """The table's leaf pages in rowid order (as `table_leaves` finds them) and its interior pages' subtrees;
    the subtree of an interior page of `before` that did not change, and under which no interior page
    changed, is `before`'s (O(changed) Python work, the leaves joined at C speed). None: not a table b-tree."""
    hot: set[int] = set()  # the interior pages of `before` that changed, and every one above them
    if before is not None:
        for page in changed & before.interior:
            up: int | None = page
            while up is not None and up not in hot:
                hot.add(up)
                up = before.tree.parent.get(up)
    old = before.tree if before is not None else _Tree({}, {}, {})
    old_where, old_leaves = (before.where, before.leaves) if before is not None else ({}, [])
    below: dict[int, tuple[int, ...]] = {}  # tuples of ints: untracked by the garbage collector
    inner: dict[int, tuple[int, ...]] = {}
    parent: dict[int, int] = {}
    seen: set[int] = set()

    def walk(pgno: int, depth: int) -> tuple[int, ...]:
        if pgno in old.below and pgno not in hot:
            for page in old.inner[pgno]:
                below[page], inner[page] = old.below[page], old.inner[page]
                if page != pgno:
                    parent[page] = old.parent[page]
            return old.below[pgno]
        if pgno in seen or not 1 <= pgno <= view.count or depth > 64:
            raise _NotATree(pgno)
        seen.add(pgno)
        kind, children = btree_page(view, pgno, parsed)
        if kind == LEAF_TABLE:
            return (pgno,)
        if kind != INTERIOR_TABLE:
            raise _NotATree(pgno)
        found: list[int] = []
        mine = [pgno]
        for child in children:
            if child not in changed:  # a leaf of `before`, the same bytes: a leaf still (not parsed again)
                i = old_where.get(child)
                if i is not None and i < len(old_leaves) and old_leaves[i] == child:
                    found.append(child)
                    continue
            found += walk(child, depth + 1)
            if child in inner:
                parent[child] = pgno
                mine += inner[child]
        below[pgno], inner[pgno] = tuple(found), tuple(mine)
        return below[pgno]

    pages = walk(root, 0)
    interior = inner.get(root, ())
    every = set(pages)
    every.update(interior)
    if len(every) != len(pages) + len(interior):
        return None  # a page reached twice (a reused subtree's page is also another's)
    return pages, _Tree(below, inner, parent)


def _lay_out(db: sqlite3.Connection, view: View, memo: RowMemo, name: str, sql: str, pages: Sequence[int],
             before: _TableRead | None, dirty: set[int], read_here: dict[_LeafKey, _LeafRows]
             ) -> tuple[list[_Part], list[tuple[tuple[int, bytes], ...]]] | None:
    """Each leaf page's rows and overflow pages: `before`'s where the leaf is the same page and did not change
    (its leading and trailing leaves, matched at C speed, and any other leaf of `before` not `dirty`), else
    looked up (`_leaf_rows`)."""
    if before is None:
        parts: list[_Part] = []
        overflow: list[tuple[tuple[int, bytes], ...]] = []
        for pgno in pages:
            found = _leaf_rows(db, view, memo, name, sql, pgno, read_here)
            if found is None:
                return None
            overflow.append(found[0])
            parts.append(found[1])
        return parts, overflow
    old = before.leaves
    n, m = len(old), len(pages)
    shared = min(n, m)
    head = next(compress(range(shared), map(operator.ne, old, pages)), shared)
    tail = next(compress(range(shared - head), map(operator.ne, reversed(old), reversed(pages))), shared - head)
    parts = before.parts[:head]
    overflow = list(before.overflow[:head])
    for i in range(head, m - tail):  # the leaves in between: `before`'s when the same page, unchanged
        pgno = pages[i]
        j = before.where.get(pgno)
        if j is not None and j < n and old[j] == pgno and j not in dirty:
            leaf: _LeafRows | None = (before.overflow[j], before.parts[j])
        else:
            leaf = _leaf_rows(db, view, memo, name, sql, pgno, read_here)
        if leaf is None:
            return None
        overflow.append(leaf[0])
        parts.append(leaf[1])
    parts += before.parts[n - tail:]
    overflow += before.overflow[n - tail:]
    for j in dirty:  # the changed leaves among the leading and trailing ones
        if head <= j < n - tail:
            continue  # read above
        i = j if j < head else j + m - n
        leaf = _leaf_rows(db, view, memo, name, sql, pages[i], read_here)
        if leaf is None:
            return None
        overflow[i], parts[i] = leaf
    return parts, overflow


def _reread_leaves(db: sqlite3.Connection, view: View, memo: RowMemo, name: str, sql: str,
                   leaves: dict[_LeafKey, _LeafRows], before: _TableRead, dirty: list[int]) -> _TableRead | None:
    """`before` with the leaves at the `dirty` indices read again (the b-tree's interior pages unchanged, so
    the same leaf pages in the same order)."""
    parts, overflow = list(before.parts), list(before.overflow)
    where = before.where
    read_here: dict[_LeafKey, _LeafRows] = {}
    for i in dirty:
        pgno = before.leaves[i]
        leaf = _leaf_rows(db, view, memo, name, sql, pgno, read_here)
        if leaf is None:
            return None
        overflow[i], parts[i] = leaf
        new_pages = [p for p, _ in leaf[0] if where.get(p) != i]
        if new_pages:  # overflow pages new to it (those no longer its stay mapped: a change there reads it again)
            if where is before.where:
                where = dict(where)  # copied only when some leaf has new overflow pages
            where.update(dict.fromkeys(new_pages, i))
    memo.reads["leaves_read"] += len(read_here)
    leaves.update(read_here)
    changed = ([before.parts[i] for i in dirty], [parts[i] for i in dirty])
    return _TableRead(root=before.root, sql=sql, interior=before.interior, leaves=before.leaves, where=where,
                      parts=parts, overflow=tuple(overflow),
                      table=_assemble(parts, before, changed, len(parts), by_id=name == "memories", dirty=dirty),
                      tree=before.tree)


def _leaf_rows(db: sqlite3.Connection, view: View, memo: RowMemo, name: str, sql: str, pgno: int,
               read_here: dict[_LeafKey, _LeafRows]) -> _LeafRows | None:
    """A leaf page's overflow pages and rows: reused when the same bytes were read before, else read through
    SQL by its rowid range (and added to `read_here`); None when SQL does not give the page's rowids."""
    key = (name, sql, view.page_digest(pgno))
    known = memo.leaf_rows(key, view)
    if known is not None:
        memo.reads["leaves_reused"] += 1
        return known
    cells = leaf_cells(view, pgno)
    read: _Part = ((), (), (), (), ())
    if cells.rowids:
        cursor = db.execute(f'SELECT rowid, * FROM "{name}" WHERE rowid BETWEEN ? AND ? ORDER BY rowid',
                            (cells.rowids[0], cells.rowids[-1]))
        columns = tuple(d[0] for d in cursor.description[1:])
        fetched = cursor.fetchall()
        if {c.lower() for c in columns} & _ROWID_NAMES or [r[0] for r in fetched] != cells.rowids:
            return None  # a column that hides the rowid, or the page and SQL disagree: read it whole
        read = _part([memo.row(name, columns, raw[1:]) for raw in fetched])
    leaf = read_here[key] = (tuple((p, view.page_digest(p)) for p in cells.overflow), read)
    return leaf


def _common_prefix(old: list[_Part], new: list[_Part]) -> tuple[int, tuple[list[_Part], list[_Part]]]:
    """How many leading parts are the same objects in both (compared at C speed: a walked b-tree's unchanged
    leaves are the last read's parts), and (the parts of `old` after them not in `new`'s, those of `new` after
    them not in `old`'s): a table that grows at its end is joined from its last read's lists in O(changed)."""
    shared = min(len(old), len(new))
    first = next(compress(range(shared), map(operator.is_not, old, new)), shared)
    old_tail, new_tail = old[first:], new[first:]
    was, now = set(map(id, old_tail)), set(map(id, new_tail))
    return first, ([p for p in old_tail if id(p) not in now], [p for p in new_tail if id(p) not in was])


def _assemble(parts: list[_Part], before: _TableRead | None = None,
              changed: tuple[list[_Part], list[_Part]] | None = None, first: int = 0, *, by_id: bool = False,
              dirty: Sequence[int] = ()) -> _Table:
    """A table's lists from its leaves' parts, in groups of `_GROUP` leaves (`Chunks`); `before`'s groups kept
    where the leaves are the same pages as its: those wholly before the `first` leaf that changed, but the ones
    holding a `dirty` leaf. Its sorted keys and FAISS vectors are made when first asked for (`Lazy`): from
    `before`'s (the changed leaves' taken out and put in) when those were made and few changed, else whole.
    `changed`: (the parts of `before` no longer there, the parts that are new), when known. `by_id`: the
    memories table: its live rows, their vectors and its rows by id (`rows_by_id`: `ChunkedById`) too."""
    old = before.table if before is not None else None
    all_rows = _grouped(parts, 0, old.rows if old is not None else None, first, dirty)
    live: Chunks[Any] = _NO_ROWS  # only the memories' are read (`live_memories`)
    rows_vectors: Chunks[Any] = _NO_ROWS
    if by_id:
        live = _grouped(parts, 3, old.live if old is not None else None, first, dirty)
        rows_vectors = _grouped(parts, 4, old.vectors if old is not None else None, first, dirty)
    # (each lazy holds its maker and arguments, no `partial` or iterator: a read makes these per changed table)
    keys = Lazy(_joined_keys, parts, 1)  # diff keys: made when a diff is asked for (`_keys`)
    canon = Lazy(_sorted_keys, parts)
    vector_keys = Lazy(_sorted_vector_keys, rows_vectors)
    faiss = LazyMapping(_faiss_of, rows_vectors)
    if before is not None:
        if changed is None:
            now, was = set(map(id, parts)), set(map(id, before.parts))
            changed = [p for p in before.parts if id(p) not in now], [p for p in parts if id(p) not in was]
        gone, new = changed
        old = before.table
        if old.canon.made:  # else made whole if ever asked for: a chain of updates would keep every read alive
            canon = Lazy(_updated_keys, old.canon, tuple(chain.from_iterable(map(itemgetter(2), gone))),
                         tuple(chain.from_iterable(map(itemgetter(2), new))), canon)
        if old.vector_keys.made or old.faiss.made:
            gone_vectors = tuple(chain.from_iterable(map(itemgetter(4), gone)))
            new_vectors = tuple(chain.from_iterable(map(itemgetter(4), new)))
            if old.vector_keys.made:
                vector_keys = Lazy(_updated_keys, old.vector_keys, tuple(map(itemgetter(2), gone_vectors)),
                                   tuple(map(itemgetter(2), new_vectors)), vector_keys)
            if old.faiss.made:
                faiss = LazyMapping(_updated_faiss, old.faiss, old.vectors, gone_vectors, new_vectors, rows_vectors)
    ids: Mapping[Any, dict[str, Any]] | None = None
    if by_id:
        ids = ChunkedById.of(all_rows)
        if ids is None:  # ids that are not distinct integers increasing from leaf to leaf: the last row of an id
            ids = dict(zip(map(dict.get, all_rows, repeat("id")), all_rows, strict=True))
    faiss_canon = Lazy(_faiss_keys, faiss, rows_vectors, vector_keys)
    return _Table(all_rows, keys, canon, live, rows_vectors, vector_keys, faiss, ids, faiss_canon)


_NO_ROWS: Chunks[Any] = Chunks()  # a table's live rows and vectors when they are not kept (read-only: shared)
_GROUP = 64  # leaves per chunk of a table's rows: few chunks per read, few rows joined again per changed leaf


def _grouped(parts: list[_Part], at: int, old: Chunks[Any] | None, first: int, dirty: Sequence[int]) -> Chunks[Any]:
    """The `at`-th list of every part, joined `_GROUP` parts to a chunk: `old`'s chunks kept up to the one
    holding part `first` (the parts before it the same objects as `old`'s), but those holding a `dirty` part."""
    keep = min(first // _GROUP, len(old.chunks)) if old is not None else 0
    chunks: list[Sequence[Any]] = list(old.chunks[:keep]) if old is not None else []
    chunks += [_group(parts, at, g) for g in range(keep, -(-len(parts) // _GROUP))]
    for g in {i // _GROUP for i in dirty}:
        if g < keep:
            chunks[g] = _group(parts, at, g)
    return Chunks(chunks)


def _group(parts: list[_Part], at: int, g: int) -> tuple[Any, ...]:
    """A tuple: a chunk of vectors (tuples of bytes and strings) is then untracked by the garbage collector."""
    return tuple(chain.from_iterable(map(itemgetter(at), parts[g * _GROUP:(g + 1) * _GROUP])))


class _Made:
    """What `Lazy` and `LazyMapping` share: a value made by `make` when first read, then kept; equal at once to
    itself, else compared as the value it stands for (with its own kind or a plain one of the value's type)."""

    __slots__ = ("_args", "_make", "_value")
    _plain: type = object  # the value's type: a plain one of it compares as the value

    def __init__(self, make: Callable[..., Any], *args: Any):
        self._make: Callable[..., Any] | None = make
        self._args: tuple[Any, ...] = args  # `make`'s arguments, dropped once made
        self._value: Any = None

    @property
    def made(self) -> bool:
        return self._value is not None

    @property
    def value(self) -> Any:
        if self._value is None:
            assert self._make is not None
            self._value, self._make, self._args = self._make(*self._args), None, ()
        return self._value

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, type(self)):
            return bool(self.value == other.value)
        return bool(self.value == other) if isinstance(other, self._plain) else NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.value)


class Lazy(_Made, Sequence[Any]):
    """A list made when first read, then kept: a table's sorted canonical keys, its diff keys.

    Why: a long case reads its store after every write, and most reads are compared only with a read of the
    same database (an idempotent replay changes nothing), whose lists are the same objects: equal at once
    (`==` on the same object), so sorting or copying O(rows) keys per read was wasted. Compared with anything
    else, it is made and compared as the list it stands for."""

    __slots__ = ()
    _plain = list

    def __len__(self) -> int:
        return len(self.value)

    def __getitem__(self, at: Any) -> Any:
        return self.value[at]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.value)


class LazyMapping(_Made, Mapping[Any, Any]):
    """A dict made when first read, then kept: the FAISS vectors by id an index rebuilt from SQLite holds (see
    `Lazy`: most reads never look at them)."""

    __slots__ = ()
    _plain = dict

    def __getitem__(self, key: Any) -> Any:
        return self.value[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.value)

    def __len__(self) -> int:
        return len(self.value)

    def __contains__(self, key: object) -> bool:
        return key in self.value


def _joined_keys(parts: list[_Part], at: int) -> list[str]:
    return list(chain.from_iterable(map(itemgetter(at), parts)))


def _sorted_keys(parts: list[_Part]) -> list[str]:
    return sorted(chain.from_iterable(map(itemgetter(2), parts)))


def _updated_keys(old: Lazy, removed: Sequence[str], added: Sequence[str], whole: Lazy) -> list[str]:
    """`old`'s sorted keys with `removed` taken out and `added` put in; `whole`'s when many changed."""
    updated = _resorted(old.value, removed, added)
    return updated if updated is not None else whole.value


def _sorted_vector_keys(vectors: Sequence[_Vector]) -> list[str]:
    return sorted(map(itemgetter(2), vectors))


def _faiss_of(vectors: Sequence[_Vector]) -> dict[Any, bytes]:
    return dict(zip(map(itemgetter(0), vectors), map(itemgetter(1), vectors), strict=True))


def _updated_faiss(old: LazyMapping, old_vectors: Sequence[_Vector], gone: Sequence[_Vector], new: Sequence[_Vector],
                   vectors: Sequence[_Vector]) -> dict[Any, bytes]:
    """`old`'s vectors by id with `gone`'s ids taken out and `new`'s put in; made whole when an id is there twice
    (the dict keeps the last, as one made whole does)."""
    if len(old) != len(old_vectors):
        return _faiss_of(vectors)
    faiss = dict(old.value)
    for vector in gone:
        del faiss[vector[0]]
    faiss.update((vector[0], vector[1]) for vector in new)
    return faiss if len(faiss) == len(vectors) else _faiss_of(vectors)


def _faiss_keys(faiss: LazyMapping, vectors: Sequence[_Vector], vector_keys: Lazy) -> list[str]:
    """The FAISS part of `canonical` for an index rebuilt from these rows: their vectors' sorted keys, or the
    dict's when an id is there twice (it keeps one)."""
    return vector_keys.value if len(faiss) == len(vectors) else _faiss_canonical(faiss)


def _resorted(old: list[str], removed: Any, added: Any) -> list[str] | None:
    """The sorted list `old` with the keys `removed` taken out and `added` put in (as multisets), or None
    when many changed (sorting whole is then as cheap) or a removed key is not in `old`."""
    out_, in_ = Counter(removed), Counter(added)
    out_, in_ = out_ - in_, in_ - out_  # the leaves read again mostly hold the same rows
    if sum(out_.values()) + sum(in_.values()) > max(32, len(old) // 32):
        return None
    result = list(old)
    for key, n in out_.items():
        for _ in range(n):
            i = bisect_left(result, key)
            if i == len(result) or result[i] != key:
                return None
            del result[i]
    for key, n in in_.items():
        for _ in range(n):
            insort(result, key)
    return result


def _part(rows: list[_Row]) -> _Part:
    return (tuple([r[0] for r in rows]), tuple([r[1] for r in rows]), tuple([r[2] for r in rows]),
            tuple([r[0] for r in rows if r[3]]), tuple([r[4] for r in rows if r[4] is not None]))


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


def _faiss_canonical(vectors: Mapping[Any, Any]) -> list[str]:
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
    """Each table's diff keys: made when a diff is asked for (most reads are only compared canonically)."""
    if state.row_keys is None:
        state.row_keys = ({t: set(keys) for t, keys in state.key_lists.items()} if state.key_lists is not None
                          else {t: {_row_key(r) for r in rows} for t, rows in state.tables.items()})
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


def canonical(state: StoreState) -> dict[str, Sequence[str]]:
    """The logical content with ids, timestamps, request ids and payloads left out (for retry equivalence).

    Memoised on the state: a write's pre- and post-control states are compared once per fault.
    """
    if state.canonical_form is not None:
        return state.canonical_form
    out: dict[str, Sequence[str]] = {table: sorted(_canonical_row_key(row) for row in rows)
                                     for table, rows in state.tables.items()}
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


def rows_by_id(state: StoreState, table: str = "memories") -> Mapping[Any, dict[str, Any]]:
    """A table's rows by their `id` (the last row of an id, in table order), made once per state at C speed:
    the checks of a write look rows up in the states before and after it."""
    key = ("by_id", table)
    if key not in state.derived:
        rows = state.tables.get(table, [])
        state.derived[key] = dict(zip(map(dict.get, rows, repeat("id")), rows, strict=True))
    return state.derived[key]


def all_have(state: StoreState, table: str, columns: tuple[str, ...]) -> bool:
    """Whether every row of `table` has each of `columns` (once per state, at C speed)."""
    key = ("all_have", table, columns)
    if key not in state.derived:
        rows = state.tables.get(table, [])
        if state.derived.get(("uniform", table)):  # every row has the same columns (`read_state`)
            state.derived[key] = not rows or all(c in rows[0] for c in columns)
        else:
            state.derived[key] = all(all(map(operator.contains, rows, repeat(c))) for c in columns)
    return state.derived[key]


def user_live_memories(state: StoreState, user_id: str) -> Sequence[dict[str, Any]]:
    """The user's live memory rows of the state, in the table's order (once per state: from a read's chunks,
    each chunk's rows found once per chunk, `ChunkMemo`; else at C speed, from the first row that is not the
    last state's read: `ListMemo`)."""
    key = ("user_live", user_id)
    if key not in state.derived:
        live = live_memories(state)
        if isinstance(live, Chunks):
            state.derived[key] = Chunks([_USER_ROWS.of(chunk, user_id) for chunk in live.chunks])
            return state.derived[key]
        start, at, rows = 0, [], []  # from the last state's list: the rows before `start` are its objects
        hit = _USER_LIVE.last(user_id, live)
        if hit is not None:
            start, _, (old_at, old_rows) = hit
            kept = bisect_left(old_at, start)
            at, rows = old_at[:kept], old_rows[:kept]
        mine = list(compress(range(start, len(live)), map(operator.eq, map(dict.get, live[start:], repeat("user_id")),
                                                          repeat(user_id))))
        at += mine
        rows += map(live.__getitem__, mine)
        _USER_LIVE.keep(user_id, live, (at, list(rows)))
        state.derived[key] = rows
    return state.derived[key]


# the last live rows `user_live_memories` read per user: (positions of the user's rows in them, those rows)
_USER_LIVE: ListMemo[tuple[list[int], list[dict[str, Any]]]] = ListMemo()


def _user_rows(chunk: Sequence[dict[str, Any]], user_id: str) -> list[dict[str, Any]]:
    return list(compress(chunk, map(operator.eq, map(dict.get, chunk, repeat("user_id")), repeat(user_id))))


# each chunk of live rows' rows of a user (`user_live_memories`)
_USER_ROWS: ChunkMemo[list[dict[str, Any]]] = ChunkMemo(_user_rows)


def changed_row_ids(before: StoreState, after: StoreState, table: str = "memories") -> set[Any]:
    """A superset of the ids whose row (as `rows_by_id` gives it) is not the same object in both states: the
    ids of the rows in the chunks the two tables do not share (`differing_items`; for plain lists, at the
    positions where they hold different objects and past the shorter one's end). The rows a read reuses are
    the same objects in the same chunks, so a write's changed rows are found in O(changed) Python work."""
    old, new = differing_items(before.tables.get(table, []), after.tables.get(table, []))
    return set(map(dict.get, old + new, repeat("id")))


def live_memories(state: StoreState) -> Sequence[dict[str, Any]]:
    """The state's live memory rows: found once per distinct leaf page by `read_state`, else here."""
    if state.live_memories is None:
        state.live_memories = [row for row in state.tables.get("memories", []) if is_live(row)]
    return state.live_memories
