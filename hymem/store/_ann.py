"""Approximate search for one user's large group of vectors: a binary sketch picks candidates, float32 ranks them.

Why: an exact search reads all of the writer's vectors per query (768 bytes a row even in the float16 copy), so a
write into a store holding many of the writer's own memories costs more the more it holds (issue 35). Past
`ANN_MIN_ROWS` live rows a group also keeps, per row, the signs of (vector - centre): one bit per dimension, 48
bytes for 384 dims. A search with a small k ranks every row by the Hamming distance of its bits to the query's
(FAISS's popcount over 16x fewer bytes), takes the `candidates(k)` nearest and every row tied with the last of them, and
scores those exactly in float32: the hits' scores are the exact scan's, but a true neighbour whose signs differ
too much from the query's is missed. Its recall against the exact scan, and IVF's and HNSW's, are measured in
BENCHMARKS.md (issue 35, point 2).

The answer is a function of SQLite alone, so reopening, or rebuilding the index from SQLite, answers the same:

- The centre (the mean of the group's live vectors, so the signs split them evenly even when an embedder puts
  every vector in one narrow cone) is computed inside the write transaction that makes the group large enough
  and stored in SQLite's `meta` table with it (`centre_key`): a failed write leaves no centre behind, and the
  in-memory sketch changes only after COMMIT, as every other index change does.
- A row's bits are a function of its vector and the centre; the candidates are every row within the k-th
  candidate's distance (ties included), so the order of the rows never matters; their scores come from the exact
  scan's kernel, and ties still go to the lower id.

There is nothing else to persist: the bits are recomputed from the vectors on open (about 0.2 s for 100,000
rows), and the centre is in SQLite. A group gets a new centre each time it grows `RETRAIN_GROWTH` times past the
size it was computed at. A search whose k is a large share of the group (a harness probe with k = every memory)
still scans every row exactly.
"""

from __future__ import annotations

import base64
import json

import faiss
import numpy as np

ANN_MIN_ROWS = 4096  # a group gets a centre (and its sketch) once a write leaves it this many live rows
RETRAIN_GROWTH = 4  # ... and a new centre each time it grows this many times past the size it was computed at
MIN_CANDIDATES = 256  # rows rescored in float32 per search, at least (see `candidates`)
CANDIDATES_PER_HIT = 32
MIN_DIM = 128  # below this, one sign per dimension is too few bits to pick candidates by
CENTRE_PREFIX = "ann:"  # meta key: "ann:" + json [user_id, kind]


def candidates(k: int) -> int:
    """How many sketch-nearest rows a search rescores in float32 (plus ties): BENCHMARKS.md gives the recall."""
    return max(MIN_CANDIDATES, CANDIDATES_PER_HIT * k)


def wants_centre(rows_after: int, centre_rows: int | None, dim: int) -> bool:
    """Whether a write that leaves a group with `rows_after` live rows computes (or recomputes) its centre."""
    if dim < MIN_DIM or rows_after < ANN_MIN_ROWS:
        return False
    return centre_rows is None or rows_after >= RETRAIN_GROWTH * centre_rows


def centre_key(user_id: str, kind: str) -> str:
    return CENTRE_PREFIX + json.dumps([user_id, kind], ensure_ascii=False)


def key_of(meta_key: str) -> tuple[str, str]:
    user_id, kind = json.loads(meta_key[len(CENTRE_PREFIX):])
    return user_id, kind


class Centre:
    """A group's sketch centre and the number of live rows it was computed over; one `meta` row in SQLite."""

    __slots__ = ("rows", "vector")

    def __init__(self, vector: np.ndarray, rows: int):
        self.vector = np.ascontiguousarray(vector, dtype=np.float32)
        self.rows = rows

    def to_meta(self) -> str:
        return json.dumps({"rows": self.rows, "dim": len(self.vector),
                           "centre": base64.b64encode(self.vector.tobytes()).decode("ascii")})

    @classmethod
    def from_meta(cls, value: str, dim: int) -> Centre:
        raw = json.loads(value)
        vector = np.frombuffer(base64.b64decode(raw["centre"]), dtype=np.float32)
        if raw["dim"] != dim or vector.shape != (dim,):
            raise ValueError(f"sketch centre of dim {raw['dim']} ({vector.size} values) does not fit dim {dim}")
        return cls(vector, int(raw["rows"]))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Centre) and self.rows == other.rows
                and self.vector.tobytes() == other.vector.tobytes())

    __hash__ = None  # type: ignore[assignment]  # mutable arrays inside


def code_bytes(dim: int) -> int:
    """Bytes per row's sketch: one bit per dimension, padded to whole 64-bit words (FAISS's fast Hamming path)."""
    return 8 * ((dim + 63) // 64)


_SKETCH_CHUNK = 8192  # rows sketched at once (bounds the temporary float and bool arrays)


def sketch(vectors: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """The rows' sign bits of (vector - centre), packed (n, code_bytes(dim)) uint8; padding bits are 0."""
    vectors = np.atleast_2d(vectors)
    n, dim = vectors.shape
    out = np.empty((n, code_bytes(dim)), dtype=np.uint8)
    bits = np.zeros((min(n, _SKETCH_CHUNK), 8 * code_bytes(dim)), dtype=bool)
    for start in range(0, n, _SKETCH_CHUNK):
        chunk = vectors[start:start + _SKETCH_CHUNK]
        np.greater(chunk, centre, out=bits[: len(chunk), :dim])
        out[start:start + len(chunk)] = np.packbits(bits[: len(chunk)], axis=1)
    return out


def sketch_one(vector: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """`sketch` of one vector (a query's, a new row's), the same bytes without the batch's temporary arrays:
    one per search and per added row, so its fixed cost counts."""
    packed = np.packbits(np.greater(vector, centre))
    nbytes = code_bytes(len(vector))
    if len(packed) == nbytes:
        return packed
    out = np.zeros(nbytes, dtype=np.uint8)  # the padding bits are 0, as in `sketch`
    out[: len(packed)] = packed
    return out


_SAMPLE_STEP = 16  # past `_SAMPLED_ROWS` rows, the cut-off distance is first guessed from every 16th row
_SAMPLED_ROWS = 32768


def nearest_rows(codes: np.ndarray, query_code: np.ndarray, count: int) -> np.ndarray:
    """Rows of `codes` (contiguous) whose Hamming distance to `query_code` is at most the count-th smallest, ties
    included: so the rows' order never changes which rows come back."""
    n, nbytes = codes.shape
    if count >= n:
        return np.arange(n)
    distances = np.empty(n, dtype=np.int32)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # this thread only: an idle OpenMP team spins on a loaded machine
    try:
        faiss.hammings(faiss.swig_ptr(np.ascontiguousarray(query_code)), faiss.swig_ptr(codes), 1, n, nbytes,  # type: ignore[attr-defined]  # SWIG, no stub
                       faiss.swig_ptr(distances))
    finally:
        faiss.omp_set_num_threads(threads)
    if n > _SAMPLED_ROWS:
        found = _within_guess(distances, count, 8 * nbytes)
        if found is not None:
            return found
    return np.flatnonzero(distances <= _kth_distance(distances, count, 8 * nbytes))


def _kth_distance(distances: np.ndarray, count: int, nbits: int) -> int:
    """The smallest distance that `count` of `distances` are within (a histogram: distances are 0..nbits)."""
    at_most = np.cumsum(np.bincount(distances, minlength=nbits + 1))
    return int(np.searchsorted(at_most, count))


def _within_guess(distances: np.ndarray, count: int, nbits: int) -> np.ndarray | None:
    """`nearest_rows`' answer for a large group at a fraction of a whole histogram's cost, or None (then the
    caller counts every row). A histogram of every 16th row guesses a distance generous enough that about twice
    `count` rows lie within it; if at least `count` do, the count-th smallest is among them and is read from their
    histogram alone, so the rows returned are exactly those the whole histogram gives."""
    sample = distances[::_SAMPLE_STEP]
    guess = _kth_distance(sample, min(len(sample), 2 * count // _SAMPLE_STEP + 8), nbits)
    within = np.flatnonzero(distances <= guess)
    if len(within) < count:
        return None
    near = distances[within]
    return within[near <= _kth_distance(near, count, nbits)]
