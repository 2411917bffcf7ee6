"""The FAISS index, derived from SQLite: built from the live rows, loaded only if it matches them, persisted.

The index file is persisted together with a sidecar holding the SQLite `generation` it reflects and a
checksum. The sidecar is removed before the index file is replaced and written after it, so a crash
anywhere in between leaves no valid sidecar and the next open rebuilds from SQLite.

On open the file is trusted only if its (id, vector) pairs also hash to the checksum of the live vectors
that SQLite keeps (`meta.vectors_checksum`, moved inside every write transaction): a file written by
another process (a forked child, a copied directory) with the right generation and a valid sidecar but
other vectors is rebuilt.
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from hymem.failpoints import failpoint
from hymem.store._schema import LIVE
from hymem.store._vectors import checksum_of, from_blob

INDEX_FILE = "hymem.faiss"
SIDECAR_FILE = "hymem.faiss.json"  # generation, dim, size and crc32 of INDEX_FILE


def _live_vectors(conn: sqlite3.Connection, dim: int) -> Iterator[tuple[int, np.ndarray]]:
    cur = conn.execute(f"SELECT id, vector FROM memories WHERE {LIVE} ORDER BY id")
    while rows := cur.fetchmany(4096):
        for mid, blob in rows:
            yield mid, from_blob(blob, dim, mid)


def build_index(conn: sqlite3.Connection, dim: int) -> faiss.IndexIDMap2:
    """A fresh index of every live memory's vector, keyed by memory id."""
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    ids: list[int] = []
    vecs: list[np.ndarray] = []
    for mid, vec in _live_vectors(conn, dim):
        ids.append(mid)
        vecs.append(vec)
        if len(ids) >= 4096:
            index.add_with_ids(np.stack(vecs), np.asarray(ids, dtype=np.int64))
            ids, vecs = [], []
    if ids:
        index.add_with_ids(np.stack(vecs), np.asarray(ids, dtype=np.int64))
    return index


def load_index(directory: Path, conn: sqlite3.Connection, dim: int,
               generation: int) -> tuple[faiss.IndexIDMap2 | None, str | None]:
    """The persisted index if it is exactly the one SQLite implies, else (None, why not)."""
    index_path, sidecar_path = directory / INDEX_FILE, directory / SIDECAR_FILE
    if not index_path.exists():
        return None, "index file missing"
    try:
        sidecar = json.loads(sidecar_path.read_text())
        file_gen, file_dim, size, crc = (int(sidecar[k]) for k in ("generation", "dim", "size", "crc32"))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"sidecar missing or unreadable ({type(e).__name__})"
    if file_gen != generation:
        return None, f"stale index (file generation {file_gen}, SQLite generation {generation})"
    if file_dim != dim:
        return None, f"index dim {file_dim} != {dim}"
    data = index_path.read_bytes()
    if len(data) != size or zlib.crc32(data) != crc:
        return None, "index file does not match its checksum"
    try:
        index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
    except RuntimeError as e:
        return None, f"index file unreadable ({e})"
    if not isinstance(index, faiss.IndexIDMap2) or index.d != dim:
        return None, f"index file holds a {type(index).__name__} of dim {index.d}"
    ids = faiss.vector_to_array(index.id_map)
    vectors = index.index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, dim), np.float32)
    recorded = conn.execute("SELECT value FROM meta WHERE key = 'vectors_checksum'").fetchone()
    if recorded is None or checksum_of(zip(ids.tolist(), map(bytes, vectors), strict=True)) != recorded[0]:
        return None, "index vectors do not match the checksum of the live vectors recorded in SQLite"
    file_ids = np.sort(ids)
    live_ids = np.fromiter(
        (r[0] for r in conn.execute(f"SELECT id FROM memories WHERE {LIVE} ORDER BY id")), dtype=np.int64)
    if not np.array_equal(file_ids, live_ids):
        return None, "index ids differ from live rows"
    return index, None


def persist_index(directory: Path, index: faiss.IndexIDMap2, generation: int, dim: int) -> None:
    """Write the index and then its sidecar; a crash in between leaves no valid sidecar, so a rebuild."""
    data = faiss.serialize_index(index)
    (directory / SIDECAR_FILE).unlink(missing_ok=True)
    _atomic_write(directory / INDEX_FILE, data)
    failpoint("store.persist")
    sidecar = {"generation": generation, "dim": dim, "size": int(data.nbytes),
               "crc32": zlib.crc32(data), "ntotal": int(index.ntotal)}
    _atomic_write(directory / SIDECAR_FILE, json.dumps(sidecar).encode())


def apply_changes(index: faiss.IndexIDMap2, changes: dict[int, np.ndarray | None]) -> None:
    """Bring the touched ids to their committed state: removed, then re-added when live."""
    if not changes:
        return
    index.remove_ids(np.fromiter(changes, dtype=np.int64, count=len(changes)))
    failpoint("store.faiss_update")
    added = [(mid, vec) for mid, vec in changes.items() if vec is not None]
    if added:
        index.add_with_ids(np.stack([v for _, v in added]), np.asarray([m for m, _ in added], np.int64))


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
