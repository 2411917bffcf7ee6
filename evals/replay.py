"""Replay one case through the engine: a fault-free control run, then every planned fault.

Before each write of the control run the store directory is snapshotted;
each faulted run restores that snapshot instead of replaying the case prefix,
so a sweep's cost grows linearly with the number of writes.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evals.accounting import AccountingLM, AttemptLog, price_table
from evals.checker import StoreState, canonical, check_faulted_write, codes_of, read_state
from evals.dataset import Case
from evals.faults import Fault, FaultPlan, expected_outcome
from evals.inject import FaultyEmbedder, Injector, faulty_lm
from hymem.client import HyMemoryClient

_PRICES = price_table()


class WriteRecord(BaseModel):
    """One write of the fault-free control run, as the engine reported it and as the trace recorded it."""

    index: int
    path: str  # extracted (seeds) | chat | working
    request_id: str
    success: bool
    codes: dict[str, Any]
    message: str = ""
    ops: list[dict[str, Any]] = Field(default_factory=list)  # applied ops (WriteResult.ops)
    proposed_facts: list[dict[str, Any]] = Field(default_factory=list)  # what the extractor proposed
    proposed_ops: list[dict[str, Any]] = Field(default_factory=list)  # what the reconcile model proposed
    reached: dict[str, int] = Field(default_factory=dict)  # call site -> calls made in this write
    seconds: float = 0.0


class FaultRecord(BaseModel):
    """One faulted run of one write, with its checked outcome."""

    write: int
    path: str
    site: str
    kind: str
    occurrence: int = 0
    fired: bool
    expected: dict[str, Any]
    actual: dict[str, Any]
    retry_success: bool | None = None
    outcome: str  # ok | wrong | indeterminate | infra_error
    anomalies: list[tuple[str, str]] = Field(default_factory=list)  # (kind, witness)
    seconds: float = 0.0


class CaseRun(BaseModel):
    """Everything the harness learned from one (provider, case) unit; the report is a projection of it."""

    case_id: str
    dataset: str
    provider: str
    lang: str
    tags: list[str]
    status: str  # ok | infra_error
    error: str | None = None
    writes: list[WriteRecord] = Field(default_factory=list)
    memories: list[dict[str, Any]] = Field(default_factory=list)  # live memories after the control run
    profile: dict[str, Any] = Field(default_factory=dict)
    faults: list[FaultRecord] = Field(default_factory=list)
    attempts: list[dict[str, Any]] = Field(default_factory=list)  # every LM and embedding attempt (Attempt)
    seconds: float = 0.0


def case_writes(case: Case) -> list[tuple[str, Any]]:
    """The writes of a case, in order: seeded memories (one add_extracted), then one call per turn."""
    writes: list[tuple[str, Any]] = []
    if case.memories:
        writes.append(("extracted", [m.model_dump(exclude_none=True) for m in case.memories]))
    for turn in case.turns:
        writes.append(("working" if case.path == "working" else "chat", turn))
    return writes


def _do_write(client: HyMemoryClient, path: str, payload: Any, user_id: str, request_id: str):
    if path == "extracted":
        return client.add_extracted(payload, user_id=user_id, request_id=request_id)
    if path == "working":
        return client.add_working(payload, user_id=user_id, request_id=request_id)
    return client.add(payload, user_id=user_id, request_id=request_id)


class CaseReplayer:
    """Runs one case for one provider on fresh stores in a temporary directory.

    `program`: a tuned MemoryProgram (run --program) every client of this unit uses; this unit's own
    copy, so units on other threads never share predictor objects. None: the built-in prompts.
    """

    def __init__(self, case: Case, dataset: str, provider: str, lm_factory: Callable[[Case], Any],
                 embedder: Any, plan: FaultPlan, seed: int, program: Any = None, *, accounting: Any = None,
                 cache: Any = None):
        self.case, self.dataset, self.provider = case, dataset, provider
        self.lm_factory, self.embedder, self.plan, self.seed = lm_factory, embedder, plan, seed
        self.program = program.deepcopy() if program is not None else None
        self.injector = Injector()
        self.accounting = accounting  # the evals.providers.Provider: attempts, connection limit, retries
        self.cache = cache  # ResponseCache for HTTP providers, or None
        self.log = AttemptLog(provider, case.id)
        self._lm: Any = None

    def _client(self, path: Path) -> HyMemoryClient:
        base = self.lm_factory(self.case)
        lm = faulty_lm(base, self.injector) if self.plan.name != "none" else base
        if self.accounting is not None:
            lm = AccountingLM.wrap(lm, provider=self.accounting, log=self.log, injector=self.injector,
                                   cache=self.cache, retries=self.plan.name == "none", prices=_PRICES)
        self._lm = lm
        return HyMemoryClient(path=path, lm=lm, embedder=FaultyEmbedder(self.embedder, self.injector, self.log),
                              reconcile_enabled=True, program=self.program)

    def _cache_clean_success(self, outcome: Any) -> None:
        """Cache this write's replies only when it succeeded with no fault injected."""
        pending = self._lm.take_pending() if isinstance(self._lm, AccountingLM) else []
        if self.cache is not None and outcome.success and not self.injector.fired:
            self.cache.put_many(pending)

    def run(self) -> CaseRun:
        start = time.perf_counter()
        result = CaseRun(case_id=self.case.id, dataset=self.dataset, provider=self.provider, lang=self.case.lang,
                         tags=list(self.case.tags), status="ok")
        with tempfile.TemporaryDirectory(prefix="hymem-case-") as tmp:
            try:
                self._run(Path(tmp), result)
            except Exception as exc:  # a harness or provider failure is data, never a silent zero
                result.status = "infra_error"
                result.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        result.attempts = [a.model_dump() for a in self.log.rows]
        result.seconds = time.perf_counter() - start
        return result

    def _run(self, tmp: Path, result: CaseRun) -> None:
        store = tmp / "control"
        writes = case_writes(self.case)
        snapshots: list[Path] = []
        states: list[StoreState] = []
        client = self._client(store)
        try:
            for index, (path, payload) in enumerate(writes):
                client.close()  # persist FAISS and release the store, then snapshot its files
                snapshots.append(_snapshot(store, tmp / f"snap-{index}"))
                states.append(read_state(store))
                client = self._client(store)
                self.injector.arm(None)
                self.log.context = {"write": index, "unit": "control"}
                t0 = time.perf_counter()
                with self.injector.store_hook():
                    outcome = _do_write(client, path, payload, self.case.user_id, f"{self.case.id}/w{index}")
                self._cache_clean_success(outcome)
                record = WriteRecord(index=index, path=path, request_id=outcome.request_id, success=outcome.success,
                                     codes=codes_of(outcome), message=outcome.message,
                                     ops=[op.model_dump() for op in outcome.ops], reached=dict(self.injector.reached),
                                     seconds=time.perf_counter() - t0)
                trace = next((t for t in client.store.traces(self.case.user_id)
                              if t.get("request_id") == outcome.request_id), None)
                if trace is not None:
                    payload_ = trace.get("payload") or {}
                    record.proposed_facts = payload_.get("proposed_facts", [])
                    record.proposed_ops = payload_.get("proposed_ops", [])
                result.writes.append(record)
                if not outcome.success:
                    raise RuntimeError(f"fault-free write {index} ({path}) failed: {outcome.message}")
            result.memories = [m.model_dump() for m in client.get_all(self.case.user_id)]
            result.profile = client.profile(self.case.user_id)
        finally:
            client.close()
        states.append(read_state(store))
        for index, (path, payload) in enumerate(writes):
            unit_key = f"{self.provider}|{self.case.id}|{index}"
            for fault in self.plan.faults_for_write(result.writes[index].reached, self.seed, unit_key):
                result.faults.append(self._faulted(tmp, index, path, payload, fault, snapshots[index],
                                                   states[index], states[index + 1]))

    def _faulted(self, tmp: Path, index: int, path: str, payload: Any, fault: Fault, snapshot: Path,
                 before: StoreState, control_after: StoreState) -> FaultRecord:
        t0 = time.perf_counter()
        expected = expected_outcome(fault.site, fault.kind)
        work = tmp / "fault"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(snapshot, work)
        rid = f"{self.case.id}/w{index}/{fault.site}/{fault.kind}"
        record = FaultRecord(write=index, path=path, site=fault.site, kind=fault.kind, occurrence=fault.occurrence,
                             fired=False, expected=expected.model_dump(), actual={}, outcome="infra_error")
        try:
            client = self._client(work)
            self.injector.arm(fault)
            self.log.context = {"write": index, "unit": "fault"}
            with self.injector.store_hook():
                faulted = _do_write(client, path, payload, self.case.user_id, rid)
            record.fired = bool(self.injector.fired)
            record.actual = codes_of(faulted)
            client.close()
            after = read_state(work)
            retry = None
            if not expected.success:
                client = self._client(work)
                self.injector.arm(None)
                self.log.context = {"write": index, "unit": "retry"}
                with self.injector.store_hook():
                    retry = _do_write(client, path, payload, self.case.user_id, rid + "/retry")
                client.close()
                record.retry_success = retry.success
            retry_after = read_state(work)
            repeat_rid = rid + "/retry" if not expected.success else rid
            client = self._client(work)
            self.injector.arm(None)
            self.log.context = {"write": index, "unit": "repeat"}
            with self.injector.store_hook():
                _do_write(client, path, payload, self.case.user_id, repeat_rid)
            client.close()
            repeat_after = read_state(work)
            dim = client.dim
            record.anomalies = check_faulted_write(expected, faulted, before, after, control_after, retry,
                                                   retry_after, repeat_after, dim)
            if not record.fired:
                record.anomalies.append(("FAULT_NOT_REACHED", f"{fault.site} was not called under this fault"))
                record.outcome = "indeterminate"
            else:
                record.outcome = "wrong" if record.anomalies else "ok"
        except Exception as exc:
            record.outcome = "infra_error"
            record.anomalies = []
            record.actual = {"exception": f"{type(exc).__name__}: {exc}"}
        record.seconds = time.perf_counter() - t0
        return record


def _snapshot(store: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(store, dest, ignore=shutil.ignore_patterns("*.lock"))
    return dest


__all__ = ["CaseReplayer", "CaseRun", "FaultRecord", "WriteRecord", "canonical", "case_writes"]
