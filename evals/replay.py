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

from evals.accounting import AttemptLog
from evals.checker import StoreState, check_faulted_write
from evals.dataset import Case
from evals.faults import Fault, FaultPlan
from evals.record import Anomaly, AnomalyKind, CaseRun, Codes, FaultRecord, WriteRecord
from evals.systems.base import MemorySystem
from evals.systems.hymem_system import HymemSystem


def case_writes(case: Case) -> list[tuple[str, Any]]:
    """The writes of a case, in order: seeded memories (one add_extracted), then one call per turn."""
    writes: list[tuple[str, Any]] = []
    if case.memories:
        writes.append(("extracted", [m.model_dump(exclude_none=True) for m in case.memories]))
    for turn in case.turns:
        writes.append(("working" if case.path == "working" else "chat", turn))
    return writes


class CaseReplayer:
    """Runs one case for one provider on fresh stores in a temporary directory.

    `program`: a tuned MemoryProgram (run --program) every client of this unit uses; this unit's own
    copy, so units on other threads never share predictor objects. None: the built-in prompts.
    `system`: `(case, log) -> MemorySystem` for an engine other than hymem (see `evals.systems`);
    None replays hymem with `lm_factory`, `embedder` and the accounting arguments.
    """

    def __init__(self, case: Case, dataset: str, provider: str, lm_factory: Callable[[Case], Any],
                 embedder: Any, plan: FaultPlan, seed: int, program: Any = None, *, accounting: Any = None,
                 cache: Any = None, system: Callable[[Case, AttemptLog], MemorySystem] | None = None):
        self.case, self.dataset, self.provider = case, dataset, provider
        self.lm_factory, self.embedder, self.plan, self.seed = lm_factory, embedder, plan, seed
        self.program = program.deepcopy() if program is not None else None
        self.accounting = accounting  # the evals.providers.Provider: attempts, connection limit, retries
        self.cache = cache  # ResponseCache for HTTP providers, or None
        self.log = AttemptLog(provider, case.id)
        self.system = system(case, self.log) if system is not None else HymemSystem(
            case, lm_factory, embedder, plan, self.program, accounting=accounting, cache=cache, log=self.log)

    def run(self) -> CaseRun:
        start = time.perf_counter()
        result = CaseRun(case_id=self.case.id, dataset=self.dataset, provider=self.provider, system=self.system.name,
                         transport=getattr(self.system, "transport", "in-process"),
                         lang=self.case.lang, tags=list(self.case.tags), status="ok")
        with tempfile.TemporaryDirectory(prefix="hymem-case-") as tmp:
            try:
                self._run(Path(tmp), result)
            except Exception as exc:  # a harness or provider failure is data, never a silent zero
                result.status = "infra_error"
                result.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
            finally:
                self.system.shutdown()
        result.attempts = list(self.log.rows)
        result.seconds = time.perf_counter() - start
        return result

    def _run(self, tmp: Path, result: CaseRun) -> None:
        store = tmp / "control"
        writes = case_writes(self.case)
        system = self.system
        if self.plan.name == "none":  # no faulted runs will restore a snapshot: one open store, no copies
            system.open(store)
            try:
                for index, (path, payload) in enumerate(writes):
                    result.writes.append(self._control_write(index, path, payload))
                result.memories = system.memories(self.case.user_id)
                result.profile = system.profile(self.case.user_id)
            finally:
                system.close()
            return
        snapshots: list[Path] = []
        states: list[StoreState] = []
        system.open(store)
        try:
            for index, (path, payload) in enumerate(writes):
                system.close()  # persist the store and release it, then snapshot its files
                snapshots.append(_snapshot(store, tmp / f"snap-{index}"))
                states.append(system.snapshot(store))
                system.open(store)
                result.writes.append(self._control_write(index, path, payload))
            result.memories = system.memories(self.case.user_id)
            result.profile = system.profile(self.case.user_id)
        finally:
            system.close()
        states.append(system.snapshot(store))
        for index, (path, payload) in enumerate(writes):
            unit_key = f"{self.provider}|{self.case.id}|{index}"
            for fault in system.faults_for_write(self.plan, result.writes[index].reached, self.seed, unit_key):
                result.faults.append(self._faulted(tmp, index, path, payload, fault, snapshots[index],
                                                   states[index], states[index + 1]))

    def _control_write(self, index: int, path: str, payload: Any) -> WriteRecord:
        """One fault-free write, recorded with the sites it reached and what the model proposed."""
        self.log.context = {"write": index, "unit": "control"}
        t0 = time.perf_counter()
        outcome = self.system.write(path, payload, self.case.user_id, f"{self.case.id}/w{index}", control=True)
        record = WriteRecord(index=index, path=path, request_id=outcome.request_id, success=outcome.success,
                             codes=Codes.model_validate(outcome.codes), message=outcome.message, ops=outcome.ops,
                             proposed_facts=outcome.proposed_facts, proposed_ops=outcome.proposed_ops,
                             reached=outcome.reached, seconds=time.perf_counter() - t0)
        if not outcome.success:
            raise RuntimeError(f"fault-free write {index} ({path}) failed: {outcome.message}")
        return record

    def _faulted(self, tmp: Path, index: int, path: str, payload: Any, fault: Fault, snapshot: Path,
                 before: StoreState, control_after: StoreState) -> FaultRecord:
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
        try:
            system.open(work)
            self.log.context = {"write": index, "unit": "fault"}
            faulted = system.write(path, payload, self.case.user_id, rid, fault)
            record.fired = faulted.fired
            record.actual = Codes.model_validate(faulted.codes)
            record.wire = faulted.wire_log
            system.close()
            after = system.snapshot(work)
            retry = None
            if not expected.success:
                system.open(work)
                self.log.context = {"write": index, "unit": "retry"}
                retry = system.write(path, payload, self.case.user_id, rid + "/retry")
                system.close()
                record.retry_success = retry.success
            retry_after = system.snapshot(work) if retry is not None else after  # no retry: the store is unchanged
            repeat_rid = rid + "/retry" if not expected.success else rid
            system.open(work)
            self.log.context = {"write": index, "unit": "repeat"}
            system.write(path, payload, self.case.user_id, repeat_rid)
            system.close()
            repeat_after = system.snapshot(work)
            record.anomalies = check_faulted_write(expected, faulted, before, after, control_after, retry,
                                                   retry_after, repeat_after, system.dim)
            if not record.fired:
                record.anomalies.append(Anomaly(kind=AnomalyKind.FAULT_NOT_REACHED,
                                                witness=f"{fault.site} was not called under this fault"))
                record.outcome = "indeterminate"
            else:
                record.outcome = "wrong" if record.anomalies else "ok"
        except Exception as exc:
            record.outcome = "infra_error"
            record.anomalies = []
            record.actual = Codes(exception=f"{type(exc).__name__}: {exc}")
        record.seconds = time.perf_counter() - t0
        return record


def _snapshot(store: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(store, dest, ignore=shutil.ignore_patterns("*.lock"))
    return dest


__all__ = ["CaseReplayer", "case_writes"]
