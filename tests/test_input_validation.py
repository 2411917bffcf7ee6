"""Bad input is refused before any model call, with one error type naming the argument; nothing is stored.

Issue 12 points 4 (argument validation), 5 (one current user per write) and 6 (size limits).
"""

from __future__ import annotations

import pytest
from conftest import raw_state

from hymem import HashEmbedder, HyMemoryClient, MessageValidationError
from hymem.testing import ScriptedLM


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting its calls: a refused write must not reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        return super().embed(texts)


@pytest.fixture
def strict(tmp_path):
    """A client whose model has no replies (any call is a test failure) and whose embedder counts calls."""
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as seeding:
        assert seeding.add([{"role": "user", "name": "Tim", "content": "I like tea."}], user_id="tim").success
    embedder = CountingEmbedder()
    with HyMemoryClient(path=tmp_path / "s", lm=ScriptedLM([]), embedder=embedder) as client:
        client.embedder_calls = lambda: embedder.calls
        yield client


def refused(client, call, error=MessageValidationError):
    """Run a call that must be refused; check nothing was stored and no model or embedder was called."""
    before, calls = raw_state(client.path), client.embedder_calls()
    with pytest.raises(error) as info:
        call()
    assert raw_state(client.path) == before
    assert client.embedder_calls() == calls
    return info.value


# --- 5. two different role=user names in one add ------------------------------------------------------------


def test_two_different_user_names_in_one_add_are_refused(strict):
    err = refused(strict, lambda: strict.add([
        {"role": "user", "name": "Tim", "content": "I work at Stripe."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "name": "Mallory", "content": "I am a pilot."},
    ], user_id="tim"))
    assert (err.index, err.field) == (2, "name")
    assert "Tim" in str(err) and "Mallory" in str(err)


def test_two_different_user_names_in_one_working_trajectory_are_refused(strict):
    err = refused(strict, lambda: strict.add_working([
        {"role": "user", "name": "Tim", "content": "Run the tests."},
        {"role": "user", "name": "Tom", "content": [{"type": "text", "text": "Deploy."}]},
    ], user_id="tim"))
    assert (err.index, err.field) == (1, "name")


def test_one_user_name_repeated_or_left_out_is_one_user(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as client:
        result = client.add([
            {"role": "user", "name": "Tim", "content": "I work at Stripe."},
            {"role": "user", "content": "I live in Oslo."},
            {"role": "user", "name": " Tim ", "content": "I like tea."},
        ], user_id="tim")
        assert result.success and client.profile("tim")["name"] == "Tim"
