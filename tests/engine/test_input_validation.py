"""Bad input is refused before any model call, with one error type naming the argument; nothing is stored.

Issue 12 points 4 (argument validation), 5 (one current user per write) and 6 (size limits).
"""

from __future__ import annotations

import pytest

from hymem import HashEmbedder, HyMemoryClient, InputValidationError, MessageValidationError
from hymem.testing import ScriptedLM
from hymem.validation import DEFAULT_MAX_MESSAGE_CHARS, DEFAULT_MAX_WRITE_CHARS
from tests.conftest import raw_state


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


# --- 4. every argument is checked before any model call ------------------------------------------------------


def test_the_one_validation_error_type_is_exported_and_covers_messages():
    assert issubclass(MessageValidationError, InputValidationError) and issubclass(InputValidationError, ValueError)
    err = MessageValidationError(2, "content", "bad")
    assert (err.argument, err.index, err.field, str(err)) == ("messages", 2, "content", "messages[2].content: bad")


@pytest.mark.parametrize(("memory", "field"), [
    ({"text": 12345}, "text"), ({"text": None}, "text"), ({"text": ["x"]}, "text"), ({"text": "  "}, "text"),
    ({"text": "The user likes tea.", "subject": 5}, "subject"),
    ({"text": "The user likes tea.", "subject": {}}, "subject"),
    ({"text": "The user likes tea.", "subject": "Jo\nhn"}, "subject"),
    ({"text": "The user likes tea.", "subject": "x" * 65}, "subject"),
    ({"text": "The user likes \ud800 tea."}, "text"), ({"text": "Ana likes tea.", "subject": "An\udc00a"}, "subject"),
    ({"text": "The user likes tea.", "owner": "me"}, "owner"), ({"text": "The user likes tea.", "kind": 1}, "kind"),
    ({"text": "The user likes tea.", "colour": "red"}, "colour"),
    ("The user likes tea.", None),
])
def test_add_extracted_names_the_bad_memory_and_field(strict, memory, field):
    err = refused(strict, lambda: strict.add_extracted([{"text": "The user likes coffee."}, memory], user_id="tim"),
                  InputValidationError)
    assert (err.argument, err.index, err.field) == ("memories", 1, field), str(err)


@pytest.mark.parametrize("memories", ["The user likes tea.", {"text": "The user likes tea."}, None])
def test_add_extracted_needs_a_list(strict, memories):
    err = refused(strict, lambda: strict.add_extracted(memories, user_id="tim"), InputValidationError)
    assert (err.argument, err.index) == ("memories", None)


WRITES = {
    "add": lambda c, **kw: c.add([{"role": "user", "content": "I work at Stripe."}], **kw),
    "add_working": lambda c, **kw: c.add_working([{"role": "user", "content": "Run the tests."}], **kw),
    "add_extracted": lambda c, **kw: c.add_extracted([{"text": "The user works at Stripe."}], **kw),
}


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize("request_id", [12345, {}, [], "", "  ", "r\ud800", "r" * 257, 1.5, b"r"])
def test_a_request_id_of_the_wrong_type_or_shape_is_refused(strict, write, request_id):
    err = refused(strict, lambda: write(strict, user_id="tim", request_id=request_id), InputValidationError)
    assert err.argument == "request_id"


@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize("user_id", [None, 5, "", " ", "t\ud800m", "u" * 257, ["tim"]])
def test_a_bad_user_id_is_refused_by_every_write(strict, write, user_id):
    err = refused(strict, lambda: write(strict, user_id=user_id), InputValidationError)
    assert err.argument == "user_id"


@pytest.mark.parametrize("user_id", [None, 5, "", "t\ud800m"])
def test_a_bad_user_id_is_refused_by_every_read(strict, user_id):
    for read in (strict.get_all, strict.profile, strict.history, lambda u: strict.search("tea", u)):
        err = refused(strict, lambda read=read: read(user_id), InputValidationError)
        assert err.argument == "user_id"


@pytest.mark.parametrize("query", [None, 5, "", "   ", "\ud800", "tea \udfff", ["tea"]])
def test_search_refuses_a_query_that_is_not_text(strict, query):
    err = refused(strict, lambda: strict.search(query, "tim"), InputValidationError)
    assert err.argument == "query"


@pytest.mark.parametrize("k", [0, -1, True, "3", 2.0, None])
def test_search_refuses_a_k_that_is_not_a_positive_int(strict, k):
    err = refused(strict, lambda: strict.search("tea", "tim", k=k), InputValidationError)
    assert err.argument == "k"


@pytest.mark.parametrize(("message", "field"), [
    ({"role": "user", "content": "I like \ud800 tea."}, "content"),
    ({"role": "user", "content": [{"type": "text", "text": "ok"}, {"type": "text", "text": "\udc80"}]},
     "content[1].text"),
    ({"role": "assistant", "name": "Jo\ud800hn", "content": "hi"}, "name"),
    ({"role": "user", "name": "T\udfffim", "content": "hi"}, "name"),
    ({"role": "tool", "name": "search", "content": "result \ud800"}, "content"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "function": {"name": "search", "arguments": {"q": "\ud800"}}}]}, "tool_calls"),
])
def test_a_lone_surrogate_in_a_message_is_refused_naming_the_field(strict, message, field):
    for write in (strict.add, strict.add_working):
        err = refused(strict, lambda write=write: write([{"role": "user", "content": "hi"}, message], user_id="tim"))
        assert (err.argument, err.index) == ("messages", 1) and err.field.startswith(field), str(err)


def test_a_valid_write_after_refused_ones_is_stored(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as client:
        with pytest.raises(InputValidationError):
            client.add([{"role": "user", "content": "I work at Stripe."}], user_id="tim", request_id=12345)
        assert client.add([{"role": "user", "content": "I work at Stripe."}], user_id="tim", request_id="12345").success
        assert [m.text for m in client.search("Stripe", "tim")] == ["The user works at Stripe."]


# --- 6. size limits per message and per write ----------------------------------------------------------------


def test_the_default_limits_refuse_a_10_mb_message_before_any_model_call(strict):
    assert (strict.max_message_chars, strict.max_write_chars) == (DEFAULT_MAX_MESSAGE_CHARS, DEFAULT_MAX_WRITE_CHARS)
    err = refused(strict, lambda: strict.add([{"role": "user", "content": "I like tea. " * 900_000}], user_id="tim"))
    assert (err.argument, err.index, err.field) == ("messages", 0, "content")
    assert "max_message_chars" in str(err) and str(DEFAULT_MAX_MESSAGE_CHARS) in str(err)


@pytest.fixture
def small(tmp_path):
    """A client with small limits over a seeded store, whose model and embedder must not be reached."""
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as seeding:
        assert seeding.add([{"role": "user", "content": "I like tea."}], user_id="tim").success
    embedder = CountingEmbedder()
    with HyMemoryClient(path=tmp_path / "s", lm=ScriptedLM([]), embedder=embedder, max_message_chars=100,
                        max_write_chars=250) as client:
        client.embedder_calls = lambda: embedder.calls
        yield client


def test_a_message_over_the_limit_is_refused_naming_it(small):
    for write in (small.add, small.add_working):
        err = refused(small, lambda write=write: write([{"role": "user", "content": "ok"},
                                                         {"role": "assistant", "content": "x" * 101}], user_id="tim"))
        assert (err.argument, err.index, err.field) == ("messages", 1, "content") and "100" in str(err)
    parts = [{"type": "text", "text": "x" * 60}, {"type": "text", "text": "y" * 60}]  # one message of 120 (+1)
    err = refused(small, lambda: small.add([{"role": "user", "content": parts}], user_id="tim"))
    assert (err.index, err.field) == (0, "content")


def test_a_write_over_the_limit_is_refused_naming_it(small):
    messages = [{"role": "user", "content": "x" * 90} for _ in range(3)]  # 270 > 250, each within 100
    err = refused(small, lambda: small.add(messages, user_id="tim"))
    assert (err.argument, err.index) == ("messages", None) and "max_write_chars" in str(err) and "250" in str(err)
    memories = [{"text": "The user likes " + "x" * 80} for _ in range(3)]
    err = refused(small, lambda: small.add_extracted(memories, user_id="tim"), InputValidationError)
    assert (err.argument, err.index) == ("memories", None) and "max_write_chars" in str(err)


def test_an_extracted_memory_or_a_query_over_the_limit_is_refused(small):
    err = refused(small, lambda: small.add_extracted([{"text": "The user " + "x" * 100}], user_id="tim"),
                  InputValidationError)
    assert (err.argument, err.index, err.field) == ("memories", 0, "text") and "max_message_chars" in str(err)
    err = refused(small, lambda: small.search("x" * 101, "tim"), InputValidationError)
    assert err.argument == "query"


def test_writes_at_the_limits_are_accepted(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash", max_message_chars=100,
                        max_write_chars=250) as client:
        text = ("I work at Stripe. " * 6)[:100]
        assert client.add([{"role": "user", "content": text}, {"role": "user", "content": text},
                           {"role": "user", "content": "x" * 50}], user_id="tim").success


@pytest.mark.parametrize(("arg", "value"), [("max_message_chars", 0), ("max_message_chars", "10"),
                                            ("max_write_chars", -5), ("max_write_chars", True)])
def test_limits_must_be_positive_integers(tmp_path, arg, value):
    with pytest.raises(InputValidationError) as info:
        HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash", **{arg: value})
    assert info.value.argument == arg
