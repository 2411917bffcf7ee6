"""The real embedding model (all-MiniLM-L6-v2, shipped by a PyPI package, loaded offline)."""

from __future__ import annotations

import pytest

from hymem import HyMemoryClient
from hymem.embedder import make_embedder, minilm_available

needs_minilm = pytest.mark.skipif(not minilm_available(), reason="pip install 'hymem[minilm]' torch==2.13.0")


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
    from evals.runner import RunConfig, run_eval

    outcome = run_eval(RunConfig(out=tmp_path / "run", progress=False))
    assert outcome.manifest.embedder == "minilm"
    assert outcome.verdict == "valid"
