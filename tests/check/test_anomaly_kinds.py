"""Every anomaly kind the checker names, produced from a bug planted in the engine and replayed through the
`MemorySystem` protocol (hymem behind `HymemSystem`, driven by the `CaseReplayer`), with its witness."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import hymem.client as client_module
import hymem.store._store as store_module
from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.record import AnomalyKind, CaseRun
from evals.run.replay import CaseReplayer, UnitModels
from hymem import HashEmbedder
from hymem.offline import offline_lm

CASE = Case.model_validate({
    "id": "tim", "lang": "en", "user_id": "tim", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
    "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin."}]],
    "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}]},
})


def replay(case: Case = CASE) -> CaseRun:
    """The case's control run and fault sweep on hymem, through the MemorySystem protocol."""
    run = CaseReplayer(case, "planted", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("sweep"),
                       seed=0).run()
    assert run.status == "ok", run.error
    return run


def witnesses(run: CaseRun, kind: AnomalyKind) -> list[tuple[str, str, str]]:
    """(site, fault kind, witness) of every anomaly of `kind` on the run's faulted writes."""
    return [(f.site, f.kind, a.witness) for f in run.faults for a in f.anomalies if a.kind == kind]


def on_failed_writes(monkeypatch, also: Callable[[object, str, str], None]) -> None:
    """Plant `also(client, user_id, request_id)` after every failed write, in a transaction of its own."""
    real = client_module.HyMemoryClient._write

    def write(self, user_id, request_id, *rest):
        result = real(self, user_id, request_id, *rest)
        if not result.success:
            also(self, user_id, result.request_id)
        return result

    monkeypatch.setattr(client_module.HyMemoryClient, "_write", write)


def test_a_correct_engine_shows_no_anomaly_at_all():
    assert [a for f in replay().faults for a in f.anomalies] == []


def test_episode_advanced_by_a_failed_write(monkeypatch):
    def advance(client, user_id, rid):
        with client.store.write() as tx:
            tx.advance_episode(user_id)

    on_failed_writes(monkeypatch, advance)
    found = witnesses(replay(), AnomalyKind.EPISODE_ADVANCED)
    assert found and {site for site, _, _ in found} >= {"lm.extract", "lm.reconcile", "embed"}
    assert all(w.startswith("episodes: +1 -") for _, _, w in found)


def test_trace_appended_by_a_failed_write(monkeypatch):
    def trace(client, user_id, rid):
        with client.store.write() as tx:
            tx.append_trace(user_id, rid, "chat", {"failed": True})

    on_failed_writes(monkeypatch, trace)
    found = witnesses(replay(), AnomalyKind.TRACE_APPENDED)
    assert found and all(w.startswith("traces: +1 -0") and "failed" in w and rid in w for rid in ("tim/w",)
                         for _, _, w in found)


def test_vectorless_node_when_the_index_skips_new_vectors(monkeypatch):
    real = store_module.apply_changes

    def drop_additions(index, changes):
        real(index, {mid: None for mid in changes})  # removes, never adds: new rows get no FAISS vector

    monkeypatch.setattr(store_module, "apply_changes", drop_additions)
    found = witnesses(replay(), AnomalyKind.VECTORLESS_NODE)
    assert found
    assert any("has no FAISS vector" in w and "'The user lives in Berlin.'" in w for _, _, w in found)


def test_orphan_vector_when_the_index_skips_removals(monkeypatch):
    def keep_removed(index, changes):
        for memory_id, live in changes.items():  # the superseded memory's vector is never removed
            if live is not None and memory_id not in index:
                index.add(memory_id, *live)

    monkeypatch.setattr(store_module, "apply_changes", keep_removed)
    found = witnesses(replay(), AnomalyKind.ORPHAN_VECTOR)
    assert found and all(w.removeprefix("after retry: ").startswith("FAISS id ") and w.endswith("has no live row")
                         for _, _, w in found)


def test_wrong_error_code_when_reconcile_failures_are_mislabelled(monkeypatch):
    monkeypatch.setattr(client_module, "_RECONCILE_CODES", {k: "LLM_ERROR" for k in client_module._RECONCILE_CODES})
    found = witnesses(replay(), AnomalyKind.WRONG_ERROR_CODE)
    assert found and {site for site, _, _ in found} == {"lm.reconcile"}
    assert all("'reconcile_error_code': 'LLM_ERROR'" in w for _, _, w in found)


def test_partial_write_and_retry_diverged_when_a_failed_write_keeps_a_profile_change(monkeypatch):
    def note(client, user_id, rid):
        with client.store.write() as tx:
            tx.merge_profile(user_id, {"note": f"failed {rid}"})

    on_failed_writes(monkeypatch, note)
    run = replay()
    assert all(w.startswith("profiles: +1") for _, _, w in witnesses(run, AnomalyKind.PARTIAL_WRITE))
    assert witnesses(run, AnomalyKind.PARTIAL_WRITE) and witnesses(run, AnomalyKind.RETRY_DIVERGED)


def test_degraded_success_when_a_failed_reconcile_adds_everything(monkeypatch):
    from hymem.chain import ChainError
    from hymem.reconciler import direct_plan

    real = client_module.reconcile

    def add_all(predictor, lm, facts, candidates):
        try:
            return real(predictor, lm, facts, candidates)
        except ChainError:
            return direct_plan(facts)

    monkeypatch.setattr(client_module, "reconcile", add_all)
    found = witnesses(replay(), AnomalyKind.DEGRADED_SUCCESS)
    assert found and {site for site, _, _ in found} == {"lm.reconcile"}
    assert all(w.startswith("success=true under a fault that must fail; ops=") for _, _, w in found)


@pytest.mark.ci_heavy  # a second planted DEGRADED_SUCCESS; the default run keeps the add-all one (run by `nox -s heavy`)
def test_degraded_success_when_a_null_list_field_is_read_as_no_changes(monkeypatch):
    # The bug (tests/mutants/30): the strict adapter takes `{"ops": null}` / `{"facts": null}` for [] ("some
    # models say null for nothing"), so a broken reply becomes a successful "no changes" / "nothing to remember".
    import hymem.llm as llm_module

    real = llm_module.StrictJSONAdapter.parse

    def lenient(self, signature, completion):
        for field in ("ops", "facts"):
            completion = completion.replace(f'"{field}": null', f'"{field}": []')
        return real(self, signature, completion)

    monkeypatch.setattr(llm_module.StrictJSONAdapter, "parse", lenient)
    found = witnesses(replay(), AnomalyKind.DEGRADED_SUCCESS)
    assert {(site, kind) for site, kind, _ in found} == {("lm.reconcile", "null_ops"), ("lm.extract", "null_facts")}
    assert all(w.startswith("success=true under a fault that must fail") for _, _, w in found)


@pytest.mark.ci_heavy  # a second planted WRONG_ERROR_CODE; the default run keeps the mislabelled one (run by `nox -s heavy`)
def test_wrong_error_code_when_a_non_json_200_body_is_called_empty(monkeypatch):
    # The bug (tests/mutants/31): classify_failure calls every HTTP-200 provider error "empty", so a gateway's HTML
    # page behind a 200 returns EMPTY_RESPONSE instead of JSON_PARSE_FAILED. In-process kind non_json_200.
    from dspy.utils.exceptions import LMProviderError

    import hymem.chain as chain_module

    real = chain_module.classify_failure
    monkeypatch.setattr(chain_module, "classify_failure", lambda exc: "empty" if isinstance(exc, LMProviderError)
                        and getattr(exc, "status", None) == 200 else real(exc))
    found = witnesses(replay(), AnomalyKind.WRONG_ERROR_CODE)
    assert {(site, kind) for site, kind, _ in found} == {("lm.extract", "non_json_200"),
                                                         ("lm.reconcile", "non_json_200")}
    assert all("EMPTY_RESPONSE" in w for _, _, w in found)


def test_null_list_and_non_json_200_faults_expect_a_parse_failure():
    from evals.faults.plan import expected_outcome, kinds_for

    assert "null_ops" in kinds_for("lm.reconcile") and "null_ops" not in kinds_for("lm.extract")
    assert "null_facts" in kinds_for("lm.extract") and "null_facts" in kinds_for("lm.extract_working")
    for site in ("lm.extract", "lm.extract_working", "lm.reconcile"):
        assert "non_json_200" in kinds_for(site)
    for site, kind in (("lm.extract", "null_facts"), ("lm.extract_working", "null_facts"),
                       ("lm.extract", "non_json_200"), ("lm.extract_working", "non_json_200")):
        assert expected_outcome(site, kind).model_dump() == {
            "success": False, "error_code": "JSON_PARSE_FAILED", "agent_error_code": None,
            "reconcile_error_code": None, "retry_safe": True}
    for kind in ("null_ops", "non_json_200"):
        assert expected_outcome("lm.reconcile", kind).model_dump() == {
            "success": False, "error_code": None, "agent_error_code": "RECONCILE_FAILED",
            "reconcile_error_code": "JSON_PARSE_FAILED", "retry_safe": True}


def test_the_injected_non_json_200_is_the_error_lm15_raises_for_an_html_page_behind_a_200(tmp_path):
    from dspy import lm15

    from evals.faults.inject import non_json_body_error
    from hymem import HyMemoryClient
    from hymem.testing import ScriptedLM

    exc = non_json_body_error()
    assert isinstance(exc, lm15.ProviderError) and exc.status == 200
    assert "(HTTP 200, text/html, " in str(exc) and "is not JSON" in str(exc)
    client = HyMemoryClient(path=tmp_path, lm=ScriptedLM([exc]), embedder="hash")
    result = client.add([{"role": "user", "content": "I moved to Berlin."}], user_id="tim")
    assert (result.success, result.error_code) == (False, "JSON_PARSE_FAILED")


def test_l1_not_rolled_back_when_raw_messages_are_kept_before_extraction(monkeypatch):
    real = client_module.HyMemoryClient._chat_chain

    def early_l1(self, msgs, user_id, rid):
        with self.store.write() as tx:
            tx.append_l1_raw(user_id, rid, client_module.render_conversation(msgs))
        work = real(self, msgs, user_id, rid)
        work.pop("l1_raw")
        return work

    monkeypatch.setattr(client_module.HyMemoryClient, "_chat_chain", early_l1)
    found = witnesses(replay(), AnomalyKind.L1_NOT_ROLLED_BACK)
    assert found and all(w.startswith("l1_raw: +1 -0") and "Berlin" in w for _, _, w in found)


def test_double_write_when_a_request_id_is_not_remembered(monkeypatch):
    from hymem.reconciler import direct_plan
    from hymem.store import WriteTx

    monkeypatch.setattr(store_module.Store, "recorded_request", lambda self, user_id, request_id: None)
    monkeypatch.setattr(WriteTx, "record_request", lambda self, *args, **kwargs: None)
    monkeypatch.setattr(client_module, "reconcile", lambda predictor, lm, facts, candidates: direct_plan(facts))
    found = witnesses(replay(), AnomalyKind.DOUBLE_WRITE)
    assert found and any(w.startswith("re-sending the same request_id changed the store") for _, _, w in found)


def test_fault_not_reached_when_a_faulted_write_skips_the_planned_call(monkeypatch):
    real = client_module.reconcile

    def skip_for_long_ids(predictor, lm, facts, candidates):  # the control run's request ids are short
        from hymem.reconciler import direct_plan

        return direct_plan(facts) if len(predictor_calls) else real(predictor, lm, facts, candidates)

    predictor_calls: list[int] = []
    real_write = client_module.HyMemoryClient._write

    def write(self, user_id, request_id, *rest):
        predictor_calls[:] = [1] if request_id and request_id.count("/") >= 2 else []
        return real_write(self, user_id, request_id, *rest)

    monkeypatch.setattr(client_module, "reconcile", skip_for_long_ids)
    monkeypatch.setattr(client_module.HyMemoryClient, "_write", write)
    run = replay()
    found = witnesses(run, AnomalyKind.FAULT_NOT_REACHED)
    assert found and {(site, w) for site, _, w in found} == {("lm.reconcile", "lm.reconcile was not called under "
                                                                               "this fault")}
    assert all(f.outcome == "indeterminate" for f in run.faults if f.site == "lm.reconcile")


# A named human's fact next to a user memory of another subject: the offline model proposes "John lives in
# Berlin." (subject John), which gives the sweep its adversarial chances (a cross-subject merge of the user's
# memory, John's fact filed under the user); two chat turns of two messages each for the concurrency check.
JOHN = Case.model_validate({
    "id": "john", "lang": "en", "user_id": "tim", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
    "turns": [[{"role": "assistant", "name": "John", "content": "I moved to Berlin."},
               {"role": "user", "name": "Tim", "content": "Congratulations on the move!"}],
              [{"role": "user", "name": "Tim", "content": "I work at IBM."},
               {"role": "assistant", "content": "Nice."}]],
    "expect": {"facts": [{"text": "John lives in Berlin.", "subject": "John", "owner": "user"},
                         {"text": "The user works at IBM.", "subject": "user", "owner": "user"}]},
})


# A named user who moves: the second write's extraction proposes the new city for the profile.
MOVER = Case.model_validate({
    "id": "mover", "lang": "en", "user_id": "tim", "tags": [],
    "turns": [[{"role": "user", "name": "Tim", "content": "I live in Paris."}],
              [{"role": "user", "name": "Tim", "content": "I moved to Berlin."}]],
    "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}],
               "profile": {"location": "Berlin"}},
})


@pytest.fixture(scope="module")
def clean_john() -> CaseRun:
    """JOHN's replay on the correct engine, made once (before any test plants a bug) for the tests that read it."""
    return replay(JOHN)


def findings(run: CaseRun, kind: AnomalyKind) -> list[tuple[str, int, str]]:
    """(check, write, witness) of every write-contract finding of `kind` outside the faulted writes."""
    return [(f.check, f.write, f.witness) for f in run.findings if f.kind == kind]


def test_control_write_failed_when_nothing_to_remember_is_a_failure(monkeypatch):
    real = client_module.HyMemoryClient._commit

    def commit(self, user_id, rid, path, work, fingerprint):  # the bug: an empty extraction fails the write
        if not work["facts"]:
            return self._failure(rid, error_code=client_module.ErrorCode.EMPTY_RESPONSE, message="nothing to remember")
        return real(self, user_id, rid, path, work, fingerprint)

    monkeypatch.setattr(client_module.HyMemoryClient, "_commit", commit)
    small_talk = Case.model_validate({
        "id": "hello", "lang": "en", "user_id": "tim", "tags": [],
        "turns": [[{"role": "user", "content": "I moved to Berlin."}],
                  [{"role": "user", "content": "Hello! How are you today?"}]],
        "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}]},
    })
    run = replay_without_faults(small_talk)  # a control write's finding: the fault sweep adds none
    found = findings(run, AnomalyKind.CONTROL_WRITE_FAILED)
    assert [(check, write) for check, write, _ in found] == [("control", 1)]  # the small talk, not the move
    assert found[0][2].startswith("fault-free write failed with every model reply delivered intact: ")
    assert "'error_code': 'EMPTY_RESPONSE'" in found[0][2] and found[0][2].endswith("nothing to remember")
    assert [w.success for w in run.writes] == [True, False]


def test_concurrent_write_lost_when_a_duplicate_request_is_not_recognised(monkeypatch):
    # The bug: the idempotency lookup never finds the recorded request, so the second sender of a request_id
    # runs the write again and fails on the requests table's key instead of being told duplicate.
    monkeypatch.setattr(store_module.Store, "recorded_request", lambda self, user_id, request_id: None)
    found = findings(replay(JOHN), AnomalyKind.CONCURRENT_WRITE_LOST)
    assert {(check, write) for check, write, _ in found} == {("concurrency", -1)}
    assert {w for _, _, w in found} == {f"request john/c{i}: one sender succeeded, another failed instead of being "
                                        "told duplicate: success=False error_code=STORE_FAILED" for i in range(3)}


def test_concurrent_write_interleaved_when_history_groups_messages_by_speaker(monkeypatch):
    # The bug: history() returns the user's messages first, then the others', so the messages of writes sent
    # at once come back mixed (each write's block is no longer whole). A deterministic stand-in for writes
    # whose messages are stored one by one outside the user lock.
    real = client_module.HyMemoryClient.history
    monkeypatch.setattr(client_module.HyMemoryClient, "history",
                        lambda self, user_id: sorted(real(self, user_id), key=lambda m: m.role != "user"))
    found = findings(replay(JOHN), AnomalyKind.CONCURRENT_WRITE_INTERLEAVED)
    assert len(found) == 1 and found[0][:2] == ("concurrency", -1)
    assert found[0][2].startswith("history message 0 (user: ") and found[0][2].endswith("starts no written block whole")


@pytest.mark.ci_heavy  # a sweep of JOHN; the default run keeps the KATE one (run by `nox -s heavy`)
def test_cross_subject_merge_applied_when_the_reconcile_guard_is_gone(monkeypatch):
    import hymem.reconciler as reconciler_module

    monkeypatch.setattr(reconciler_module, "same_subject", lambda a, b: True)  # every subject "matches"
    found = witnesses(replay(JOHN), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED)
    assert {(site, kind) for site, kind, _ in found} == {
        ("lm.reconcile", kind) for kind in ("cross_subject_update", "cross_subject_supersede", "cross_subject_delete")}
    assert ("lm.reconcile", "cross_subject_update",
            "UPDATE of memory 1 ('The user lives in Paris.', subject user) by a fact about John ('John lives in "
            "Berlin.') was applied: the memory is now 'John lives in Berlin.' (John)") in found
    assert all(" was applied: the memory is " in w for _, _, w in found)


@pytest.mark.ci_heavy  # a second planted cross-subject merge; the default run keeps the KATE one (run by `nox -s heavy`)
def test_cross_subject_merge_applied_when_a_refused_merge_drops_its_fact(monkeypatch):
    import hymem.reconciler as reconciler_module
    from hymem.reconciler import PlannedOp

    real = reconciler_module.validate_ops

    def refused_as_noop(proposed, facts, candidates):  # the bug: the refusal keeps the target and drops the fact
        return [PlannedOp("NOOP", fact=p.fact, target_id=None, refused=p.refused)
                if p.refused and p.refused.startswith("cross-subject") and p.op == "ADD" else p
                for p in real(proposed, facts, candidates)]

    monkeypatch.setattr(reconciler_module, "validate_ops", refused_as_noop)
    found = witnesses(replay(JOHN), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED)
    assert {(site, kind) for site, kind, _ in found} == {
        ("lm.reconcile", kind) for kind in ("cross_subject_update", "cross_subject_supersede")}
    assert all(" dropped its fact about " in w for _, _, w in found)
    assert ("lm.reconcile", "cross_subject_update", "the refused UPDATE of memory 1 dropped its fact about John ('John "
            "lives in Berlin.'): it is not stored, so the merge still lost a fact") in found


# The offline model files "我妈妈也是护士" under the user (no 的): the guard must read the relative off the sentence.
MOTHER = Case.model_validate({
    "id": "mother", "lang": "zh", "user_id": "lilei", "tags": [],
    "memories": [{"text": "用户是护士。", "subject": "user", "owner": "user"}],
    "turns": [[{"role": "user", "name": "李雷", "content": "我妈妈也是护士，她在上海的医院上夜班。"}]],
    "expect": {"facts": [{"text": "用户的妈妈是护士，在上海的医院上夜班。", "subject": "用户的妈妈", "owner": "user"}]},
})


@pytest.mark.ci_heavy  # two sweeps of MOTHER; the default run keeps the KATE one (run by `nox -s heavy`)
def test_cross_subject_merge_applied_when_the_guard_trusts_a_mislabelled_relative(monkeypatch):
    import hymem.reconciler as reconciler_module

    assert witnesses(replay(MOTHER), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED) == []
    monkeypatch.setattr(reconciler_module, "fact_subject", lambda text, label: label)  # the bug: labels only
    found = witnesses(replay(MOTHER), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED)
    assert {kind for _, kind, _ in found} == {"cross_subject_update", "cross_subject_supersede", "cross_subject_delete"}
    assert any("('用户是护士。', subject user) by a fact about user ('用户妈妈也是护士，她在上海的医院上夜班。') was applied"
               in w for _, _, w in found)


def test_subjectless_misfiled_when_add_extracted_defaults_the_subject_to_the_user(monkeypatch, clean_kate):
    real = client_module._fact_from_dict

    def defaulted(index, memory, max_chars):  # the bug: no subject given means the user's, whatever the text says
        fact = real(index, memory, max_chars)
        if not memory.get("subject"):
            fact.subject = "user"
        return fact

    assert [f for f in clean_kate.findings if f.kind == AnomalyKind.SUBJECTLESS_MISFILED] == []
    monkeypatch.setattr(client_module, "_fact_from_dict", defaulted)
    found = [f for f in replay(KATE).findings if f.kind == AnomalyKind.SUBJECTLESS_MISFILED]
    assert [(f.check, f.write, f.path) for f in found] == [("subjectless", 0, "extracted")] * len(found) and found
    assert any("sent without a subject, was filed under 'user'; the harness reads 'John'" in f.witness
               for f in found)


def test_third_party_as_user_when_named_subjects_are_not_enforced(monkeypatch):
    monkeypatch.setattr(client_module, "_named_subjects", lambda facts, msgs: facts)  # the model's subject stands
    found = witnesses(replay(JOHN), AnomalyKind.THIRD_PARTY_AS_USER)
    assert [(site, kind) for site, kind, _ in found] == [("lm.extract", "third_party_as_user")]
    assert found[0][2].startswith("John's fact 'John lives in Berlin.' was stored as memory ")
    assert found[0][2].endswith("with subject 'user'")


@pytest.mark.ci_heavy  # a second planted third-party-as-user on JOHN; the default run keeps one per path (run by `nox -s heavy`)
def test_third_party_as_user_when_a_refiled_fact_is_made_the_agents(monkeypatch):
    real = client_module._named_subjects

    def refile(facts, msgs):  # the bug: a fact re-filed under a named speaker also becomes owner "agent"
        before = {id(f): f.subject for f in facts}
        out = real(facts, msgs)
        for fact in out:
            if fact.subject != before[id(fact)]:
                fact.owner = "agent"
        return out

    monkeypatch.setattr(client_module, "_named_subjects", refile)
    found = witnesses(replay(JOHN), AnomalyKind.THIRD_PARTY_AS_USER)
    assert [(site, kind) for site, kind, _ in found] == [("lm.extract", "third_party_as_user")]
    assert found[0][2].startswith("John's fact 'John lives in Berlin.' was re-filed as memory ")
    assert found[0][2].endswith("(subject 'John') with owner 'agent', not the reply's 'user'")


def test_third_party_as_ai_when_named_subjects_skip_the_assistant_label(monkeypatch, clean_john):
    real = client_module._named_subjects

    def users_only(facts, msgs):  # the bug: only facts labelled the user's are re-filed under a named human
        ai = [f for f in facts if f.subject == "assistant"]
        out = real([f for f in facts if f.subject != "assistant"], msgs)
        return out + ai

    assert witnesses(clean_john, AnomalyKind.THIRD_PARTY_AS_AI) == []
    monkeypatch.setattr(client_module, "_named_subjects", users_only)
    run = replay(JOHN)
    found = witnesses(run, AnomalyKind.THIRD_PARTY_AS_AI)
    assert [(site, kind) for site, kind, _ in found] == [("lm.extract", "third_party_as_assistant")]
    assert found[0][2].startswith("John's fact 'John lives in Berlin.' was stored as memory ")
    assert found[0][2].endswith("with subject 'assistant'")
    assert witnesses(run, AnomalyKind.THIRD_PARTY_AS_USER) == []  # the user's label is still re-filed


# A coding trajectory with a teammate on it: the working path must re-file her fact too.
TEAMMATE = Case.model_validate({
    "id": "dana", "lang": "en", "user_id": "dana", "tags": [], "path": "working",
    "turns": [[{"role": "user", "name": "Dana", "content": "Priya is on this chat too. Check the runner config."},
               {"role": "assistant", "name": "Priya", "content": "I maintain the CI runners."},
               {"role": "assistant", "content": "The runner config looks fine."}]],
    "expect": {"facts": [{"text": "Priya maintains the CI runners.", "subject": "Priya", "owner": "user"}]},
})


def test_third_party_as_user_on_the_working_path_when_it_skips_named_subjects(monkeypatch):
    real = client_module.extracted_facts

    def unfiled(outputs, msgs, *fields):  # the bug: the working path keeps the model's subjects
        return real(outputs, [], *fields) if ("experiences", "experience") in fields else real(outputs, msgs, *fields)

    assert witnesses(replay(TEAMMATE), AnomalyKind.THIRD_PARTY_AS_USER) == []
    monkeypatch.setattr(client_module, "extracted_facts", unfiled)
    found = witnesses(replay(TEAMMATE), AnomalyKind.THIRD_PARTY_AS_USER)
    assert [(site, kind) for site, kind, _ in found] == [("lm.extract_working", "third_party_as_user")]
    assert found[0][2].startswith("Priya's fact 'Priya maintains the CI runners.' was stored as memory ")


# Two named people besides the user: Kate speaks, John and the user each have a seeded memory. The adversary
# must pick the named-vs-named pair (Kate's fact against John's memory), which a guard that only tells the
# user from everyone else lets through.
KATE = Case.model_validate({
    "id": "kate", "lang": "en", "user_id": "u", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"},
                 {"text": "John lives in Rome.", "subject": "John", "owner": "user"}],
    "turns": [[{"role": "user", "content": "Where do you live now, Kate?"},
               {"role": "assistant", "name": "Kate", "content": "I moved to Berlin."}]],
    "expect": {"facts": [{"text": "Kate lives in Berlin.", "subject": "Kate", "owner": "user"}]},
})


@pytest.fixture(scope="module")
def clean_kate() -> CaseRun:
    """KATE's replay on the correct engine, made once (before any test plants a bug) for the tests that read it."""
    return replay(KATE)


def test_cross_subject_merge_applied_when_the_update_guard_compares_subject_classes(monkeypatch):
    import hymem.reconciler as reconciler_module
    from hymem.subjects import subject_class

    monkeypatch.setattr(reconciler_module, "same_subject", lambda a, b: subject_class(a) == subject_class(b))
    found = witnesses(replay(KATE), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED)
    assert ("lm.reconcile", "cross_subject_update",
            "UPDATE of memory 2 ('John lives in Rome.', subject John) by a fact about Kate ('Kate lives in "
            "Berlin.') was applied: the memory is now 'Kate lives in Berlin.' (Kate)") in found


@pytest.mark.ci_heavy  # a fourth planted cross-subject merge; the default run keeps the KATE one (run by `nox -s heavy`)
def test_cross_subject_merge_applied_when_same_subject_compares_first_words(monkeypatch):
    import hymem.reconciler as reconciler_module
    from hymem.subjects import canonical_subject

    monkeypatch.setattr(reconciler_module, "same_subject",
                        lambda a, b: canonical_subject(a).split(" ")[0] == canonical_subject(b).split(" ")[0])
    relatives = Case.model_validate({
        "id": "kin", "lang": "en", "user_id": "u", "tags": [],
        "memories": [{"text": "The user's mother lives in Paris.", "subject": "The user's mother", "owner": "user"}],
        "turns": [[{"role": "user", "content": "My sister lives in Berlin."}]],
        "expect": {"facts": [{"text": "The user's sister lives in Berlin.", "subject": "The user's sister",
                              "owner": "user"}]},
    })
    found = witnesses(replay(relatives), AnomalyKind.CROSS_SUBJECT_MERGE_APPLIED)
    assert {kind for _, kind, _ in found} >= {"cross_subject_update", "cross_subject_supersede"}
    assert all("The user's mother lives in Paris." in w for _, _, w in found)


def test_reconcile_candidates_wrong_when_retrieval_drops_one(monkeypatch):
    import hymem.store._store as store_mod

    real = store_mod.Store.search
    monkeypatch.setattr(store_mod.Store, "search", lambda self, user_id, vector, k=5, kind=None:
                        real(self, user_id, vector, k=max(1, k - 1), kind=kind))
    six = Case.model_validate({
        "id": "six", "lang": "en", "user_id": "u", "tags": [],
        "memories": [{"text": t, "subject": "user", "owner": "user"} for t in (
            "The user lives in Paris.", "The user works at IBM.", "The user likes coffee.", "The user has a dog.",
            "The user plays tennis.", "The user speaks French.")],
        "turns": [[{"role": "user", "content": "I moved to Berlin."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}]},
    })
    run = CaseReplayer(six, "planted", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0).run()
    found = findings(run, AnomalyKind.RECONCILE_CANDIDATES_WRONG)
    assert [(check, write) for check, write, _ in found] == [("prompt", 1)]
    assert found[0][2] == ("write 1, call 2 (lm.reconcile): 4 existing fact memories shown for 1 new fact(s), "
                           "expected 5 (6 live, 5 candidates per fact)")


def test_the_kate_and_six_memory_cases_are_clean_on_a_correct_engine(clean_kate):
    run = clean_kate
    assert [a for f in run.faults for a in f.anomalies] == [] and run.findings == []
    injected = {f.kind: f.injected.get("target_text") for f in run.faults if f.site == "lm.reconcile" and f.injected}
    assert set(injected.values()) == {"John lives in Rome."}  # the named-vs-named pair, not the user's memory


def test_profile_update_lost_when_the_stored_profile_wins_over_the_new_values(monkeypatch):
    # The bug (tests/mutants/32): merge_profile merges in the wrong order, so a user who moved keeps the old city.
    import json

    from hymem.store import WriteTx

    def old_values_win(self, user_id, updates):
        row = self._conn().execute("SELECT basic_info FROM profiles WHERE user_id = ?", (user_id,)).fetchone()
        updates = {**{k: v for k, v in updates.items() if v is not None}, **(json.loads(row[0]) if row else {})}
        self._conn().execute("INSERT INTO profiles (user_id, basic_info, updated_at) VALUES (?, ?, 0) ON CONFLICT"
                             "(user_id) DO UPDATE SET basic_info = excluded.basic_info", (user_id, json.dumps(updates)))

    monkeypatch.setattr(WriteTx, "merge_profile", old_values_win)
    run = replay_without_faults(MOVER)  # a control write's finding: the fault sweep adds none
    assert findings(run, AnomalyKind.PROFILE_UPDATE_LOST) == [
        ("profile", 1, "the user said location 'Berlin' in this write and the extraction proposed it, but profile() "
                       "has 'Paris' after it: {'name': 'Tim', 'location': 'Paris'}")]


def test_a_value_only_a_named_human_said_is_not_required_in_the_profile(clean_john):
    # The engine's documented filter drops John's city; the user's own name is still required, and kept.
    run = clean_john
    assert findings(run, AnomalyKind.PROFILE_UPDATE_LOST) == [] and run.profile.get("location") is None
    assert run.profile["name"] == "Tim"


def test_the_john_case_is_clean_on_a_correct_engine(clean_john):
    run = clean_john
    assert [a for f in run.faults for a in f.anomalies] == [] and run.findings == []


def replay_without_faults(case: Case) -> CaseRun:
    """The case's control run and its fault-free checks only (history, replay, reopen, the other user)."""
    run = CaseReplayer(case, "planted", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0).run()
    assert run.status == "ok", run.error
    return run


def test_the_fault_free_checks_find_nothing_on_a_correct_engine():
    assert replay_without_faults(CASE).findings == [] and replay_without_faults(JOHN).findings == []


def test_cross_user_leak_when_search_scores_every_users_vectors(monkeypatch):
    from hymem.store._index import VectorIndex

    def every_user(self, user_id, query, k, kinds):  # the bug: the user's key is dropped from the group lookup
        found = [group.top(query, k) for (_, kind), group in self._groups.items() if kind in kinds]
        if not found:
            return []
        import numpy as np

        ids, scores = np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])
        return [(int(ids[i]), float(scores[i])) for i in np.lexsort((ids, -scores))[:k]]

    monkeypatch.setattr(VectorIndex, "search", every_user)
    found = findings(replay_without_faults(CASE), AnomalyKind.CROSS_USER_LEAK)
    assert found and {check for check, _, _ in found} == {"stranger"}
    assert any(w.startswith("user 'tim/stranger''s search 'The user lives in Berlin.' returned memories of other "
                            "users (id, user): [(") and "'tim')" in w for _, _, w in found)


def test_cross_user_leak_when_request_ids_are_global(monkeypatch):
    import json

    def by_request_id_only(self, user_id, request_id):  # the bug: the per-user key forgotten in the lookup
        rows = self._read("SELECT fingerprint, result FROM requests WHERE request_id = ?", (request_id,))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    monkeypatch.setattr(store_module.Store, "recorded_request", by_request_id_only)
    found = findings(replay_without_faults(CASE), AnomalyKind.CROSS_USER_LEAK)
    assert [(check, write) for check, write, _ in found] == [("stranger", 0)]
    assert found[0][2] == ("user 'tim/stranger' writing under request_id 'tim/w0', which user 'tim' used, returned "
                           "success=True, duplicate=True, error_code=None: request ids are per user")


def test_request_id_reuse_missed_when_the_fingerprint_ignores_speaker_names(monkeypatch):
    monkeypatch.setattr(client_module, "_messages_payload", lambda msgs: [m.model_dump(exclude={"name"}) for m in msgs])
    found = findings(replay_without_faults(JOHN), AnomalyKind.REQUEST_ID_REUSE_MISSED)
    assert [(check, write) for check, write, _ in found] == [("replay", 1), ("replay", 2)]
    assert found[0][2] == ("request john/w1 re-sent with speaker name 'John' -> 'John2' changed returned "
                           "success=True, duplicate=True, error_code=None instead of REQUEST_ID_REUSED")


def test_request_id_reuse_missed_when_the_fingerprint_ignores_the_payload(monkeypatch):
    monkeypatch.setattr(client_module, "_fingerprint", lambda path, payload: path)  # every payload of a path alike
    found = findings(replay_without_faults(CASE), AnomalyKind.REQUEST_ID_REUSE_MISSED)
    assert {w.split(" changed returned")[0] for _, _, w in found} == {
        "request tim/w0 re-sent with the first memory's text", "request tim/w0 re-sent with the first memory's owner "
        "-> 'agent'", "request tim/w0 re-sent with the first memory's kind -> 'experience'", "request tim/w1 re-sent "
        "with speaker name 'Tim' -> 'Tim2'", "request tim/w1 re-sent with message 0's content"}


def test_request_id_reuse_missed_when_the_extracted_fingerprint_leaves_out_owner_and_kind(monkeypatch):
    real = client_module._fingerprint

    def text_only(path, payload):  # the bug: an extracted memory's owner and kind are not part of the fingerprint
        if path == "extracted":
            payload = [{"text": m["text"], "subject": m["subject"]} for m in payload]
        return real(path, payload)

    monkeypatch.setattr(client_module, "_fingerprint", text_only)
    found = findings(replay_without_faults(CASE), AnomalyKind.REQUEST_ID_REUSE_MISSED)
    assert [w.split(" changed returned")[0] for _, _, w in found] == [
        "request tim/w0 re-sent with the first memory's owner -> 'agent'",
        "request tim/w0 re-sent with the first memory's kind -> 'experience'"]


def test_superseded_by_wrong_when_supersede_points_at_the_old_memory_itself(monkeypatch):
    import time

    from hymem.store import WriteTx

    real = WriteTx.supersede

    def self_pointer(self, old_id, new_id):  # the bug: the row leaves the live set, the chain is lost
        real(self, old_id, new_id)
        self._conn().execute("UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                             (old_id, time.time(), old_id))

    monkeypatch.setattr(WriteTx, "supersede", self_pointer)
    run = replay(CASE)
    found = findings(run, AnomalyKind.SUPERSEDED_BY_WRONG)
    assert found[0] == ("replay", 1, "memory 1 ('The user lives in Paris.', user 'tim') is superseded by itself")
    assert {check for check, _, _ in found} == {"replay", "concurrency"}  # the concurrent writes' store too
    assert witnesses(run, AnomalyKind.SUPERSEDED_BY_WRONG)  # and in the faulted writes' states


def test_every_anomaly_kind_has_a_planted_bug_test():
    import re
    from pathlib import Path

    names = " ".join(re.findall(r"^def (test_\w+)", "\n".join(
        path.read_text(encoding="utf-8") for path in Path(__file__).parents[1].rglob("test_*.py")), re.M))
    untested = {kind.value for kind in AnomalyKind if kind.value.lower() not in names}
    assert untested == set(), f"anomaly kinds no test plants a bug for: {sorted(untested)}"


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


# A fact and an experience of one user, and a write that adds one more fact: search(k) must merge the kinds to k.
TWO_KINDS = Case.model_validate({
    "id": "two-kinds", "lang": "en", "user_id": "tim", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"},
                 {"text": "When pytest failed with ImportError, installing the missing package fixed it.",
                  "subject": "user", "owner": "user", "kind": "experience"}],
    "turns": [[{"role": "user", "name": "Tim", "content": "I work at IBM."}]],
    "expect": {"facts": [{"text": "The user works at IBM.", "subject": "user", "owner": "user"}]},
})


def test_read_wrong_when_search_answers_in_id_order(monkeypatch):
    real = store_module.Store.search

    def id_order(self, user_id, vector, k=5, kind=None):  # the bug: the hits come back oldest first, not best first
        return sorted(real(self, user_id, vector, k=k, kind=kind), key=lambda m: m.id)

    monkeypatch.setattr(store_module.Store, "search", id_order)
    found = findings(replay_without_faults(JOHN), AnomalyKind.READ_WRONG)
    assert found and {check for check, _, _ in found} == {"reads"}
    assert any(w.endswith(": not best first") for _, _, w in found)


def test_read_wrong_when_search_merges_kinds_beyond_k(monkeypatch):
    import numpy as np

    from hymem.store._index import VectorIndex

    def uncut(self, user_id, query, k, kinds):  # the bug: each kind's top k merged, the merge never cut to k
        found = [self._groups[(user_id, kind)].top(query, k) for kind in kinds if (user_id, kind) in self._groups]
        if not found:
            return []
        ids, scores = np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])
        return [(int(ids[i]), float(scores[i])) for i in np.lexsort((ids, -scores))]

    monkeypatch.setattr(VectorIndex, "search", uncut)
    found = findings(replay_without_faults(TWO_KINDS), AnomalyKind.READ_WRONG)
    assert ("reads", 1, "search('The user works at IBM.', k=1) answered 2 memories") in found


def test_read_wrong_when_get_all_keeps_superseded_memories(monkeypatch):
    def live_query(user_id, kind, columns):  # the bug: the live filter forgets superseded rows
        return f"SELECT {columns} FROM memories WHERE user_id = ? AND deleted_at IS NULL", (user_id,)

    monkeypatch.setattr(store_module.Store, "_live_query", staticmethod(live_query))
    found = findings(replay_without_faults(CASE), AnomalyKind.READ_WRONG)
    assert found == [("reads", 1, "get_all() answered ids [1, 2], the live rows are [2] (oldest first)")]



# A named user who states a city, then a job, then speaks unnamed: the profile keeps all three values.
SETTLER = Case.model_validate({
    "id": "settler", "lang": "en", "user_id": "tim", "tags": [],
    "turns": [[{"role": "user", "name": "Tim", "content": "I live in Paris."}],
              [{"role": "user", "name": "Tim", "content": "I work as a nurse."}],
              [{"role": "user", "content": "I like tea."}]],
    "expect": {"profile": {"name": "Tim", "location": "Paris", "occupation": "nurse"}},
})


def test_profile_update_lost_when_a_merge_replaces_the_stored_profile(monkeypatch):
    # The bug (new mutant profile-merge-replaces): basic_info becomes the latest write's fields only.
    import json

    from hymem.store import WriteTx

    def replaces(self, user_id, updates):
        self._conn().execute("INSERT INTO profiles (user_id, basic_info, updated_at) VALUES (?, ?, 0) ON CONFLICT"
                             "(user_id) DO UPDATE SET basic_info = excluded.basic_info", (user_id, json.dumps(updates)))

    assert findings(replay_without_faults(SETTLER), AnomalyKind.PROFILE_UPDATE_LOST) == []
    monkeypatch.setattr(WriteTx, "merge_profile", replaces)
    found = findings(replay_without_faults(SETTLER), AnomalyKind.PROFILE_UPDATE_LOST)
    assert [(check, write, w.split(":")[0]) for check, write, w in found] == [
        ("profile", 1, "the user stated location 'Paris' in an earlier write and this write proposed no location, "
                       "but profile() has None after it"),
        ("profile", 2, "the user stated location 'Paris' in an earlier write and this write proposed no location, "
                       "but profile() has None after it")]  # the unnamed write proposes nothing: no merge


def test_history_mismatch_when_history_parses_every_write_as_one_text(monkeypatch):
    # The bug (new mutant history-one-parse): one write's name line names the user of a later, unnamed write.
    from hymem.render import parse_history

    def joined(self, user_id):
        return parse_history("\n".join(self.store.l1_raw(user_id)), history_limit=self.history_limit)

    monkeypatch.setattr(client_module.HyMemoryClient, "history", joined)
    found = findings(replay_without_faults(SETTLER), AnomalyKind.HISTORY_MISMATCH)
    assert [(check, write) for check, write, _ in found] == [("history", 2)]
    assert found[0][2].startswith("message 2: wrote user/None (11 characters), history has user/'Tim'")


# Two user facts in one write next to a user memory: the sweep's double_update makes both UPDATE that memory.
TWO_FACTS = Case.model_validate({
    "id": "two-facts", "lang": "en", "user_id": "tim", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
    "turns": [[{"role": "user", "content": "I moved to Berlin. I work at IBM."}]],
})


def test_a_double_update_is_refused_once_and_keeps_both_facts_on_a_correct_engine():
    run = replay(TWO_FACTS)
    injected = [f for f in run.faults if f.kind == "double_update"]
    assert [(f.outcome, f.injected["fact_texts"]) for f in injected] == [
        ("ok", ["The user lives in Berlin.", "The user works at IBM."])]
    assert [a for f in run.faults for a in f.anomalies] == [] and run.findings == []


def test_update_wrong_when_a_second_update_of_one_memory_overwrites_the_first(monkeypatch):
    import hymem.reconciler as reconciler_module

    real = reconciler_module.validate_ops

    def no_second_refusal(proposed, facts, candidates):  # the bug: every UPDATE applies, the first one is lost
        ops = real(proposed, facts, candidates)
        return [reconciler_module.PlannedOp("UPDATE", fact=op.fact, target_id=proposed[i]["id"])
                if op.refused and "already changed" in op.refused else op for i, op in enumerate(ops)]

    monkeypatch.setattr(reconciler_module, "validate_ops", no_second_refusal)
    found = witnesses(replay(TWO_FACTS), AnomalyKind.UPDATE_WRONG)
    assert found == [("lm.reconcile", "double_update", "two UPDATEs of memory 1 ('The user lives in Paris.') in one "
                      "write: ['The user lives in Berlin.'] not live after it (the second op on a memory already "
                      "changed must be refused and its fact added, never overwrite the first)")]


@pytest.mark.ci_heavy  # a second planted UPDATE_WRONG; the default run keeps the overwrite one (run by `nox -s heavy`)
def test_update_wrong_when_an_update_stamps_created_at(monkeypatch):
    from hymem.store import WriteTx

    real = WriteTx.update_memory

    def stamps_created(self, memory_id, *args):  # the bug: created_at moves, updated_at stays
        before = self._conn().execute("SELECT updated_at FROM memories WHERE id = ?", (memory_id,)).fetchone()[0]
        real(self, memory_id, *args)
        self._conn().execute("UPDATE memories SET created_at = updated_at, updated_at = ? WHERE id = ?",
                             (before, memory_id))

    monkeypatch.setattr(WriteTx, "update_memory", stamps_created)
    found = witnesses(replay(TWO_FACTS), AnomalyKind.UPDATE_WRONG)
    # the double UPDATE's first op, and the sweep's same-subject UPDATE (evals.faults.adversarial), both update in place
    assert sorted(f[:2] for f in found) == [("lm.reconcile", "double_update"), ("lm.reconcile", "same_subject_update")]
    double = next(w for _, kind, w in found if kind == "double_update")
    assert double.startswith("memory 1 updated in place to 'The user lives in Berlin.': created_at ")


@pytest.mark.ci_heavy  # a third planted PROFILE_UPDATE_LOST; the default run keeps two (run by `nox -s heavy`)
def test_profile_update_lost_when_the_models_name_wins_over_the_user_message(monkeypatch):
    # The bug (new mutant profile-model-name-wins): the role=user name only fills a name the model left out.
    real = client_module._profile_updates

    def model_name_wins(profile, msgs):
        model = (profile.model_dump() if hasattr(profile, "model_dump") else dict(profile or {})).get("name")
        updates = real(profile, msgs)
        return {**updates, "name": model} if model and model.casefold() not in {
            (m.name or "").casefold() for m in msgs if m.role == "assistant"} else updates

    monkeypatch.setattr(client_module, "_profile_updates", model_name_wins)
    found = witnesses(replay(MOVER), AnomalyKind.PROFILE_UPDATE_LOST)
    assert found == [("lm.extract", "profile_other_name", "the user is named 'Tim' by the role=user message, the "
                      "extraction proposed 'Alex', and profile() has name 'Alex'")] * 2
