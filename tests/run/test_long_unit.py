"""A long unit shows its progress from inside (issue 35): each control write reported, the bar told."""

from __future__ import annotations

import gc

import pytest

import evals.run.long_lived as long_lived
import evals.run.runner as runner
import evals.run.whole_store as whole_store
from evals.arms.hymem_system import HymemSystem
from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.record import AnomalyKind
from evals.run.replay import CaseReplayer, UnitModels
from evals.run.whole_store import SMALL_STORE, SPREAD, WholeStoreSchedule
from hymem import HashEmbedder
from hymem.offline import offline_lm


def _case(turns: int) -> Case:
    return Case.model_validate({
        "id": "long", "lang": "en", "user_id": "ana", "tags": [], "memories": [],
        "turns": [[{"role": "user", "name": "Ana", "content": f"I like tea number {i}."}] for i in range(turns)],
        "expect": {"facts": [{"text": "The user likes tea.", "subject": "user", "owner": "user"}]}})


def test_the_replayer_reports_each_control_write_as_it_finishes():
    seen: list[tuple[int, int]] = []
    run = CaseReplayer(_case(3), "long", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0, on_write=lambda done, total: seen.append((done, total))).run()
    assert run.status == "ok", run.error
    assert seen == [(1, 3), (2, 3), (3, 3)]


class _Bar:
    def __init__(self) -> None:
        self.postfix: list[str] = []

    def set_postfix_str(self, text: str) -> None:
        self.postfix.append(text)


def test_the_cases_bar_shows_a_long_units_writes_and_not_a_finished_one(monkeypatch):
    monkeypatch.setattr(runner, "LONG_UNIT_SECONDS", 0.0)
    bar = _Bar()
    show = runner._unit_progress(bar, "long", enabled=True)
    assert show is not None
    show(5, 10)
    show(10, 10)  # the unit is done: the bar's own count says so
    assert len(bar.postfix) == 1 and bar.postfix[0].startswith("long: write 5/10 (")
    assert runner._unit_progress(bar, "long", enabled=False) is None


# --- long cases linear (issue 35, point 3) ----------------------------------------------------------------------------

def test_whole_store_reads_are_due_after_every_write_of_a_short_case_and_amortised_in_a_long_one():
    short = WholeStoreSchedule(5)
    assert all(short.due(i, i) for i in range(5))
    writes = 10_000
    schedule = WholeStoreSchedule(writes)
    due = [i for i in range(writes) if schedule.due(i, i)]  # one live memory more per write
    assert due[:SMALL_STORE + 1] == list(range(SMALL_STORE + 1)) and due[-1] == writes - 1
    rows_read = sum(due)  # a whole-store read after write i answers i rows
    assert rows_read <= (SPREAD + 1) * writes + SMALL_STORE ** 2  # O(N) in all, not N²/2
    assert all(b - a <= b // SPREAD + 1 for a, b in zip(due, due[1:], strict=False))  # never far apart


def test_the_case_end_reads_the_whole_store_when_the_last_write_failed():
    schedule = WholeStoreSchedule(200)
    for i in range(150):
        if schedule.due(i, i):
            schedule.succeeded(i, checked=True)
        else:
            schedule.succeeded(i, checked=False)
    assert schedule.pending() in (None, 149)
    schedule.succeeded(149, checked=False)
    assert schedule.pending() == 149


@pytest.mark.parametrize("bug", ["get_all", "history"])
def test_a_whole_store_read_bug_that_starts_late_in_a_long_case_is_found(monkeypatch, bug):
    """A get_all() that drops the oldest memory, or a history() that drops the first message, once the store
    holds more than SMALL_STORE memories: found although not every write reads the whole store any more."""
    monkeypatch.setattr(whole_store, "SMALL_STORE", 3)
    turns = 14
    if bug == "get_all":
        real = HymemSystem.memories
        monkeypatch.setattr(HymemSystem, "memories",
                            lambda self, user: (lambda rows: rows[1:] if len(rows) > 5 else rows)(real(self, user)))
        kind = AnomalyKind.READ_WRONG
    else:
        real_history = HymemSystem.history
        monkeypatch.setattr(HymemSystem, "history",
                            lambda self, user: (lambda m: m[1:] if len(m) > 5 else m)(real_history(self, user)))
        kind = AnomalyKind.HISTORY_MISMATCH
    run = CaseReplayer(_case(turns), "long", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0).run()
    assert run.status == "ok", run.error
    assert any(f.kind == kind for f in run.findings), run.findings
    clean = CaseReplayer(_case(turns), "long", "offline",
                         UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()),
                         FaultPlan.parse("none"), seed=0)
    monkeypatch.undo()
    monkeypatch.setattr(whole_store, "SMALL_STORE", 3)
    assert [f.kind for f in clean.run().findings] == []


def test_the_reconcile_candidates_are_checked_on_every_write_of_a_long_case(monkeypatch):
    """Candidates off by one (the engine retrieves k - 1): every write with at least k live memories before it is
    flagged, the writes without the whole-store reads too (checked against the store's live rows)."""
    from hymem.client import HyMemoryClient

    monkeypatch.setattr(whole_store, "SMALL_STORE", 3)
    real_init = HyMemoryClient.__init__

    def off_by_one(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.candidates_per_fact -= 1

    monkeypatch.setattr(HyMemoryClient, "__init__", off_by_one)
    turns, k = 16, HymemSystem.candidates_per_fact
    run = CaseReplayer(_case(turns), "long", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0).run()
    assert run.status == "ok", run.error
    flagged = {f.write for f in run.findings if f.kind == AnomalyKind.RECONCILE_CANDIDATES_WRONG}
    assert flagged == set(range(k, turns))


# --- a long unit's heap settled (issue 35, point 3: the collector's full scans) --------------------------------------

def _replay(turns: int, on_write=None):
    run = CaseReplayer(_case(turns), "long", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0, on_write=on_write).run()
    assert run.status == "ok", run.error
    return run


def _outcome(run):
    """What a run learned, without its timings."""
    return ([f.model_dump() for f in run.findings], [(w.success, w.codes) for w in run.writes],
            [m["text"] for m in run.memories])


def test_a_long_unit_freezes_what_it_keeps_and_unfreezes_it_at_its_end_with_the_same_findings(monkeypatch):
    frozen: dict[int, int] = {}
    monkeypatch.setattr(long_lived, "FIRST", 10**9)
    plain = _replay(25, on_write=lambda done, total: frozen.setdefault(done, gc.get_freeze_count()))
    assert set(frozen.values()) == {0}  # a unit shorter than FIRST writes never freezes
    monkeypatch.setattr(long_lived, "FIRST", 10)
    monkeypatch.setattr(long_lived, "EVERY", 5)
    frozen.clear()
    settled = _replay(25, on_write=lambda done, total: frozen.setdefault(done, gc.get_freeze_count()))
    # on_write runs before the settle of its own write: write 11 sees the heap frozen after write 10, and the later
    # settles (15, 20) add what the writes since kept (the unit's records grow)
    assert frozen[10] == 0 and 0 < frozen[11] < frozen[21]
    assert gc.get_freeze_count() == 0  # the unit's end unfroze it
    assert _outcome(settled) == _outcome(plain)


def test_the_heap_stays_frozen_until_the_last_settling_unit_ends_and_is_left_alone_with_the_collector_off():
    first, second = long_lived.SettledHeap(first=1, every=1), long_lived.SettledHeap(first=1, every=1)
    with first:
        with second:
            second.written(1, 2)
            first.written(1, 2)
        assert gc.get_freeze_count() > 0  # `first` still runs: the heap stays frozen
    assert gc.get_freeze_count() == 0
    with long_lived.SettledHeap(first=1, every=1) as heap:
        heap.written(2, 2)  # after the unit's last write: it ends, nothing to settle
        assert gc.get_freeze_count() == 0
    gc.disable()
    try:
        with long_lived.SettledHeap(first=1, every=1) as heap:
            heap.written(1, 2)
            assert gc.get_freeze_count() == 0
    finally:
        gc.enable()
