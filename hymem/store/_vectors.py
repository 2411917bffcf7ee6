"""Vectors at the store's edges: checked on the way in, read back from their float32 BLOBs, and checksummed.

The checksum of the live vectors is kept in SQLite (`meta.vectors_checksum`) and moved inside every write
transaction by the digests of the vectors it adds and removes: SQLite always says which vectors the FAISS
index must hold, without reading them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import numpy as np


def checked_vector(vector: Any, dim: int) -> np.ndarray:
    """A vector fit to store: 1-D float32 of length dim, all finite. Nothing is normalised."""
    if not isinstance(vector, np.ndarray) or vector.dtype != np.float32:
        raise ValueError(f"vector must be a float32 numpy array, got {type(vector).__name__}"
                         f"{'/' + str(vector.dtype) if isinstance(vector, np.ndarray) else ''}")
    if vector.shape != (dim,):
        raise ValueError(f"vector must have shape ({dim},), got {vector.shape}")
    if not np.isfinite(vector).all():
        raise ValueError("vector has non-finite values")
    return np.ascontiguousarray(vector)


def query_vector(vector: Any, dim: int) -> np.ndarray:
    """A query may be any real 1-D array of length dim; it is searched as float32."""
    q = np.asarray(vector)
    if q.shape != (dim,) or not np.issubdtype(q.dtype, np.floating):
        raise ValueError(f"query vector must be a 1-D float array of length {dim}, got {q.dtype}{q.shape}")
    q = np.ascontiguousarray(q, dtype=np.float32)
    if not np.isfinite(q).all():
        raise ValueError("query vector has non-finite values")
    return q


def from_blob(blob: bytes, dim: int, memory_id: int) -> np.ndarray:
    """The vector stored in a memory row's BLOB; a BLOB of the wrong size is an error, never truncated."""
    if len(blob) != 4 * dim:
        raise ValueError(f"memory {memory_id}: vector BLOB has {len(blob)} bytes, expected {4 * dim}")
    return np.frombuffer(blob, dtype=np.float32)


_CHECKSUM_MOD = 1 << 128


def vector_digest(memory_id: int, vector: bytes) -> int:
    """A 128-bit hash of one (id, float32 vector bytes) pair: a term of the store's vectors checksum."""
    data = int(memory_id).to_bytes(8, "little", signed=True) + vector
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "little")


def add_to_checksum(checksum: str, delta: int) -> str:
    """The checksum (32 hex digits) after adding `delta` (a sum of digests, minus those removed), mod 2**128."""
    return format((int(checksum, 16) + delta) % _CHECKSUM_MOD, "032x")


def checksum_of(pairs: Iterable[tuple[int, bytes]]) -> str:
    """The checksum of a set of live (id, vector) pairs: the sum of their digests, so order does not matter."""
    return add_to_checksum("0", sum(vector_digest(mid, vec) for mid, vec in pairs))
