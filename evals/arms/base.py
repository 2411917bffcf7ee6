"""The system under test: what the harness needs from a memory engine to replay, fault and check it.

Why a protocol: the datasets, fault plans, checker and scorers stay the same whichever engine is
replayed; an engine only says how to write a turn, what it stored, what a logical snapshot of its store
is, where faults can be injected and what each fault must make a write return.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeGuard, runtime_checkable

from pydantic import BaseModel, Field

from evals.core.store_state import StoreState
from evals.faults.plan import Expected, Fault, FaultPlan
from evals.record import OpRecord

DEFAULT_SYSTEM = "hymem"


class WriteOutcome(BaseModel):
    """One write as the harness sees it, whatever the engine: what it returned, and where it called out."""

    success: bool  # the engine reported success (for an engine without result codes: it did not raise)
    request_id: str
    codes: dict[str, Any]  # success, error_code, agent_error_code, reconcile_error_code, retry_safe (+ raised)
    ops: list[OpRecord] = Field(default_factory=list)  # applied (and refused) ops
    proposed_facts: list[dict[str, Any]] = Field(default_factory=list)  # what the extraction proposed (ProposedFact)
    proposed_ops: list[dict[str, Any]] = Field(default_factory=list)  # what the reconcile model proposed
    message: str = ""
    reached: dict[str, int] = Field(default_factory=dict)  # fault site -> calls (or items) this write made there
    fired: bool = False  # the armed fault was injected
    call_seconds: float | None = None  # time inside model and embedding calls, when the system measures it
    wire_log: list[dict[str, Any]] = Field(default_factory=list)  # fault proxy log lines of this write's calls
    prompts: list[dict[str, str]] = Field(default_factory=list)  # {site, text}: what each model call was shown
    replies: list[dict[str, str]] = Field(default_factory=list)  # {site, reply}: what the model answered, for an
    # engine whose prompts the harness does not tap (mem0), read by evals.check.natural
    injected: dict[str, Any] = Field(default_factory=dict)  # what an adversarial reply changed (evals.faults.adversarial)
    duplicate: bool | None = None  # the engine said this request_id was already written (None: it cannot say)


def codes_of(result: Any) -> dict[str, Any]:
    """The outcome fields a fault's expected outcome is compared on (a system's `WriteOutcome.codes` as given)."""
    if isinstance(getattr(result, "codes", None), dict):
        return dict(result.codes)
    return {"success": result.success, "error_code": result.error_code,
            "agent_error_code": result.agent_error_code, "reconcile_error_code": result.reconcile_error_code,
            "retry_safe": result.retry_safe}


@runtime_checkable
class MemorySystem(Protocol):
    """One engine for one unit (a case on one provider). `open`/`close` bracket every write's store."""

    name: str  # hymem | mem0
    keeps_profile: bool  # False (mem0): the engine keeps no user profile, so the profile metrics are not measured

    @property
    def dim(self) -> int: ...  # vector size, for the checker's vector consistency check

    def open(self, store: Path) -> None: ...

    def close(self) -> None: ...  # release and persist the store, so its files can be copied and read

    def write(self, path: str, payload: Any, user_id: str, request_id: str, fault: Fault | None = None, *,
              control: bool = False) -> WriteOutcome: ...

    def memories(self, user_id: str) -> list[dict[str, Any]]: ...  # id, text, subject, owner, kind, request_id

    def profile(self, user_id: str) -> dict[str, Any]: ...  # only asked of an engine that keeps_profile

    def snapshot(self, store: Path) -> StoreState: ...  # the logical state of a closed store

    def faults_for_write(self, plan: FaultPlan, reached: dict[str, int], seed: int, unit_key: str) -> list[Fault]: ...

    def expected_outcome(self, site: str, kind: str) -> Expected: ...

    def shutdown(self) -> None: ...  # release what the unit started (fault proxies); the store is closed


class HistorySystem(MemorySystem, Protocol):
    """An engine that offers its L1 history (hymem): the history round-trip and replay checks run on it."""

    def history(self, user_id: str) -> list[dict[str, Any]]: ...

    @property
    def history_limit(self) -> int: ...


class ReopenSystem(MemorySystem, Protocol):
    """An engine whose store can be reopened with its index rebuilt or a stale one planted (hymem)."""

    def search_probe(self, user_id: str) -> dict[str, list[tuple[int, float]]]: ...

    def rebuilt_probe(self, store: Path, user_id: str, state: StoreState) -> dict[str, list[tuple[int, float]]]: ...
    # search_probe on the closed store (whose state is `state`) with the index the engine rebuilds from its source
    # of truth, as an open without its index files would

    def without_index(self, store: Path, dest: Path, index_of: Path | None = None) -> Path: ...


class LiveSnapshotSystem(MemorySystem, Protocol):
    """An engine whose open store's files can be read as they are (hymem: SQLite in WAL mode)."""

    def snapshot_open(self, store: Path) -> StoreState: ...


class ConcurrentSystem(MemorySystem, Protocol):
    """An engine that can take one case's writes at once on one open store (hymem)."""

    def write_concurrently(self, store: Path, calls: list[tuple[str, Any, str]], user_id: str
                           ) -> tuple[list[Any], list[dict[str, Any]], int]: ...


class CrossUserSystem(ReopenSystem, LiveSnapshotSystem, Protocol):
    """An engine whose store holds many users, searched as any of them (hymem): the other-user check runs on it."""

    def search_as(self, user_id: str, query: str, k: int) -> list[tuple[int, float]]: ...


class RankedSearchSystem(LiveSnapshotSystem, Protocol):
    """An engine whose search answers are read in its own order, with any k (hymem): the reads check runs on it."""

    def memories(self, user_id: str) -> list[dict[str, Any]]: ...

    def search_ranked(self, user_id: str, query: str, k: int) -> list[tuple[int, float]]: ...


def offers_history(system: MemorySystem) -> TypeGuard[HistorySystem]:
    return hasattr(system, "history")


def offers_reopen(system: MemorySystem) -> TypeGuard[ReopenSystem]:
    return hasattr(system, "search_probe")


def offers_live_snapshot(system: MemorySystem) -> TypeGuard[LiveSnapshotSystem]:
    return hasattr(system, "snapshot_open")


def offers_cross_user(system: MemorySystem) -> TypeGuard[CrossUserSystem]:
    return hasattr(system, "search_as") and offers_reopen(system) and offers_live_snapshot(system)


def offers_ranked_search(system: MemorySystem) -> TypeGuard[RankedSearchSystem]:
    return hasattr(system, "search_ranked") and offers_live_snapshot(system)


def offers_concurrency(system: MemorySystem) -> TypeGuard[ConcurrentSystem]:
    return hasattr(system, "write_concurrently")


def arm_label(system: str, provider: str) -> str:
    """The report's `provider` column for one (system, provider) arm: the provider for hymem, else SYSTEM/PROVIDER.

    Why: `compare`, the plots and the gate pair arms by this label, so two engines on one provider sit side by
    side, and a hymem run keeps the labels (and manifest hash) it always had.
    """
    return provider if system == DEFAULT_SYSTEM else f"{system}/{provider}"


@dataclass
class Arm:
    """One (system, provider) column of a run: makes a fresh system per unit; `close` stops what it started."""

    system: str
    provider: str
    label: str
    make: Callable[..., MemorySystem] | None  # (case, log, *, seed, temperature) -> a system for one unit (the
    # epoch's sampling seed and the run's temperature, as hymem's requests get them); None: the replayer's hymem
    close: Callable[[], None] = lambda: None


__all__ = ["DEFAULT_SYSTEM", "Arm", "ConcurrentSystem", "CrossUserSystem", "HistorySystem", "LiveSnapshotSystem", "MemorySystem",
           "RankedSearchSystem", "ReopenSystem",
           "WriteOutcome", "arm_label", "offers_concurrency", "offers_cross_user", "offers_history", "offers_live_snapshot",
           "offers_ranked_search", "offers_reopen"]
