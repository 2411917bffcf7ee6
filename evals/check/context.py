"""What the replay observed around one write or one case: the typed contexts the analyzers read.

Why typed contexts: a check reads a named observation (`ctx.retry_after`), never the ninth positional
argument, and the replayer (evals.run.replay) only fills them in: it drives the engine, the analyzers
(evals.check.analyzers) judge. A field left None was not observed (the engine raised first, or it offers
nothing to observe), and the analyzers that need it do not run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evals.arms.base import WriteOutcome
from evals.core.prompt_reading import Said
from evals.core.store_state import StoreState
from evals.faults.plan import Expected
from evals.record import Attempt, Codes, WriteFailure, WriteRecord

Probe = dict[str, list[tuple[int, float]]]  # search query -> (id, score) answers, as a reopen probe reads them


@dataclass(kw_only=True)
class Site:
    """Where a finding of the case is reported: the write (-1: the case as a whole) and its path."""

    write: int = -1
    path: str = ""


@dataclass(kw_only=True)
class ControlWrite(Site):
    """One fault-free write as it returned, before the case goes on."""

    payload: Any  # the messages (chat, working) or memories (extracted) sent
    outcome: WriteOutcome
    failure: WriteFailure | None = None  # why it failed, read off the model's replies (evals.check.natural)
    candidates: int | None = None  # the reconcile prompt's k (None: no reconcile prompt to check)
    live: Sequence[dict[str, Any]] = field(default_factory=list)  # the user's memories before the write (k is set)


@dataclass(frozen=True, kw_only=True)
class Reads:
    """get_all() and ranked searches on the open store, whose state is `state`."""

    state: StoreState
    memories: list[dict[str, Any]]
    searches: dict[tuple[str, int], list[tuple[int, float]]]  # (query, k) -> answers


@dataclass(kw_only=True)
class AfterWrite(Site):
    """A successful control write's round trips on an engine that offers history(): each field is filled in the
    order the replay observes it, so an engine that raised half way leaves the rest None."""

    user_id: str
    payload: Any
    record: WriteRecord
    written: list[Said] | None = None  # what history() must hold after this write
    history: list[dict[str, Any]] | None = None  # what history() returned
    profile: dict[str, Any] | None = None  # profile() after a chat write
    prompts: list[dict[str, str]] = field(default_factory=list)  # this write's model calls
    stated: dict[str, str] = field(default_factory=dict)  # profile field -> value the user stated before this write
    ops_before: StoreState | None = None  # the store before the write, as the previous write's checks settled it
    written_state: StoreState | None = None  # the store after the write (before its replay)
    replayed: WriteOutcome | None = None  # the same request_id and payload sent again
    replayed_state: StoreState | None = None
    reused: list[tuple[str, WriteOutcome]] = field(default_factory=list)  # (what changed, outcome) same request_id
    reused_state: StoreState | None = None  # the store after the changed payloads
    settled: StoreState | None = None  # the store once every write of this check was sent
    reported_superseded: frozenset[str] = frozenset()  # SUPERSEDED_BY_WRONG witnesses the case already has
    reads: Reads | None = None  # None: the engine offers no ranked search


@dataclass(kw_only=True)
class NaturalFailure(Site):
    """A control write the model's own reply failed, its state, and a retry on a copy of the store."""

    failure: WriteFailure
    codes: Codes  # what the write returned
    before: StoreState | None  # the store before the write (None: not read)
    after: StoreState
    dim: int
    retry: WriteOutcome
    retry_attempts: list[Attempt] = field(default_factory=list)  # the provider calls the retry made
    retry_after: StoreState
    repeat_after: StoreState | None = None  # after the retry's request_id re-sent (a successful retry only)


@dataclass(frozen=True, kw_only=True)
class Planted:
    """One real open of a copy of the store with an index file planted (`source`) or none at all (None)."""

    source: str | None  # the snapshot whose index file was planted
    answers: Probe


@dataclass(kw_only=True)
class Reopen(Site):
    """The case's store closed and reopened, its index rebuilt and stale ones planted."""

    reopened: Probe  # search answers after a plain reopen
    planted: list[Planted] = field(default_factory=list)
    before: StoreState | None = None  # None until every planted open is done
    after: StoreState | None = None
    references: dict[str, Probe] = field(default_factory=dict)  # what the reopened answers must equal


@dataclass(kw_only=True)
class Stranger(Site):
    """Another user's write (the case's first payload, same request_id) and searches on a copy of the store."""

    user_id: str
    stranger: str
    request_id: str
    outcome: WriteOutcome
    before: StoreState
    after: StoreState
    answers: dict[tuple[str, str], list[tuple[int, float]]]  # (who, query) -> hits after the write
    searched: dict[str, list[tuple[int, float]]]  # query -> the case user's hits before it
    provider_failed: bool = False  # the write failed at the provider: nothing to conclude


@dataclass(kw_only=True)
class Subjectless(Site):
    """The case's seeds sent without subjects to a fresh store."""

    sent: list[dict[str, Any]]
    outcome: WriteOutcome
    rows: list[dict[str, Any]]  # the live rows they became


@dataclass(kw_only=True)
class Concurrent(Site):
    """The case's writes sent at once, each request_id by several threads, on one fresh store."""

    calls: list[tuple[str, Any, str]]  # (path, payload, request_id) per sender
    results: list[Any]  # a WriteOutcome, or the exception the call raised
    history: list[Any]
    episodes: int
    state: StoreState
    dim: int


@dataclass(kw_only=True)
class FaultedWrite:
    """One faulted run of a write from its snapshot, its retry without the fault and its request_id re-sent.

    `same_as_control=False`: a fault that changes what the write decides (an adversarial reply) need not
    leave the fault-free run's state. `control_failed`: the fault-free write failed on the model's own reply
    (`control_after` is the store as it was); `retry_natural`: the retry failed on such a reply too.
    """

    expected: Expected
    result: WriteOutcome  # the faulted write
    before: StoreState
    after: StoreState
    control_after: StoreState  # the fault-free run's state after this write
    retry_result: WriteOutcome | None  # None: the fault must not fail the write, so no retry
    retry_after: StoreState
    repeat_after: StoreState  # after the request_id was re-sent, read open when the engine can, else closed
    dim: int
    same_as_control: bool = True
    control_failed: bool = False
    retry_natural: bool = False
    closed: StoreState | None = None  # the store once closed, when `repeat_after` was read open
    fired: bool = True  # the armed fault was injected
    site: str = ""  # where the fault was armed
    fault_kind: str = ""
    user_id: str = ""
    request_id: str = ""
    path: str = ""
    payload: Any = None
    reopened: Probe | None = None  # a store fault that must not fail the write: answers after reopening
    rebuilt: Probe | None = None  # and from an index rebuilt from SQLite


__all__ = ["AfterWrite", "Concurrent", "ControlWrite", "FaultedWrite", "NaturalFailure", "Planted", "Probe", "Reads",
           "Reopen", "Site", "Stranger", "Subjectless"]
