"""The store: SQLite is the source of truth, FAISS an index derived from it.

Every memory's vector lives in SQLite as a float32 BLOB, so the FAISS index can
always be rebuilt from SQLite alone. A write is one SQLite transaction; the
FAISS changes it recorded are applied only after COMMIT. If that FAISS update
fails, the write still happened and the index is rebuilt from SQLite. Hence the
one rule callers rely on: `store.write()` raises if and only if nothing was committed.

The FAISS file is persisted lazily (on close, and every `persist_every` commits or a tenth of its
rows in commits, whichever is more),
together with a sidecar holding the SQLite `generation` it reflects (bumped in
every write transaction) and a checksum. On open a missing, stale, corrupt or
mismatching file is rebuilt from SQLite, so a `kill -9` at any point of a write
leaves a consistent store in which the write happened entirely or not at all.

Concurrency: one SQLite connection and one FAISS index behind one re-entrant
lock; a write holds it from BEGIN to the FAISS update, so transactions never
interleave and readers in other threads only ever see committed state. A reader
in the thread that holds an open write sees that write's uncommitted rows.
A lock file keeps a second Store (in any process) off the same directory.

Search is exact, except in a group of one user's memories of one kind past `_ann.ANN_MIN_ROWS` (4,096) live
rows: there a small-k search ranks candidates by a sign sketch and scores them exactly, and may miss a true
neighbour (recall measured in BENCHMARKS.md, issue 35). The sketch's centre is written in the write's own
transaction, so SQLite alone still determines every answer.

Durability: WAL with `synchronous=NORMAL` by default, durable against application crashes, not power loss
(`synchronous="FULL"` for that); see `Store`.

Modules: `_schema` (named migrations), `_vectors` (checks and BLOBs), `_index` (FAISS build, load,
persist), `_ann` (the sign sketch of large groups), `_tx` (WriteTx), `_store` (Store). All log to the one
logger `hymem.store`.
"""

from __future__ import annotations

from hymem.store._index import INDEX_FILE, SIDECAR_FILE, VectorIndex, rebuilt_index
from hymem.store._schema import DB_FILE, MIGRATIONS, m001_initial
from hymem.store._store import LOCK_FILE, DimensionMismatchError, Store, StoreForkedError, StoreLockedError
from hymem.store._tx import WriteTx

__all__ = [
    "DB_FILE",
    "INDEX_FILE",
    "LOCK_FILE",
    "MIGRATIONS",
    "SIDECAR_FILE",
    "DimensionMismatchError",
    "Store",
    "StoreForkedError",
    "StoreLockedError",
    "VectorIndex",
    "WriteTx",
    "m001_initial",
    "rebuilt_index",
]
