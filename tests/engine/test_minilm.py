"""The real embedding model (all-MiniLM-L6-v2, shipped by a PyPI package, loaded offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hymem import HyMemoryClient
from hymem.embedder import make_embedder, minilm_available

needs_minilm = pytest.mark.skipif(not minilm_available(), reason="pip install 'hymem[minilm]'")
needs_torch = pytest.mark.skipif(not minilm_available(torch=True), reason="pip install 'hymem[minilm-torch]'")
REPO = Path(__file__).resolve().parents[2]


def _bundled_sentences() -> list[str]:
    """Every message and memory text of the bundled datasets (English, Chinese, working), once each."""
    texts: dict[str, None] = {}
    for name in ("chat_en.jsonl", "chat_zh.jsonl", "working.jsonl"):
        for line in (REPO / "datasets" / name).read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            case = json.loads(line)
            for turn in case.get("turns", []):
                for message in turn:
                    content = message.get("content")
                    parts = content if isinstance(content, list) else [content]
                    for part in parts:  # a string, or content blocks ({"type": "text", "text": ...})
                        text = part.get("text") if isinstance(part, dict) else part
                        if isinstance(text, str):
                            texts[text] = None
            for fact in [*case.get("memories", []), *case.get("expect", {}).get("facts", [])]:
                texts[fact["text"]] = None
    return list(texts)


@needs_minilm
def test_the_numpy_model_loads_without_torch_or_transformers():
    code = ("import sys; from hymem.embedder import make_embedder; v = make_embedder('minilm').embed(['hi']); "
            "assert v.shape == (1, 384); heavy = [m for m in ('torch', 'transformers', 'sentence_transformers') "
            "if m in sys.modules]; assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr


@needs_minilm
@needs_torch
@pytest.mark.slow
def test_the_numpy_model_gives_the_torch_models_vectors_on_the_bundled_sentences():
    sentences = _bundled_sentences() + ["", "word " * 400]  # empty, and one past the 256-token limit
    assert len(sentences) > 300
    ours, reference = make_embedder("minilm").embed(sentences), make_embedder("minilm-torch").embed(sentences)
    cosines = (ours * reference).sum(axis=1)
    assert cosines.min() >= 0.99, [sentences[i] for i in np.argsort(cosines)[:5]]


@needs_minilm
def test_minilm_embeds_offline_and_search_is_semantic(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = make_embedder("minilm")
    vectors = embedder.embed(["The user lives in Berlin.", "The user resides in Berlin.", "John likes coffee."])
    assert vectors.shape == (3, 384)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])  # paraphrase beats another fact
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder=embedder) as client:
        assert client.add([{"role": "user", "content": "I moved to Berlin. I like green tea."},
                           {"role": "assistant", "name": "John", "content": "I am a nurse."}], user_id="tim").success
        top = client.search("Which city is the user's home?", "tim", k=1)
    assert top[0].text == "The user lives in Berlin."


@needs_minilm
@pytest.mark.slow
def test_the_main_job_on_the_bundled_data_is_valid_with_minilm(tmp_path):
    """What `nox -s eval` runs: bundled datasets, offline model, minilm, full sweep."""
    from evals.pipeline import run_eval
    from evals.run.runner import RunConfig

    outcome = run_eval(RunConfig(out=tmp_path / "run", progress=False))
    assert outcome.manifest.embedder == "minilm"
    assert outcome.verdict == "valid"


@needs_minilm
def test_a_batch_gets_the_vectors_the_per_text_products_gave_bit_for_bit(monkeypatch):
    """The dense layers multiply a batch's tokens in one 2-D product (`hymem.minilm._dense`); numpy's stacked
    product, one text at a time, gave every vector the same to the last bit. A run's records depend on those bits
    (the matcher's word vectors feed every match score), so no change of speed may move them."""
    import hymem.minilm as minilm

    texts = _bundled_sentences()[:40] + ["coffee", "violin", "a", "painting classes", "跑步"]
    batches = [texts, texts[:1], texts[3:5], texts[-5:], texts[:33]]
    model = make_embedder("minilm")
    ours = [model.embed(batch) for batch in batches]
    monkeypatch.setattr(minilm, "_dense", lambda x, weight: x @ weight)  # numpy's stack, slice by slice
    for batch, vectors in zip(batches, ours, strict=True):
        assert np.array_equal(vectors, model.embed(batch))
