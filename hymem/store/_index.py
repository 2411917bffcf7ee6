"""The vector index, derived from SQLite: built from the live rows, loaded only if it matches them, persisted.

In memory the live vectors are grouped by (user, kind), each group a dense float32 matrix with an
id → row map. A search scores only the searched user's rows, and a write touches only the rows it changes
(a removal moves the group's last row into the hole), so neither depends on how many memories the store
holds. A group of thousands of rows also keeps a float16 copy that a search reads first (`_Group`), with answers
equal to the exact scan's; past `_ann.ANN_MIN_ROWS` rows it also keeps a sign sketch per row, and a small-k search
there is approximate (`_ann`). On disk the index is one FAISS `IndexIDMap2(IndexFlatIP)` of every live vector, keyed
by memory id.

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
import logging
import os
import sqlite3
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from hymem.failpoints import failpoint
from hymem.store._ann import CENTRE_PREFIX, Centre, candidates, code_bytes, key_of, nearest_rows, sketch, sketch_one
from hymem.store._schema import DB_FILE, LIVE
from hymem.store._vectors import checksum_of, from_blob

_log = logging.getLogger("hymem.store")

INDEX_FILE = "hymem.faiss"
SIDECAR_FILE = "hymem.faiss.json"  # generation, dim, size and crc32 of INDEX_FILE


_SCAN_ROWS = 2048  # up to this many rows a group is scanned exactly; above, a float16 copy is searched first
_HALF_RANGE = 60000.0  # a row whose norm reaches this could overflow float16 (65504): its group is only scanned
_FAISS_SPECIAL_DIMS = (1, 2, 4, 8, 12)  # FAISS sums these dims' rows differently by their position in the batch


class _Group:
    """One user's live vectors of one kind: a dense matrix (grown by doubling) and an id → row map.

    A group of more than `_SCAN_ROWS` rows also keeps a float16 copy of its matrix inside a FAISS scalar-quantizer
    index: a search reads that half-size copy for candidates, rescores them in float32, and returns them only when
    no row left out can beat them (an error bound), else it scans every row. So the answer is the exact scan's,
    at about half the memory traffic: the one cost of a write that grows with the writer's memories."""

    __slots__ = ("centre", "codes", "half", "half_codes", "ids", "n", "norms", "rows", "vectors")

    def __init__(self, dim: int, capacity: int = 4):
        self.vectors = np.empty((capacity, dim), dtype=np.float32)
        self.ids = np.empty(capacity, dtype=np.int64)
        self.norms = np.empty(capacity, dtype=np.float64)  # each row's norm, for the float16 error bound
        self.rows: dict[int, int] = {}
        self.n = 0
        self.half: faiss.IndexScalarQuantizer | None = None  # built on the first search above _SCAN_ROWS
        self.half_codes = np.empty((0, dim), dtype=np.float16)  # a view of `half`'s codes, row for row
        self.centre: Centre | None = None  # set past ANN_MIN_ROWS: then `codes` holds each row's sign sketch
        self.codes = np.empty((0, 0), dtype=np.uint8)

    def add(self, memory_id: int, vector: np.ndarray) -> None:
        if self.n == len(self.ids):
            self.vectors = np.concatenate([self.vectors, np.empty_like(self.vectors)])
            self.ids = np.concatenate([self.ids, np.empty_like(self.ids)])
            self.norms = np.concatenate([self.norms, np.empty_like(self.norms)])
            if self.centre is not None:
                self.codes = np.concatenate([self.codes, np.empty_like(self.codes)])
            if self.half is not None:
                self._resize_half()
        row = self.n
        self.vectors[row], self.ids[row] = vector, memory_id
        if self.centre is not None:
            self.codes[row] = sketch_one(self.vectors[row], self.centre.vector)
        self.norms[row] = _norms(self.vectors[row : row + 1])[0]
        if self.half is not None:
            if self.norms[row] < _HALF_RANGE:
                self.half_codes[row] = self.vectors[row]
                self.half.ntotal = row + 1
            else:  # dropped; rebuilt on a later search once no such row is left
                self.half = None
        self.rows[memory_id] = row
        self.n += 1

    def remove(self, memory_id: int) -> None:
        row, last = self.rows.pop(memory_id), self.n - 1
        if row != last:
            moved = int(self.ids[last])
            self.vectors[row], self.ids[row], self.norms[row] = self.vectors[last], moved, self.norms[last]
            if self.centre is not None:
                self.codes[row] = self.codes[last]
            if self.half is not None:
                self.half_codes[row] = self.half_codes[last]
            self.rows[moved] = row
        self.n = last
        if self.half is not None:
            self.half.ntotal = last

    def set_centre(self, centre: Centre | None) -> None:
        """Start (or, with a new centre, redo; with None, stop) keeping every row's sign sketch."""
        self.centre = centre
        if centre is None:
            self.codes = np.empty((0, 0), dtype=np.uint8)
            return
        self.codes = np.empty((len(self.ids), code_bytes(self.vectors.shape[1])), dtype=np.uint8)
        self.codes[: self.n] = sketch(self.vectors[: self.n], centre.vector)

    def top(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids, scores) of the k best rows by inner product, and of every row tied with the k-th, unordered; the
        scores are the exact scan's. A group with a sketch centre answers a small k approximately (`_ann`)."""
        query = np.ascontiguousarray(query, dtype=np.float32)
        if self.centre is not None and 16 * k < self.n:
            return self._top_through_sketch(query, k)
        if self.n > _SCAN_ROWS and self.n > 8 * k:
            found = self._top_through_half(query, k)
            if found is not None:
                return found
        scores = _inner_products(self.vectors, query, self.n)
        if self.n > k:
            best = _best(scores, k)
            return self.ids[best], scores[best]
        return self.ids[: self.n].copy(), scores

    def _top_through_sketch(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best k (and ties) of the rows nearest the query by sign sketch, scored exactly (approximate)."""
        assert self.centre is not None
        rows = nearest_rows(self.codes[: self.n], sketch_one(query, self.centre.vector), candidates(k))
        scores = _inner_products_at(self.vectors, query, rows)
        if len(rows) > k:
            best = _best(scores, k)
            return self.ids[rows[best]], scores[best]
        return self.ids[rows], scores

    def _top_through_half(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The exact top k from the float16 copy's best 8k rescored, or None when a row outside them could win."""
        max_norm = float(self.norms[: self.n].max())
        if self.half is None and max_norm < _HALF_RANGE:
            self._resize_half()
        if self.half is None:  # a component could overflow float16: scan
            return None
        wanted = 8 * k
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)  # this thread only: an idle OpenMP team spins on a loaded machine
        try:
            approx, rows = self.half.search(query[None, :], wanted)
        finally:
            faiss.omp_set_num_threads(threads)
        rows = rows[0]
        if rows[-1] < 0:  # fewer rows than asked for: cannot happen above 8k rows, scan to be safe
            return None
        exact = _inner_products(self.vectors[rows], query, wanted)
        best = _best(exact, k)
        # |float16 score - exact score| <= |q . (v - half(v))| + both sums' float32 rounding and underflow
        #   <= (2^-11 + 2 d 2^-24) |q| |v| + 2^-24 |q|_1 + d 2^-148
        # (2^-24: float16's subnormal spacing; 2^-149: float32's, once per product in each sum, doubled for margin).
        # Norms in float64, so a tiny query's norm does not round to 0. A row left out has a float16 score
        # <= approx[-1], so an exact score <= approx[-1] + bound: below the k-th candidate's (strictly, so no tie
        # either) means the candidates hold the exact answer. A NaN anywhere fails the test: scan.
        dim = self.vectors.shape[1]
        q64 = query.astype(np.float64)
        bound = ((2.0**-11 + 2 * dim * 2.0**-24) * float(np.sqrt(q64 @ q64)) * max_norm
                 + 2.0**-24 * float(np.abs(q64).sum()) + dim * 2.0**-148)
        if not float(approx[0, -1]) + bound < float(exact[best].min()):
            return None
        return self.ids[rows[best]], exact[best]

    def _resize_half(self) -> None:
        """(Re)build the float16 index to the matrix's capacity, holding the live rows."""
        dim = self.vectors.shape[1]
        if self.half is None:
            self.half = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        capacity = len(self.ids)
        self.half.codes.resize(capacity * self.half.code_size)
        self.half_codes = faiss.rev_swig_ptr(self.half.codes.data(), capacity * self.half.code_size).view(
            np.float16).reshape(capacity, dim)
        self.half_codes[: self.n] = self.vectors[: self.n]
        self.half.ntotal = self.n


def _norms(matrix: np.ndarray) -> np.ndarray:
    """Each row's norm in float64 (a float32 norm can round below the true one, or to 0 for tiny vectors)."""
    return np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))


def _best(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best scores and of every score tied with the k-th (the caller breaks ties by id).
    A NaN score (an overflowed product) ranks below every number, as the caller's sort puts it."""
    ranked = np.where(np.isnan(scores), -np.inf, scores)
    kth = ranked[np.argpartition(-ranked, k - 1)[k - 1]]
    return np.flatnonzero(ranked >= kth)


def _inner_products(matrix: np.ndarray, query: np.ndarray, n: int) -> np.ndarray:
    """Inner products of the first n rows with the query, each row's independent of its position (so a vector
    scores the same wherever it sits, and ties stay ties): FAISS's single-threaded SIMD kernel, not `@` (BLAS's
    threaded matrix-vector product spins its threads and costs 10-50x more on a loaded 2-core machine) nor
    `einsum` (single-threaded but about 1.7x slower), except for the few dims FAISS sums by position."""
    if matrix.shape[1] in _FAISS_SPECIAL_DIMS:
        return np.einsum("ij,j->i", matrix[:n], query)
    scores = np.empty(n, dtype=np.float32)
    faiss.fvec_inner_products_ny(faiss.swig_ptr(scores), faiss.swig_ptr(query), faiss.swig_ptr(matrix),  # type: ignore[attr-defined]  # SWIG, no stub
                                 matrix.shape[1], n)
    return scores


def _inner_products_at(matrix: np.ndarray, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`_inner_products` of the given rows only, read in place (no copy of the rows): FAISS's by-index loop runs
    the same per-row kernel as `fvec_inner_products_ny`, so a row scores the same as in the exact scan."""
    if matrix.shape[1] in _FAISS_SPECIAL_DIMS:
        return _inner_products(np.ascontiguousarray(matrix[rows]), query, len(rows))
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    scores = np.empty(len(rows), dtype=np.float32)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # its loop over queries is an OpenMP one, even for our one query
    try:
        faiss.fvec_inner_products_by_idx(faiss.swig_ptr(scores), faiss.swig_ptr(query), faiss.swig_ptr(matrix),  # type: ignore[attr-defined]  # SWIG, no stub
                                         faiss.swig_ptr(rows), matrix.shape[1], 1, len(rows))
    finally:
        faiss.omp_set_num_threads(threads)
    return scores


class VectorIndex:
    """Every live memory's vector, grouped by (user, kind)."""

    def __init__(self, dim: int):
        self.d = dim
        self._groups: dict[tuple[str, str], _Group] = {}
        self._where: dict[int, tuple[str, str]] = {}  # memory id -> its group's key
        self._centres: dict[tuple[str, str], Centre] = {}  # SQLite's sketch centres, kept while a group is empty

    @property
    def ntotal(self) -> int:
        return len(self._where)

    def __contains__(self, memory_id: int) -> bool:
        return memory_id in self._where

    def add(self, memory_id: int, user_id: str, kind: str, vector: np.ndarray) -> None:
        if memory_id in self._where:
            raise ValueError(f"memory {memory_id} is already in the index")
        key = (user_id, kind)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(self.d)
            group.set_centre(self._centres.get(key))
        group.add(memory_id, vector)
        self._where[memory_id] = key

    def remove(self, memory_id: int) -> None:
        key = self._where.pop(memory_id)
        group = self._groups[key]
        group.remove(memory_id)
        if group.n == 0:
            del self._groups[key]

    def search(self, user_id: str, query: np.ndarray, k: int, kinds: Iterable[str]) -> list[tuple[int, float]]:
        """The user's k best (id, score) among the given kinds, best first; ties go to the lower id."""
        found = [self._groups[(user_id, kind)].top(query, k) for kind in kinds if (user_id, kind) in self._groups]
        if not found:
            return []
        ids = np.concatenate([f[0] for f in found])
        scores = np.concatenate([f[1] for f in found])
        order = np.lexsort((ids, -scores))[:k]
        return [(int(ids[i]), float(scores[i])) for i in order]

    def centre(self, key: tuple[str, str]) -> Centre | None:
        """The (user_id, kind) group's sketch centre, or None (exact search only)."""
        return self._centres.get(key)

    def centres(self) -> dict[tuple[str, str], Centre]:
        return dict(self._centres)

    def set_centre(self, key: tuple[str, str], centre: Centre) -> None:
        """Give the group a (new) sketch centre: every row's sketch is recomputed."""
        self._centres[key] = centre
        if key in self._groups:
            self._groups[key].set_centre(centre)

    def group_size(self, key: tuple[str, str]) -> int:
        group = self._groups.get(key)
        return 0 if group is None else group.n

    def group_members(self, key: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, vectors) of the group's live rows (views: copy before the index changes)."""
        group = self._groups.get(key)
        if group is None:
            return np.empty(0, dtype=np.int64), np.empty((0, self.d), dtype=np.float32)
        return group.ids[: group.n], group.vectors[: group.n]

    def sketch_problems(self) -> list[str]:
        """Groups whose rows' sketches differ from their vectors' under the group's centre."""
        problems = []
        for key, group in self._groups.items():
            if group.centre is not self._centres.get(key):
                problems.append(f"group {key} does not use the sketch centre recorded for it")
            elif group.centre is not None and not np.array_equal(
                    group.codes[: group.n], sketch(group.vectors[: group.n], group.centre.vector)):
                problems.append(f"group {key}: a row's sketch differs from its vector's")
        return problems

    def vector(self, memory_id: int) -> np.ndarray | None:
        key = self._where.get(memory_id)
        if key is None:
            return None
        group = self._groups[key]
        return group.vectors[group.rows[memory_id]]

    def ids(self) -> list[int]:
        return list(self._where)

    def placement(self, memory_id: int) -> tuple[str, str] | None:
        """(user_id, kind) the memory's vector is filed under, or None."""
        return self._where.get(memory_id)

    def to_faiss(self) -> faiss.IndexIDMap2:
        """One FAISS index of every vector, in id order (the on-disk form)."""
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(self.d))
        if self._where:
            ids = np.concatenate([g.ids[: g.n] for g in self._groups.values()])
            vectors = np.concatenate([g.vectors[: g.n] for g in self._groups.values()])
            order = np.argsort(ids, kind="stable")
            index.add_with_ids(np.ascontiguousarray(vectors[order]), ids[order])
        return index

    @classmethod
    def from_rows(cls, dim: int, rows: Iterable[tuple[int, str, str, np.ndarray]],
                  centres: dict[tuple[str, str], Centre] | None = None) -> VectorIndex:
        """An index of (id, user_id, kind, vector) rows, each group sized to fit, with SQLite's sketch centres."""
        by_key: dict[tuple[str, str], list[tuple[int, np.ndarray]]] = {}
        for mid, user_id, kind, vector in rows:
            by_key.setdefault((user_id, kind), []).append((mid, vector))
        index = cls(dim)
        index._centres = dict(centres or {})
        for key, members in by_key.items():
            group = _Group(dim, capacity=max(4, len(members)))
            group.vectors[: len(members)] = np.stack([v for _, v in members])
            group.ids[: len(members)] = [m for m, _ in members]
            group.rows = {m: row for row, (m, _) in enumerate(members)}
            group.n = len(members)
            group.norms[: group.n] = _norms(group.vectors[: group.n])
            group.set_centre(index._centres.get(key))
            index._groups[key] = group
            index._where.update(dict.fromkeys(group.rows, key))
        return index


def _live_rows(conn: sqlite3.Connection, dim: int) -> Iterator[tuple[int, str, str, np.ndarray]]:
    cur = conn.execute(f"SELECT id, user_id, kind, vector FROM memories WHERE {LIVE} ORDER BY id")
    while rows := cur.fetchmany(4096):
        for mid, user_id, kind, blob in rows:
            yield mid, user_id, kind, from_blob(blob, dim, mid)


def read_centres(conn: sqlite3.Connection, dim: int) -> dict[tuple[str, str], Centre]:
    """The sketch centres SQLite records (`meta` rows "ann:[user_id, kind]"); a row that does not decode to this
    dim is skipped (its group is searched exactly), the same way on every open."""
    centres = {}
    for key, value in conn.execute("SELECT key, value FROM meta WHERE substr(key, 1, ?) = ?",
                                   (len(CENTRE_PREFIX), CENTRE_PREFIX)):
        try:
            centres[key_of(key)] = Centre.from_meta(value, dim)
        except (ValueError, KeyError, TypeError) as e:
            _log.warning("ignoring sketch centre %s: %s", key, e)
    return centres


def build_index(conn: sqlite3.Connection, dim: int) -> VectorIndex:
    """A fresh index of every live memory's vector."""
    return VectorIndex.from_rows(dim, _live_rows(conn, dim), read_centres(conn, dim))


def rebuilt_index(directory: Path, dim: int) -> VectorIndex:
    """The index an open of this closed store rebuilds when its index file is missing or refused (`build_index`
    over the live rows), read through a read-only connection: no row, index file or lock is written (SQLite's
    reader may leave an empty `-wal` and its `-shm`, as any reader of a WAL database does).

    Why: a harness comparing a reopened index with the one SQLite implies gets the engine's own rebuild without
    copying the store and opening the copy."""
    conn = sqlite3.connect(f"{(Path(directory) / DB_FILE).resolve().as_uri()}?mode=ro", uri=True)
    try:
        return build_index(conn, dim)
    finally:
        conn.close()


def load_index(directory: Path, conn: sqlite3.Connection, dim: int,
               generation: int) -> tuple[VectorIndex | None, str | None]:
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
    ids = faiss.vector_to_array(index.id_map).astype(np.int64)
    vectors = index.index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, dim), np.float32)
    recorded = conn.execute("SELECT value FROM meta WHERE key = 'vectors_checksum'").fetchone()
    if recorded is None or checksum_of(zip(ids.tolist(), map(bytes, vectors), strict=True)) != recorded[0]:
        return None, "index vectors do not match the checksum of the live vectors recorded in SQLite"
    position = {int(mid): i for i, mid in enumerate(ids)}
    live = conn.execute(f"SELECT id, user_id, kind FROM memories WHERE {LIVE} ORDER BY id").fetchall()
    if len(live) != len(position) or any(mid not in position for mid, _, _ in live):
        return None, "index ids differ from live rows"
    return VectorIndex.from_rows(dim, ((mid, user_id, kind, vectors[position[mid]]) for mid, user_id, kind in live),
                                 read_centres(conn, dim)), None


def persist_index(directory: Path, index: VectorIndex, generation: int, dim: int, *, durable: bool = True) -> None:
    """Write the index and then its sidecar; a crash in between leaves no valid sidecar, so a rebuild.

    `durable=False` skips the fsyncs (a store under `synchronous=NORMAL`): a power loss may then leave a torn
    or older file, which `load_index` refuses (size, CRC, generation, SQLite's vector checksum) and rebuilds.
    """
    data = faiss.serialize_index(index.to_faiss())
    (directory / SIDECAR_FILE).unlink(missing_ok=True)
    _atomic_write(directory / INDEX_FILE, data, durable)
    failpoint("store.persist")
    sidecar = {"generation": generation, "dim": dim, "size": int(data.nbytes),
               "crc32": zlib.crc32(data), "ntotal": int(index.ntotal)}  # type: ignore[arg-type]  # numpy stubs: ndarray is a Buffer from 3.12
    _atomic_write(directory / SIDECAR_FILE, json.dumps(sidecar).encode(), durable)


def apply_changes(index: VectorIndex, changes: dict[int, tuple[str, str, np.ndarray] | None]) -> None:
    """Bring the touched ids to their committed state: removed, then re-added when live (O(changes))."""
    if not changes:
        return
    for memory_id in changes:
        if memory_id in index:
            index.remove(memory_id)
    failpoint("store.faiss_update")
    for memory_id, live in changes.items():
        if live is not None:
            user_id, kind, vector = live
            index.add(memory_id, user_id, kind, vector)


def _atomic_write(path: Path, data: Any, durable: bool = True) -> None:
    """Write bytes-like data to path via a temp file, fsync and rename, so readers see old or new."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
