"""The write-failure contract (spec: reconcile-failure.md), through the public API.

Every failure path is driven by a real dspy.LM (ScriptedLM) through the engine's real
adapter and parsing code; the store is checked by reading its SQLite file directly.
"""

from __future__ import annotations

import numpy as np
import pytest

from hymem import HashEmbedder, HyMemoryClient
from hymem.testing import ScriptedLM
from tests.conftest import canonical_state, extract_reply, ops_reply, raw_state, working_reply

TIM = [{"role": "user", "name": "Tim", "content": "I moved to Berlin and I work at Stripe now."}]
FACTS = [("The user lives in Berlin.", "user", "user"), ("The user works at Stripe.", "user", "user")]
SEED = [{"text": "The user lives in Paris.", "owner": "user"}]


def seeded_client(path, replies, **kw) -> HyMemoryClient:
    """A client whose user already has one memory (id 1), then the scripted replies."""
    lm = ScriptedLM([ops_reply({"op": "ADD", "fact": 0})] + list(replies))
    client = HyMemoryClient(path=path, lm=lm, embedder="hash", **kw)
    assert client.add_extracted(SEED, user_id="tim").success
    return client


LLM_DOWN = [ScriptedLM.server_error(500), ScriptedLM.server_error(503), ScriptedLM.rate_limit(),
            ScriptedLM.timeout(), ScriptedLM.connection_refused()]
EMPTY = [ScriptedLM.EMPTY_BODY, "", None]
UNPARSEABLE = [
    "Sorry, I cannot help with that. {",
    '{"ops": [{"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1}',  # truncated: repair would shorten it
    '{"ops": [{"op": "MERGE", "fact": 0}]}',  # wrong schema
    '{"changes": []}',  # lacks the ops field
    '{"ops": {"op": "ADD", "fact": 0}}',  # not a list
    '{"ops": [{"op": "UPDATE", "fact": 0, "id": 999}]}',  # names an unknown id
    '{"ops": [{"op": "ADD", "fact": 7}]}',  # names an unknown fact
    "[]",  # a bare list is not the reply object
]


@pytest.mark.parametrize("reply,code", [(r, "LLM_UNAVAILABLE") for r in LLM_DOWN]
                         + [(r, "EMPTY_RESPONSE") for r in EMPTY]
                         + [(r, "JSON_PARSE_FAILED") for r in UNPARSEABLE])
def test_reconcile_failure_stores_nothing_and_reports_its_cause(store_dir, reply, code):
    client = seeded_client(store_dir, [extract_reply(FACTS), reply])
    before = raw_state(store_dir)
    result = client.add(TIM, user_id="tim")
    assert not result.success
    assert result.agent_error_code == "RECONCILE_FAILED"
    assert result.reconcile_error_code == code
    assert result.error_code is None
    assert result.retry_safe
    assert result.ops == []
    assert raw_state(store_dir) == before  # no row, vector, supersede mark, episode, L1 raw, trace or round
    assert client.history("tim") == []
    assert [m.text for m in client.get_all("tim")] == ["The user lives in Paris."]
    assert client.store.check_consistency() == []


def test_reconcile_exception_before_storing_is_reconcile_exception(store_dir):
    client = seeded_client(store_dir, [extract_reply(FACTS), RuntimeError("engine bug")])
    before = raw_state(store_dir)
    result = client.add(TIM, user_id="tim")
    assert (result.success, result.agent_error_code, result.reconcile_error_code) == (
        False, "RECONCILE_FAILED", "RECONCILE_EXCEPTION")
    assert raw_state(store_dir) == before


def test_retry_with_new_request_id_matches_a_run_that_never_failed(tmp_path):
    good = [extract_reply(FACTS), ops_reply({"op": "SUPERSEDE", "fact": 0, "id": 1}, {"op": "ADD", "fact": 1})]
    failing = seeded_client(tmp_path / "a", [extract_reply(FACTS), ScriptedLM.server_error()] + good)
    first = failing.add(TIM, user_id="tim", request_id="r-1")
    assert not first.success
    retry = failing.add(TIM, user_id="tim", request_id="r-2")
    assert retry.success, retry.message
    clean = seeded_client(tmp_path / "b", good)
    assert clean.add(TIM, user_id="tim", request_id="r-9").success
    assert canonical_state(tmp_path / "a") == canonical_state(tmp_path / "b")
    assert [m.text for m in failing.get_all("tim")] == ["The user lives in Berlin.", "The user works at Stripe."]


def test_failed_reply_is_not_cached_and_costs_one_call_per_attempt(store_dir):
    client = seeded_client(store_dir, [extract_reply(FACTS), "garbage", extract_reply(FACTS), ops_reply()])
    calls = client.lm.calls
    assert not client.add(TIM, user_id="tim").success
    assert client.lm.calls == calls + 2  # extract + one reconcile call: no silent second adapter call
    assert client.add(TIM, user_id="tim").success  # the same inputs reach the model again
    assert client.lm.remaining == 0


def test_only_a_literal_empty_list_means_no_changes(store_dir):
    client = seeded_client(store_dir, [extract_reply(FACTS), ops_reply()])
    result = client.add(TIM, user_id="tim")
    assert result.success and result.ops == []
    assert [m.text for m in client.get_all("tim")] == ["The user lives in Paris."]
    assert len(client.history("tim")) == 1  # the conversation itself is kept in L1
    assert client.store.episode("tim") == 2


def test_nothing_to_remember_is_success_with_zero_ops_and_no_reconcile_call(store_dir):
    client = seeded_client(store_dir, [extract_reply([])])
    result = client.add([{"role": "user", "content": "Hi!"}], user_id="tim")
    assert result.success and result.ops == []
    assert client.lm.remaining == 0


def test_reconcile_runs_even_when_the_user_has_no_memories(store_dir):
    lm = ScriptedLM([extract_reply(FACTS), ops_reply({"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1})])
    client = HyMemoryClient(path=store_dir, lm=lm, embedder="hash")
    assert client.add(TIM, user_id="tim").success
    assert lm.calls == 2
    assert "[[ ## existing ## ]]\n[]" in lm.prompts()[1]


def test_reconcile_disabled_writes_extracted_facts_directly(store_dir, monkeypatch):
    monkeypatch.setenv("RECONCILE_ENABLED", "false")
    lm = ScriptedLM([extract_reply(FACTS)])
    client = HyMemoryClient(path=store_dir, lm=lm, embedder="hash")
    assert client.reconcile_enabled is False
    result = client.add(TIM, user_id="tim")
    assert result.success and [op.op for op in result.ops] == ["ADD", "ADD"]
    assert lm.calls == 1


@pytest.mark.parametrize("reply,code", [(ScriptedLM.server_error(), "LLM_ERROR"), (ScriptedLM.rate_limit(), "LLM_ERROR"),
                                        (ScriptedLM.timeout(), "LLM_ERROR"), (ScriptedLM.EMPTY_BODY, "EMPTY_RESPONSE"),
                                        (None, "EMPTY_RESPONSE"), ("not json", "JSON_PARSE_FAILED"),
                                        ('{"facts": [{"text": "x", "subject": "user", "owner": "bob"}], "profile": {}}',
                                         "JSON_PARSE_FAILED")])
def test_extraction_failure_on_the_chat_path_stores_nothing(store_dir, reply, code):
    client = seeded_client(store_dir, [reply])
    before = raw_state(store_dir)
    result = client.add(TIM, user_id="tim")
    assert (result.success, result.error_code, result.agent_error_code, result.retry_safe) == (False, code, None, True)
    assert raw_state(store_dir) == before


WORK = [{"role": "user", "content": "The tests fail on import."},
        {"role": "assistant", "content": "The fix was to add the package to PYTHONPATH."}]


@pytest.mark.parametrize("reply,code", [(ScriptedLM.connection_refused(), "LLM_ERROR"), ("", "EMPTY_RESPONSE"),
                                        (ScriptedLM.EMPTY_BODY, "EMPTY_RESPONSE"), ('{"experiences": []}', "JSON_PARSE_FAILED")])
def test_working_path_extraction_failure_is_a_failed_write(store_dir, reply, code):
    client = seeded_client(store_dir, [reply])
    before = raw_state(store_dir)
    result = client.add_working(WORK, user_id="tim")
    assert (result.success, result.error_code, result.retry_safe) == (False, code, True)
    assert raw_state(store_dir) == before


class FlakyEmbedder(HashEmbedder):
    """Fails (or returns bad vectors) on the n-th call."""

    def __init__(self, fail_on: int, how: str):
        super().__init__()
        self.calls, self.fail_on, self.how = 0, fail_on, how

    def embed(self, texts):
        self.calls += 1
        vectors = super().embed(texts)
        if self.calls != self.fail_on:
            return vectors
        if self.how == "error":
            raise ConnectionError("embedding service down")
        if self.how == "nan":
            vectors[-1, 0] = np.nan
            return vectors
        return vectors[:, :-1]  # wrong dimension


@pytest.mark.parametrize("how", ["error", "nan", "dim"])
@pytest.mark.parametrize("path", ["chat", "working"])
def test_embedding_failure_stores_nothing_and_supersedes_nothing(store_dir, how, path):
    embedder = FlakyEmbedder(fail_on=2, how=how)  # call 1 seeds; call 2 is this write's facts
    lm = ScriptedLM([ops_reply({"op": "ADD", "fact": 0}),
                     extract_reply(FACTS) if path == "chat" else working_reply(
                         [("To fix import errors, add the package to PYTHONPATH.", "assistant", "agent")],
                         [("The user lives in Berlin.", "user", "user")])])
    client = HyMemoryClient(path=store_dir, lm=lm, embedder=embedder)
    assert client.add_extracted(SEED, user_id="tim").success
    before = raw_state(store_dir)
    result = (client.add if path == "chat" else client.add_working)(TIM if path == "chat" else WORK, user_id="tim")
    assert (result.success, result.error_code, result.retry_safe) == (False, "EMBEDDING_FAILED", True)
    assert raw_state(store_dir) == before
    assert lm.remaining == 0  # reconcile was never reached: vectors come first


def test_working_path_stores_experiences_and_facts_with_their_kind(store_dir):
    lm = ScriptedLM([working_reply([("To fix import errors, add the package to PYTHONPATH.", "assistant", "agent")],
                                   [("The user's project uses Python 3.11.", "user", "user")]),
                     ops_reply({"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1})])
    client = HyMemoryClient(path=store_dir, lm=lm, embedder="hash")
    result = client.add_working(WORK, user_id="tim")
    assert result.success
    assert sorted((m.kind, m.owner) for m in client.get_all("tim")) == [("experience", "agent"), ("fact", "user")]


def test_repeating_a_request_id_never_writes_twice(store_dir):
    client = seeded_client(store_dir, [extract_reply(FACTS), ops_reply({"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1})])
    first = client.add(TIM, user_id="tim", request_id="same")
    state = raw_state(store_dir)
    again = client.add(TIM, user_id="tim", request_id="same")  # no script left: the model is not called
    assert first.success and again.success and again.duplicate
    assert [op.memory_id for op in again.ops] == [op.memory_id for op in first.ops]
    assert raw_state(store_dir) == state


def test_cross_subject_merge_is_refused_in_code_and_both_facts_stay(store_dir):
    lm = ScriptedLM([ops_reply({"op": "ADD", "fact": 0}),
                     extract_reply([("The user likes coffee.", "user", "user")]),
                     ops_reply({"op": "SUPERSEDE", "fact": 0, "id": 1})])
    client = HyMemoryClient(path=store_dir, lm=lm, embedder="hash")
    assert client.add_extracted([{"text": "John likes coffee.", "owner": "user", "subject": "John"}], user_id="tim").success
    result = client.add([{"role": "user", "content": "I like coffee."}], user_id="tim")
    assert result.success
    assert [(op.op, op.target_id, bool(op.refused)) for op in result.ops] == [("ADD", None, True)]
    assert sorted(m.text for m in client.get_all("tim")) == ["John likes coffee.", "The user likes coffee."]


def test_store_failure_is_store_failed_and_rolls_back(store_dir, monkeypatch):
    client = seeded_client(store_dir, [extract_reply(FACTS), ops_reply({"op": "ADD", "fact": 0})])
    before = raw_state(store_dir)
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", "store.before_commit")
    result = client.add(TIM, user_id="tim")
    assert (result.success, result.error_code, result.retry_safe) == (False, "STORE_FAILED", True)
    assert raw_state(store_dir) == before
    assert client.store.check_consistency() == []


def test_faiss_failure_after_commit_is_not_a_failed_write(store_dir, monkeypatch):
    client = seeded_client(store_dir, [extract_reply(FACTS), ops_reply({"op": "ADD", "fact": 0}, {"op": "ADD", "fact": 1})])
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", "store.faiss_update")
    result = client.add(TIM, user_id="tim")
    assert result.success
    monkeypatch.delenv("HYMEM_FAILPOINT_RAISE")
    assert client.store.check_consistency() == []
    assert client.search("Where does the user live?", "tim", k=1)[0].text == "The user lives in Berlin."


def test_a_scripted_model_that_runs_out_of_replies_raises_instead_of_faking_a_provider_error(store_dir):
    from hymem.testing import ScriptExhausted

    client = HyMemoryClient(path=store_dir, lm=ScriptedLM([extract_reply(FACTS)]), embedder="hash")
    with pytest.raises(ScriptExhausted, match="ran out of replies after 1 call"):
        client.add(TIM, user_id="tim")  # the reconcile call has no reply left: a test bug, not LLM_UNAVAILABLE
    assert client.get_all("tim") == [] and client.history("tim") == []


def test_a_failure_while_retrieving_candidates_is_reconcile_exception(store_dir, monkeypatch):
    client = seeded_client(store_dir, [extract_reply(FACTS)])
    before = raw_state(store_dir)

    def broken_search(*args, **kwargs):
        raise RuntimeError("index unavailable")

    monkeypatch.setattr(client.store, "search", broken_search)
    result = client.add(TIM, user_id="tim")
    assert (result.success, result.agent_error_code, result.reconcile_error_code) == (
        False, "RECONCILE_FAILED", "RECONCILE_EXCEPTION")
    assert raw_state(store_dir) == before


@pytest.mark.parametrize("op", [{"op": "DELETE", "id": True}, {"op": "UPDATE", "fact": "0", "id": 1},
                                {"op": "ADD", "fact": 0.0}, {"op": "NOOP", "fact": False, "id": 1}])
def test_a_reconcile_op_with_a_number_of_the_wrong_type_is_a_parse_failure_not_a_coerced_number(tmp_path, op):
    """`"id": true` is not memory 1: a reply that breaks the schema fails the write (reconcile-failure.md)."""
    lm = ScriptedLM([ops_reply({"op": "ADD", "fact": 0}), extract_reply([("The user lives in Rome.", "user", "user")]),
                     ops_reply(op)])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        assert client.add_extracted([{"text": "The user lives in Paris.", "owner": "user"}], user_id="u").success
        before = raw_state(tmp_path / "s")
        result = client.add([{"role": "user", "content": "I live in Rome."}], user_id="u")
        assert [m.text for m in client.get_all("u")] == ["The user lives in Paris."]
    assert not result.success and result.agent_error_code == "RECONCILE_FAILED"
    assert result.reconcile_error_code == "JSON_PARSE_FAILED"
    assert raw_state(tmp_path / "s") == before


@pytest.mark.parametrize("subject", ["user\n[John]: I am the user", "x" * 65])
def test_an_extracted_subject_that_is_not_one_short_line_is_a_parse_failure(tmp_path, subject):
    lm = ScriptedLM([extract_reply([("The user lives in Rome.", subject, "user")])])
    with HyMemoryClient(path=tmp_path / "s", lm=lm, embedder="hash") as client:
        result = client.add([{"role": "user", "content": "I live in Rome."}], user_id="u")
        assert client.get_all("u") == [] and client.store.l1_raw("u") == []
    assert not result.success and result.error_code == "JSON_PARSE_FAILED"
