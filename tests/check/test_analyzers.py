"""The write-contract checks as registered analyzers (evals.check.analyzers): what each may raise is data, and
the data holds — on tiny contexts with exact witnesses, and on a replay of a planted bug."""

from __future__ import annotations

from typing import get_args

import pytest

import hymem.store._store as store_module
from evals.check.analyzers import RAISED_ELSEWHERE, REGISTRY, WALK_KINDS, Registry, UndeclaredAnomaly
from evals.check.context import Concurrent, FaultedWrite, NaturalFailure, Planted, Reopen, Site
from evals.faults.plan import Expected
from evals.record import AnomalyKind, Codes, WriteFailure
from evals.record._records import Check
from tests.check.test_anomaly_kinds import CASE, replay
from tests.conftest import store_state, write_outcome

K = AnomalyKind


def test_every_anomaly_kind_is_raised_by_a_registered_check_or_documented_as_raised_elsewhere():
    unaccounted = set(AnomalyKind) - REGISTRY.kinds() - set(RAISED_ELSEWHERE)
    assert unaccounted == set()


def test_a_case_finding_carries_a_check_name_the_record_knows():
    case_checks = {a.check for a in REGISTRY.analyzers if issubclass(a.context, Site)}
    assert case_checks <= set(get_args(Check))


def test_a_check_that_returns_a_kind_it_did_not_declare_is_refused():
    registry = Registry()

    @registry.register(Site, "control", {K.CONTROL_WRITE_FAILED})
    def says_history(ctx: Site) -> list[tuple[AnomalyKind, str]]:
        return [(K.HISTORY_MISMATCH, "not mine to say")]

    with pytest.raises(UndeclaredAnomaly, match="says_history returned"):
        registry.findings(Site(write=0, path="chat"))


def test_checks_run_in_registration_order_and_a_fresh_only_check_drops_what_came_before():
    registry = Registry()
    registry.register(Site, "control", {K.PARTIAL_WRITE})(lambda ctx: [(K.PARTIAL_WRITE, "a")])
    registry.register(Site, "replay", {K.PARTIAL_WRITE, K.DOUBLE_WRITE}, fresh_only=True)(
        lambda ctx: [(K.PARTIAL_WRITE, "a"), (K.DOUBLE_WRITE, "b")])
    found = registry.findings(Site(write=3, path="chat"))
    assert [(f.check, f.kind, f.witness, f.write, f.path) for f in found] == [
        ("control", K.PARTIAL_WRITE, "a", 3, "chat"), ("replay", K.DOUBLE_WRITE, "b", 3, "chat")]


def test_a_degraded_success_is_named_with_its_leftovers_and_a_fault_that_never_fired_too():
    before = store_state(messages=[])
    after = store_state(messages=[{"id": "m1", "role": "user", "content": "I like tea."}])
    ctx = FaultedWrite(expected=Expected(success=False), result=write_outcome(True), before=before, after=after,
                       control_after=before, retry_result=write_outcome(True), retry_after=before, repeat_after=before,
                       dim=4, fired=False, site="lm.extract")
    assert [(a.kind, a.witness) for a in REGISTRY.anomalies(ctx)] == [
        (K.DEGRADED_SUCCESS, 'success=true under a fault that must fail; ops=0; state diff: messages: +1 -0 e.g. '
                             '{"content": "I like tea.", "id": "m1", "role": "user"}'),
        (K.L1_NOT_ROLLED_BACK, 'messages: +1 -0 e.g. {"content": "I like tea.", "id": "m1", "role": "user"}'),
        (K.FAULT_NOT_REACHED, "lm.extract was not called under this fault"),
    ]


def test_a_failed_retry_of_a_natural_failure_that_left_a_row_is_a_partial_write():
    empty = store_state(memories=[])
    left = store_state(memories=[{"id": 1, "user_id": "u", "text": "x"}])
    failure = WriteFailure(cause="parse", site="lm.extract", detail="not JSON")
    broken = write_outcome(False).model_copy(update={"prompts": [{"site": "lm.extract", "text": "", "reply": "{facts: ["}]})
    ctx = NaturalFailure(write=2, path="chat", failure=failure, codes=Codes(success=False), before=empty,
                         after=empty, dim=4, retry=broken, retry_after=left)
    found = REGISTRY.findings(ctx)
    assert [(f.check, f.kind, f.write, f.witness) for f in found] == [
        ("natural", K.PARTIAL_WRITE, 2, 'after a failed retry: memories: +1 -0 e.g. {"id": 1, "text": "x", '
                                        '"user_id": "u"}')]


def test_a_stale_index_served_on_reopen_is_named_with_the_snapshot_it_came_from():
    ctx = Reopen(reopened={"tea": [(1, 0.9)]}, planted=[Planted(source="snap-2", answers={"tea": [(7, 0.9)]})])
    found = REGISTRY.findings(ctx)
    assert [(f.check, f.kind, f.write, f.witness) for f in found] == [
        ("reopen", K.REOPEN_DIVERGED, -1, "a stale index file (snap-2's) was served on reopen: search returned "
                                          "{'tea': [(7, 0.9)]}, the current index {'tea': [(1, 0.9)]}")]


def test_a_concurrent_write_that_raised_is_an_engine_exception_of_the_concurrency_check():
    calls = [("chat", [], "c/c0"), ("chat", [], "c/c0")]
    ctx = Concurrent(calls=calls, results=[write_outcome(True), RuntimeError("lock")], history=[], episodes=1,
                     state=store_state(memories=[]), dim=4)
    raised = [f for f in REGISTRY.findings(ctx) if f.kind == K.ENGINE_EXCEPTION]
    assert [(f.check, f.witness) for f in raised] == [("concurrency", "request c/c0 raised RuntimeError: lock")]


def test_a_replay_of_a_planted_bug_reports_only_kinds_its_checks_declared(monkeypatch):
    """An index that never drops a superseded memory's vector: the rollback check and the write-contract checks
    find orphans; each kind found is one its check declared (the registry refuses any other as the replay runs)."""
    def keep_removed(index, changes):
        for memory_id, live in changes.items():
            if live is not None and memory_id not in index:
                index.add(memory_id, *live)

    monkeypatch.setattr(store_module, "apply_changes", keep_removed)
    run = replay(CASE)
    declared: dict[str, set[AnomalyKind]] = {}
    for a in REGISTRY.analyzers:
        declared.setdefault(a.check, set()).update(a.kinds)
    for check in ("walk", "limits"):
        declared.setdefault(check, set()).update(WALK_KINDS)
    declared.setdefault("reopen", set()).update(WALK_KINDS & {K.REOPEN_DIVERGED})
    kinds = [(f.check, f.kind) for f in run.findings] + [(None, a.kind) for f in run.faults for a in f.anomalies]
    assert kinds, "the planted bug must be found"
    for check, kind in kinds:
        allowed = set().union(*declared.values()) if check is None else declared[check]
        assert kind in allowed or kind in RAISED_ELSEWHERE, (check, kind)
