"""Replay one case through the engine: a fault-free control run, then every planned fault.

Before each write of the control run the store directory is snapshotted;
each faulted run restores that snapshot instead of replaying the case prefix,
so a sweep's cost grows linearly with the number of writes.
"""

from __future__ import annotations

import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.arms.accounting import AttemptLog
from evals.arms.base import (
    MemorySystem,
    ReopenSystem,
    offers_concurrency,
    offers_cross_user,
    offers_history,
    offers_live_snapshot,
    offers_ranked_search,
    offers_reopen,
)
from evals.arms.hymem_system import HymemSystem
from evals.cases.dataset import Case
from evals.cases.gold import case_gold
from evals.check.analyzers import REGISTRY, WALK_KINDS, UndeclaredAnomaly, record_prompts
from evals.check.context import (
    AfterWrite,
    Concurrent,
    ControlWrite,
    FaultedWrite,
    NaturalFailure,
    Planted,
    Probe,
    Reads,
    Reopen,
    Stranger,
    Subjectless,
)
from evals.check.natural import expected_codes, reached_provider, why_failed
from evals.check.op_walk import walk_case
from evals.check.write_contract import changed_payloads, history_block, live_rows, stated_profile
from evals.core.prompt_reading import Said
from evals.core.rows import is_live
from evals.core.store_state import StoreState, user_live_memories
from evals.faults.adversarial import ADVERSARIAL_KINDS
from evals.faults.plan import Fault, FaultPlan
from evals.record import (
    Anomaly,
    AnomalyKind,
    CaseRun,
    Codes,
    FaultRecord,
    Finding,
    WriteFailure,
    WriteRecord,
)
from evals.record._records import Check, recorded_calls
from evals.run.long_lived import SettledHeap
from evals.run.scratch import scratch_dir
from evals.run.whole_store import WholeStoreSchedule
from hymem.validation import InputValidationError

CONCURRENT_SENDERS = 2  # threads sending each request_id of a case at once in the concurrency check
SUBJECTLESS_SUFFIX = "/subjectless"  # the user of the subjectless-seeds check, on a store of its own
STRANGER_SUFFIX = "/stranger"  # the other user of the cross-user check: the case's user_id with this suffix


def case_writes(case: Case) -> list[tuple[str, Any]]:
    """The writes of a case, in order: seeded memories (one add_extracted), then one call per turn."""
    writes: list[tuple[str, Any]] = []
    if case.memories:
        writes.append(("extracted", [m.model_dump(exclude_none=True) for m in case.memories]))
    for turn in case.turns:
        writes.append(("working" if case.path == "working" else "chat", turn))
    return writes


@dataclass(frozen=True, kw_only=True)
class UnitModels:
    """How a unit reaches its models: one object because these travel together. The runner and a Ray worker make
    them from the unit's provider, and the replayer hands them on as a set to the hymem engine it builds; each
    caller names what it passes instead of lining up five positional and keyword arguments.

    `lm_factory(case)`: the unit's LM; `embedder`: its embedder; `program`: a tuned MemoryProgram (run --program),
    None for the built-in prompts; `accounting`: the provider (`evals.arms.providers.Provider`: attempts,
    connection limit, retries), which also tells the replayer whether the model is reached (and paid for) over
    HTTP, when checks that only exercise the engine are skipped; `cache`: the HTTP provider's ResponseCache, or
    None. An engine other than hymem (`system`) makes its own models; the replayer then reads `accounting` alone.
    """

    lm_factory: Callable[[Case], Any] | None = None
    embedder: Any = None
    program: Any = None
    accounting: Any = None
    cache: Any = None


class CaseReplayer:
    """Runs one case for one provider on fresh stores in a temporary directory.

    `models`: the unit's models (`UnitModels`); its `program` is copied for this unit, so units on other threads
    never share predictor objects.
    `system`: `(case, log) -> MemorySystem` for an engine other than hymem (see `evals.arms`);
    None replays hymem with `models`.
    `on_write`: called with (writes done, writes in the case) after each control write and its checks, so a
    long unit shows progress from inside (issue 35).
    `journal`: called with (the write's record, the unit's findings, its attempts) after the same point, so the
    runner saves each finished write while the unit runs (`evals.record.JournalWriter.write_done`).
    """

    def __init__(self, case: Case, dataset: str, provider: str, models: UnitModels, plan: FaultPlan, seed: int, *,
                 system: Callable[[Case, AttemptLog], MemorySystem] | None = None,
                 epoch: int = 0, on_write: Callable[[int, int], None] | None = None,
                 journal: Callable[[WriteRecord, list[Finding], list[Any]], None] | None = None):
        self.case, self.dataset, self.provider, self.epoch = case, dataset, provider, epoch
        self.models, self.plan, self.seed = models, plan, seed
        self.program = models.program.deepcopy() if models.program is not None else None
        self.accounting = models.accounting  # the evals.arms.providers.Provider: attempts, connection limit, retries
        self.log = AttemptLog(provider, case.id)
        self.on_write, self.journal = on_write, journal
        self._prompts: dict[int, list[dict[str, str]]] = {}  # control write → its model calls (and replies)
        self._stated: dict[str, str] = {}  # profile field -> the value the user stated last (control writes)
        self._settled: tuple[int, StoreState] | None = None  # (write, the store's state once its checks were done)
        self.system = system(case, self.log) if system is not None else HymemSystem(
            case, models.lm_factory, models.embedder, plan, self.program, accounting=models.accounting,
            cache=models.cache, log=self.log, epoch=epoch)

    def run(self) -> CaseRun:
        start = time.perf_counter()
        result = CaseRun(case_id=self.case.id, dataset=self.dataset, provider=self.provider, system=self.system.name,
                         transport=getattr(self.system, "transport", "in-process"),
                         epoch=self.epoch, lang=self.case.lang, tags=list(self.case.tags), gold=case_gold(self.case),
                         status="ok",
                         profile={} if self.system.keeps_profile else None)
        # the unit's kept state out of the collector's full scans every so many writes (`evals.run.long_lived`)
        with scratch_dir(prefix="hymem-case-") as tmp, SettledHeap() as heap:  # tmp removed in the background
            try:
                self._run(tmp, result, heap)
            except Exception as exc:  # a harness or provider failure is data, never a silent zero
                result.status = "infra_error"
                result.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
            finally:
                self.system.shutdown()
        result.attempts = list(self.log.rows)
        result.seconds = time.perf_counter() - start
        return result

    def _run(self, tmp: Path, result: CaseRun, heap: SettledHeap) -> None:
        store = tmp / "control"
        writes = case_writes(self.case)
        system = self.system
        sweep = self.plan.name != "none"  # faulted runs restore a snapshot taken before each write
        snapshots: list[Path] = []
        states: list[StoreState] = []
        written: list[Said] = []  # what history() must hold: the successful chat writes' messages
        latest: StoreState | None = None  # the open store's state when nothing was written since it was read
        live = offers_live_snapshot(system)
        schedule = WholeStoreSchedule(len(writes))  # the writes after which the whole store is read
        system.open(store)
        try:
            for index, (path, payload) in enumerate(writes):
                if sweep:
                    system.close()  # persist the store and release it, then snapshot its files
                    snapshots.append(_snapshot(store, tmp / f"snap-{index}"))
                    states.append(system.snapshot(store))
                    system.open(store)
                    latest = states[index]
                elif latest is None:  # what a failed write must leave unchanged
                    latest = self._state_between(store, live)
                before, latest = latest, None
                full = schedule.due(index, self._live_before(index))
                record = self._control_write(index, path, payload, result.findings, full=full)
                result.writes.append(record)
                if record.success:
                    latest = self._after_write(store, index, path, payload, record, written, result.findings,
                                               full=full)
                    schedule.succeeded(index, checked=full)
                elif record.failure is not None and record.failure.cause != "engine":
                    latest = self._natural_failure(tmp, store, index, path, payload, record, before,
                                                   result.findings)
                if self.journal is not None:
                    self.journal(record, result.findings, self.log.rows)
                if self.on_write is not None:
                    self.on_write(index + 1, len(writes))
                heap.written(index + 1, len(writes))
            last = schedule.pending()
            if last is not None:  # no whole-store read since the last successful write: the case's end makes one
                latest = self._whole_store_reads(store, last, writes[last], result.writes[last], written, latest,
                                                 result.findings)
            result.memories = system.memories(self.case.user_id)
            if system.keeps_profile:
                result.profile = system.profile(self.case.user_id)
            # the op walk drives the engine with the case's writes: only where one of them went through (an engine
            # that failed every write already has that finding, once)
            self._reopen(tmp, store, result.findings, stale_sources(result.writes, snapshots), latest,
                         walk=any(w.success for w in result.writes))
            self._stranger(tmp, store, writes, result.writes, result.findings)
            self._subjectless(tmp, writes, result.findings)
        finally:
            _close_quietly(system)
        if not sweep:
            return
        states.append(system.snapshot(store))
        for index, (path, payload) in enumerate(writes):
            write = result.writes[index]
            natural = write.failure is not None and write.failure.cause != "engine"
            if not write.success and not natural:  # the engine's failure: no reference to check faulted runs by
                continue
            unit_key = f"{self.provider}|{self.case.id}|{index}"
            faults = system.faults_for_write(self.plan, write.reached, self.seed, unit_key)
            if natural:
                # Planned on the write as it really ran: only at the sites it reached before its reply broke it
                # (`reached`), and only faults that must fail it (one that must not would meet the same broken
                # reply downstream); the reference is the store as it was.
                faults = [f for f in faults if not system.expected_outcome(f.site, f.kind).success]
            for fault in faults:
                result.faults.append(self._faulted(tmp, index, path, payload, fault, snapshots[index],
                                                   states[index], states[index + 1], natural_control=natural))
        self._concurrently(tmp, writes, result.findings)

    def _after_write(self, store: Path, index: int, path: str, payload: Any, record: WriteRecord,
                     written: list[Said], findings: list[Finding], *, full: bool = True) -> StoreState | None:
        """History round-trip and an idempotent replay of the same request_id, after a successful write.

        Only for a system that offers history() and reads its open store (hymem); another engine's idempotency
        is still checked by the faulted runs' re-sent request ids. Returns the store's state after the replay
        (None when not read), which the reopen check takes as its state before closing when nothing was
        written since. `full`: history() and the reads that answer the whole store are made too (see
        `evals.run.whole_store`)."""
        if not offers_history(self.system):
            return None
        seen = frozenset(f.witness for f in findings if f.kind == AnomalyKind.SUPERSEDED_BY_WRONG)
        ctx = AfterWrite(write=index, path=path, user_id=self.case.user_id, payload=payload, record=record,
                         prompts=self._prompts.get(index, []), stated=dict(self._stated),
                         ops_before=self._ops_before(index), reported_superseded=seen)
        try:
            self._observe_after_write(ctx, store, written, full)
        except EngineRaised as exc:
            findings += self._after_write_findings(ctx, written)
            findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check="replay", write=index, path=path,
                                    witness=f"after write {index}: {exc}"))
            return None
        except Exception:  # an infra error: what was checked before it stays on the record
            findings += self._after_write_findings(ctx, written)
            raise
        findings += self._after_write_findings(ctx, written)
        self._settled = (index, ctx.settled) if ctx.settled is not None else self._settled
        return ctx.settled

    def _after_write_findings(self, ctx: AfterWrite, written: list[Said]) -> list[Finding]:
        found = REGISTRY.findings(ctx)
        if ctx.history is not None and any(f.kind == AnomalyKind.HISTORY_MISMATCH for f in found):
            written[:] = [Said(**m) for m in ctx.history]  # report each divergence once
        return found

    def _observe_after_write(self, ctx: AfterWrite, store: Path, written: list[Said], full: bool = True) -> None:
        """Fill `ctx` in as the engine answers: history, profile, the state, a replay, changed payloads, reads
        (history and the reads only when `full`)."""
        system, user, path, payload, record = self.system, self.case.user_id, ctx.path, ctx.payload, ctx.record
        assert offers_history(system)
        if path == "chat":
            written += history_block(payload, system.history_limit)
        if full:
            ctx.written = list(written)
            ctx.history = engine_call(system.history, user)
        if path == "chat":
            ctx.profile = system.profile(user)
            self._stated.update(stated_profile(payload, ctx.prompts))
        ctx.written_state = system.snapshot(store)
        self.log.context = {"write": ctx.write, "unit": "replay"}
        ctx.replayed = engine_call(system.write, path, payload, user, record.request_id)
        ctx.replayed_state = after = system.snapshot(store)
        for what, changed in changed_payloads(path, payload):  # refused before any model call: no cost
            try:
                ctx.reused.append((what, engine_call(system.write, path, changed, user, record.request_id)))
            except InputValidationError:  # the variant is not a valid payload: nothing to check with it
                continue
        if ctx.reused:
            ctx.reused_state = after = system.snapshot(store)
        ctx.settled = after
        ctx.reads = self._reads(after) if full else None

    def _whole_store_reads(self, store: Path, index: int, write: tuple[str, Any], record: WriteRecord,
                           written: list[Said], latest: StoreState | None, findings: list[Finding]
                           ) -> StoreState | None:
        """history() and the whole-store reads on the open store at the case's end, reported at the last
        successful write (`index`), when the schedule made none after it. Returns the store's state."""
        system, user = self.system, self.case.user_id
        if not offers_history(system):
            return latest
        ctx = AfterWrite(write=index, path=write[0], user_id=user, payload=write[1], record=record)
        try:
            ctx.written = list(written)
            ctx.history = engine_call(system.history, user)
            latest = latest if latest is not None else self._state_between(store, offers_live_snapshot(system))
            ctx.reads = self._reads(latest)
        except EngineRaised as exc:
            findings += self._after_write_findings(ctx, written)
            findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check="replay", write=index, path=write[0],
                                    witness=f"after write {index}: {exc}"))
            return None
        findings += self._after_write_findings(ctx, written)
        return latest

    def _live_before(self, index: int) -> int | None:
        """The user's live memories before write `index`, as the previous write's checks settled the store
        (None: not read)."""
        state = self._ops_before(index)
        return len(self._user_live(state)) if state is not None else None

    def _user_live(self, state: StoreState) -> Sequence[dict[str, Any]]:
        """The case user's live memory rows of `state`, in the table's order (found once per leaf page)."""
        return user_live_memories(state, self.case.user_id)

    def _ops_before(self, index: int) -> StoreState | None:
        """The store before write `index`, as the previous write's checks settled it (an empty store before the
        first write; None when the previous write's checks did not read it)."""
        return (StoreState(tables={"memories": []}, faiss={}) if index == 0 else
                self._settled[1] if self._settled is not None and self._settled[0] == index - 1 else None)

    def _reads(self, state: StoreState) -> Reads | None:
        """get_all() and searches on the open store, whose state is `state`: k = every live memory and smaller
        ones, for the newest and the oldest live memory's text (checked by `read_anomalies`)."""
        system, user = self.system, self.case.user_id
        if not offers_ranked_search(system):
            return None
        live = live_rows(state, user)
        memories = engine_call(system.memories, user)
        n = len(live)
        queries = list(dict.fromkeys(str(row["text"]) for row in (live[-1:] + live[:1])))
        ks = sorted({n, 1, n // 2, n - 1} - {0})
        searches = {(q, k): engine_call(system.search_ranked, user, q, k) for q in queries for k in ks}
        return Reads(state=state, memories=memories, searches=searches)

    def _reopen(self, tmp: Path, store: Path, findings: list[Finding], stale: list[Path],
                state: StoreState | None = None, *, walk: bool = True) -> None:
        """Close and reopen the case's store: the same state and search answers, the same as an index rebuilt
        from SQLite; and with an earlier index file planted (`stale`: a crash before persisting), the same too.
        `state`: the open store's state read after its last write, if any (else it is read here).
        Leaves the store closed (the case is done with it)."""
        system, user = self.system, self.case.user_id
        if not offers_reopen(system):
            return
        ctx: Reopen | None = None
        try:
            before = state if state is not None else system.snapshot(store)
            searched = engine_call(system.search_probe, user)
            system.close()
            system.open(store)
            ctx = Reopen(reopened=engine_call(system.search_probe, user))
            system.close()
            after = system.snapshot(store)
            references = {"before closing": searched,
                          "from an index rebuilt from SQLite": engine_call(system.rebuilt_probe, store, user, after)}
            # Real opens of a copy: with a stale index file planted (its checks must refuse the file), or, when
            # there is none to plant (a run without faults), with no index file at all, so that the engine's
            # rebuild-on-open runs in every run, not only after a crash.
            sources: list[Path | None] = [*stale] if stale else [None]
            for source in sources:
                system.open(system.without_index(store, tmp / "reopened", source))
                ctx.planted.append(Planted(source=source.name if source is not None else None,
                                           answers=engine_call(system.search_probe, user)))
                system.close()
            ctx.before, ctx.after, ctx.references = before, after, references
        except EngineRaised as exc:
            findings += REGISTRY.findings(ctx) if ctx is not None else []
            findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check="reopen", witness=f"reopening: {exc}"))
            return
        except Exception:  # an infra error: what was checked before it stays on the record
            findings += REGISTRY.findings(ctx) if ctx is not None else []
            raise
        findings += REGISTRY.findings(ctx)
        if not walk:
            return
        try:  # every op, a stale index of the same ids and the size limits, on a copy (`evals.check.op_walk`)
            walked = engine_call(walk_case, system, store, tmp, self.case.id, user, case_writes(self.case))
        except EngineRaised as exc:
            walked = [("walk", AnomalyKind.ENGINE_EXCEPTION, f"the op walk on a copy of the store: {exc}")]
        if any(f.kind == AnomalyKind.ENGINE_EXCEPTION and f.check == "control" for f in findings):
            # the engine already raised on a write of the case: the walk's writes raising too is the same finding
            walked = [w for w in walked if w[1] != AnomalyKind.ENGINE_EXCEPTION]
        undeclared = sorted({kind for _, kind, _ in walked} - WALK_KINDS)
        if undeclared:
            raise UndeclaredAnomaly(f"the op walk returned {undeclared}, not among WALK_KINDS")
        findings += [Finding(kind=kind, check=check, witness=witness) for check, kind, witness in walked]

    def _stranger(self, tmp: Path, store: Path, writes: list[tuple[str, Any]], records: list[WriteRecord],
                  findings: list[Finding]) -> None:
        """Another user on the case's store (a copy of it, closed): the case's first successful payload written
        as that user under the same request_id must be a new write, leave the case user's rows alone, and
        each user's search must answer only that user's memories. One write with the prompts of the case's
        first write (the other user's store is as empty as the case user's was then), and a few searches. Only
        with an in-process model (offline, oracle, scripted): a provider over HTTP would be paid for a write that
        checks the engine, not the model, which the default run checks anyway."""
        system, user = self.system, self.case.user_id
        first = next((w for w in records if w.success), None)
        if first is None or not offers_cross_user(system) or self._is_http:
            return
        path, payload = writes[first.index]
        stranger = user + STRANGER_SUFFIX
        work = _snapshot(store, tmp / "stranger")
        before = system.snapshot(work)
        self.log.context = {"write": first.index, "unit": "stranger"}
        try:
            system.open(work)
            queries = _newest_texts(before, user)
            k = max(1, _live_count(before))
            searched = {q: engine_call(system.search_as, user, q, k) for q in queries}
            outcome = engine_call(system.write, path, payload, stranger, first.request_id)
            after = system.snapshot_open(work)
            queries += [q for q in _newest_texts(after, stranger) if q not in queries]
            k = max(1, _live_count(after))
            answers = {(who, q): engine_call(system.search_as, who, q, k) for who in (user, stranger) for q in queries}
            system.close()
        except EngineRaised as exc:
            self._raised(findings, "stranger", f"another user's write or search on the case's store: {exc}")
            return
        failed_at_provider = not outcome.success and (self._is_http or any(
            a.unit == "stranger" and a.status != "ok" for a in self.log.rows))
        findings += REGISTRY.findings(Stranger(
            write=first.index, path=path, user_id=user, stranger=stranger, request_id=first.request_id,
            outcome=outcome, before=before, after=after, answers=answers, searched=searched,
            provider_failed=failed_at_provider))

    def _raised(self, findings: list[Finding], check: Check, witness: str) -> None:
        """An exception out of the engine in an extra check's write: a finding, and the store closed."""
        findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check=check, witness=witness))
        _close_quietly(self.system)

    def _subjectless(self, tmp: Path, writes: list[tuple[str, Any]], findings: list[Finding]) -> None:
        """The case's seeds sent to a fresh store without their subjects, as a mem0-style caller sends memories:
        each must be filed as the harness reads it (`evals.core.subject_reading`, not the engine's rule: the assistant's for an agent
        memory, else whom the sentence names, else the user's), never defaulted. Why: every seed carries its
        subject, so the rule that files a subjectless memory was never exercised. In-process models only."""
        system = self.system
        if not writes or writes[0][0] != "extracted" or not offers_cross_user(system) or self._is_http:
            return
        sent = [{k: v for k, v in memory.items() if k != "subject"} for memory in writes[0][1]]
        work = tmp / "subjectless"
        user = self.case.user_id + SUBJECTLESS_SUFFIX
        self.log.context = {"write": 0, "unit": "subjectless"}
        try:
            system.open(work)
            outcome = engine_call(system.write, "extracted", sent, user, f"{self.case.id}/subjectless")
            after = system.snapshot_open(work)
            system.close()
        except EngineRaised as exc:
            self._raised(findings, "subjectless", f"the seeds sent without subjects: {exc}")
            return
        findings += REGISTRY.findings(Subjectless(write=0, path="extracted", sent=sent, outcome=outcome,
                                                  rows=live_rows(after, user)))

    def _concurrently(self, tmp: Path, writes: list[tuple[str, Any]], findings: list[Finding]) -> None:
        """The case's writes sent at once on a fresh store, each request_id from two threads."""
        system = self.system
        if not offers_concurrency(system):
            return
        calls = [(path, payload, f"{self.case.id}/c{index}") for index, (path, payload) in enumerate(writes)
                 for _ in range(CONCURRENT_SENDERS)]
        work = tmp / "concurrent"
        self.log.context = {"write": None, "unit": "concurrency"}
        results, history, episodes = system.write_concurrently(work, calls, self.case.user_id)
        findings += REGISTRY.findings(Concurrent(calls=calls, results=list(results), history=history,
                                                 episodes=episodes, state=system.snapshot(work), dim=system.dim))

    def _control_write(self, index: int, path: str, payload: Any, findings: list[Finding], *,
                       full: bool = True) -> WriteRecord:
        """One fault-free write, recorded with the sites it reached and what the model proposed.

        A failure is read from the model's replies, not the engine's account (evals.check.natural): a broken reply, or
        a provider that kept failing, is a natural failure (the model's doing: checked, scored, and the case goes
        on); with every reply valid it is the engine's (CONTROL_WRITE_FAILED), as is an exception out of the
        engine. Only a provider never reached in this unit is an infra error. A success on a reply that breaks
        the contract is DEGRADED_SUCCESS.
        """
        self.log.context = {"write": index, "unit": "control"}
        first_attempt = len(self.log.rows)
        t0 = time.perf_counter()
        rid = f"{self.case.id}/w{index}"
        k = getattr(self.system, "candidates_per_fact", None)  # set by the harness; None: no reconcile prompt to check
        before = None if full else self._ops_before(index)  # not full: the store's settled state is known
        live = ([] if k is None else self.system.memories(self.case.user_id) if before is None
                else self._user_live(before))  # get_all()'s answer is checked against these rows
        try:
            outcome = engine_call(self.system.write, path, payload, self.case.user_id, rid, control=True)
        except EngineRaised as exc:
            findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check="control", write=index, path=path,
                                    witness=f"fault-free write raised {exc}"))
            return WriteRecord(index=index, path=path, request_id=rid, success=False,
                               codes=Codes(exception=str(exc).splitlines()[0]), seconds=time.perf_counter() - t0,
                               failure=WriteFailure(cause="engine", site="", detail=str(exc)[:300]),
                               payload=list(payload))
        record = WriteRecord(index=index, path=path, request_id=outcome.request_id, success=outcome.success,
                             codes=Codes.model_validate(outcome.codes), message=outcome.message, ops=outcome.ops,
                             proposed_facts=outcome.proposed_facts, proposed_ops=outcome.proposed_ops,
                             reached=outcome.reached, seconds=time.perf_counter() - t0,
                             payload=list(payload), calls=recorded_calls(outcome.prompts))
        self._prompts[index] = list(getattr(outcome, "prompts", None) or [])
        ctx = ControlWrite(write=index, path=path, payload=payload, outcome=outcome, candidates=k, live=live)
        if not outcome.success:
            reading = why_failed(record_prompts(outcome), self.log.rows[first_attempt:])
            if reading.cause == "unavailable" and not reached_provider(self.log.rows, reading.site):
                findings += REGISTRY.findings(ctx)  # what was checked stays on the record of the infra error
                raise RuntimeError(f"fault-free write {index} ({path}) failed: the provider was never reached "
                                   f"({reading.detail or outcome.message})")
            expected = expected_codes(reading)
            record.failure = ctx.failure = WriteFailure(
                cause=reading.cause or "engine", site=reading.site, detail=reading.detail, reply=reading.reply,
                expected=Codes.model_validate(expected.model_dump()) if expected else None)
        findings += REGISTRY.findings(ctx)
        return record

    def _natural_failure(self, tmp: Path, store: Path, index: int, path: str, payload: Any, record: WriteRecord,
                         before: StoreState | None, findings: list[Finding]) -> StoreState | None:
        """The write contract on a write the model's own reply failed, as on an injected fault: the store as it
        was (no row, vector, episode, L1 raw, trace or chain round), the failure table's codes for the reply's
        failure class, and a retry under a new request_id, on a copy of the store, that either stores cleanly
        (and once: its request_id re-sent changes nothing) or fails leaving the store as it was. The case then
        goes on from the store as it was. Returns the store's state (None when it could not be read)."""
        system, user, failure = self.system, self.case.user_id, record.failure
        assert failure is not None
        live = offers_live_snapshot(system)
        try:
            after = self._state_between(store, live)
            failure.checked = before is not None
            system.close()
            work = _snapshot(store, tmp / "natural")
            system.open(work)
            self.log.context = {"write": index, "unit": "natural"}
            first_attempt = len(self.log.rows)
            rid = f"{record.request_id}/retry"
            retry = engine_call(system.write, path, payload, user, rid)
            attempts = self.log.rows[first_attempt:]
            failure.retry_success = retry.success
            retry_after = self._state_between(work, live)
            repeat_after = None
            if retry.success:
                engine_call(system.write, path, payload, user, rid)
                repeat_after = self._state_between(work, live)
            system.close()
            shutil.rmtree(work, ignore_errors=True)
            system.open(store)
        except EngineRaised as exc:
            findings.append(Finding(kind=AnomalyKind.ENGINE_EXCEPTION, check="natural", write=index, path=path,
                                    witness=f"checking the naturally failed write {index}: {exc}"))
            _close_quietly(system)
            system.open(store)
            return None
        findings += REGISTRY.findings(NaturalFailure(
            write=index, path=path, failure=failure, codes=record.codes, before=before, after=after, dim=system.dim,
            retry=retry, retry_attempts=attempts, retry_after=retry_after, repeat_after=repeat_after))
        self._settled = (index, after)  # the next write's ops are checked from the store as it was
        return after

    @property
    def _is_http(self) -> bool:
        return self.accounting is not None and self.accounting.config.is_http

    def _reopen_faulted(self, system: ReopenSystem, work: Path, state: StoreState) -> tuple[Probe, Probe]:
        """After a faulted write that must succeed (e.g. its FAISS update failed): the search answers on reopening
        the store, and from an index rebuilt from SQLite (a stale index file must not be served). `state`: the
        closed store's, read before this reopen."""
        user = self.case.user_id
        system.open(work)
        reopened = engine_call(system.search_probe, user)
        system.close()
        return reopened, engine_call(system.rebuilt_probe, work, user, state)

    def _state_between(self, work: Path, live: bool) -> StoreState:
        """The store's state between two writes of a faulted unit: read from the open store's files (`live`),
        else closed, read and opened again."""
        system = self.system
        if live and offers_live_snapshot(system):
            return system.snapshot_open(work)
        system.close()
        state = system.snapshot(work)
        system.open(work)
        return state

    def _faulted(self, tmp: Path, index: int, path: str, payload: Any, fault: Fault, snapshot: Path,
                 before: StoreState, control_after: StoreState, *, natural_control: bool = False) -> FaultRecord:
        """One faulted run of write `index` from its snapshot, its retry without the fault and a re-sent request id.
        `natural_control`: the fault-free write failed on the model's own reply, so a retry the model breaks the
        same way must leave the store as it was, and one that gets through has no fault-free state to match."""
        t0 = time.perf_counter()
        system = self.system
        expected = system.expected_outcome(fault.site, fault.kind)
        work = tmp / "fault"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(snapshot, work)
        rid = f"{self.case.id}/w{index}/{fault.site}/{fault.kind}"
        record = FaultRecord(write=index, path=path, site=fault.site, kind=fault.kind, occurrence=fault.occurrence,
                             fired=False, expected=Codes.model_validate(expected.model_dump()), actual=Codes(),
                             outcome="infra_error")
        stage = "open"
        live = offers_live_snapshot(system)  # reads its open store's files: one open and close per unit
        try:
            system.open(work)
            self.log.context = {"write": index, "unit": "fault"}
            stage = "faulted write"
            faulted = engine_call(system.write, path, payload, self.case.user_id, rid, fault)
            record.fired = faulted.fired
            record.actual = Codes.model_validate(faulted.codes)
            record.wire = faulted.wire_log
            reopen: tuple[Probe, Probe] | tuple[None, None] = (None, None)
            if fault.site.startswith("store.") and expected.success and offers_reopen(system):
                system.close()  # a store fault that must not fail the write: the index it left is reopened
                after = system.snapshot(work)
                stage = "reopen"
                reopen = self._reopen_faulted(system, work, after)
                system.open(work)
            else:
                after = self._state_between(work, live)
            retry = None
            retry_natural = False  # the retry failed on the model's own reply, as the fault-free write did
            if not expected.success:
                self.log.context = {"write": index, "unit": "retry"}
                stage = "retry"
                first_attempt = len(self.log.rows)
                retry = engine_call(system.write, path, payload, self.case.user_id, rid + "/retry")
                record.retry_success = retry.success
                retry_natural = natural_control and not retry.success and why_failed(
                    record_prompts(retry), self.log.rows[first_attempt:]).cause != "engine"
            retry_after = self._state_between(work, live) if retry is not None else after  # no retry: unchanged
            repeat_after = None
            if not retry_natural:  # re-sending a failed request id is a new attempt at the write, not a repeat
                repeat_rid = rid + "/retry" if not expected.success else rid
                self.log.context = {"write": index, "unit": "repeat"}
                stage = "repeat"
                engine_call(system.write, path, payload, self.case.user_id, repeat_rid)
                repeat_after = system.snapshot_open(work) if offers_live_snapshot(system) else None
            stage = "close"
            system.close()
            closed = system.snapshot(work)
            adversarial = fault.kind in ADVERSARIAL_KINDS
            record.anomalies = REGISTRY.anomalies(FaultedWrite(
                expected=expected, result=faulted, before=before, after=after, control_after=control_after,
                retry_result=retry, retry_after=retry_after, repeat_after=repeat_after or closed, dim=system.dim,
                same_as_control=not adversarial, control_failed=natural_control, retry_natural=retry_natural,
                closed=closed if repeat_after is not None else None, fired=record.fired, site=fault.site,
                fault_kind=fault.kind, user_id=self.case.user_id, request_id=rid, path=path, payload=payload,
                reopened=reopen[0], rebuilt=reopen[1]))
            if adversarial and faulted.injected:
                record.injected = faulted.injected
            if not record.fired:
                record.outcome = "indeterminate"
            else:
                record.outcome = "wrong" if record.anomalies else "ok"
        except EngineRaised as exc:  # the engine's bug, not the provider's: checked and wrong
            record.fired = record.fired or bool(getattr(getattr(system, "injector", None), "fired", None))
            record.outcome = "wrong"
            record.anomalies = [Anomaly(kind=AnomalyKind.ENGINE_EXCEPTION, witness=f"{stage} raised {exc}")]
            if not record.actual.model_fields_set:
                record.actual = Codes(exception=str(exc).splitlines()[0])
            _close_quietly(system)
        except Exception as exc:
            record.outcome = "infra_error"
            record.anomalies = []
            record.actual = Codes(exception=f"{type(exc).__name__}: {exc}")
        record.seconds = time.perf_counter() - t0
        return record


def stale_sources(writes: list[WriteRecord], snapshots: list[Path]) -> list[Path]:
    """Snapshots whose index file is stale for the final store: from before the last write that updated a
    memory in place (same ids, new vectors) and before the last write that changed any memory."""
    changed = [w.index for w in writes if w.success and any(op.op != "NOOP" for op in w.ops)]
    updated = [w.index for w in writes if w.success and any(op.op == "UPDATE" for op in w.ops)]
    picks = [max(updated)] if updated else []
    picks += [max(changed)] if changed and max(changed) not in picks else []
    return [snapshots[i] for i in picks if i < len(snapshots)]


def _newest_texts(state: StoreState, user_id: str) -> list[str]:
    """The text of the user's newest live memory (a search query), if it has one."""
    live = [row for row in state.tables.get("memories", []) if row.get("user_id") == user_id
            and is_live(row)]
    return [max(live, key=lambda row: row["id"])["text"]] if live else []


def _live_count(state: StoreState) -> int:
    return sum(is_live(row)
               for row in state.tables.get("memories", []))


class EngineRaised(Exception):
    """The engine under test raised instead of returning a result: ENGINE_EXCEPTION, never an infra error."""


def engine_call(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the engine; anything it raises becomes EngineRaised with the exception and where it came from, but
    an AssertionError (a scripted test model out of replies: the harness's own setup) and an
    InputValidationError (the case's messages refused, as the engine documents) stay infra errors."""
    try:
        return call(*args, **kwargs)
    except (AssertionError, InputValidationError):  # the case's input refused, as documented: not an engine bug
        raise
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {Path(where.filename).name}:{where.lineno} in {where.name}" if where else ""
        raise EngineRaised(f"{type(exc).__name__}: {str(exc)[:300]}{at}") from exc


def _close_quietly(system: MemorySystem) -> None:
    try:
        system.close()
    except Exception:  # already closed, or the engine cannot close after raising: the next unit reopens
        pass


def _snapshot(store: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(store, dest, ignore=shutil.ignore_patterns("*.lock"))
    return dest


__all__ = ["CaseReplayer", "EngineRaised", "UnitModels", "case_writes", "engine_call"]
