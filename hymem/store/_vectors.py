"""Vectors at the store's edges: checked on the way in, read back from their float32 BLOBs."""

from __future__ import annotations

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
