"""Checks as analyzers: each write-contract check is one function from a context to witnessed anomalies.

Why (Elle composes its checkers so): the replayer (evals.run.replay) only drives the engine and fills in what it
observed (evals.check.context); which checks read each context, in which order, under which Finding.check name,
and which anomaly kinds each may raise, is this registry's data. A check that returns a kind it did not declare
is the harness's bug and raises `UndeclaredAnomaly` (never a silent finding). Order is registration order,
which is the order the findings appear in units.jsonl.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from evals.check.applied_ops import applied_op_anomalies
from evals.check.checker import (
    check_faulted_write,
    closed_store_anomalies,
    consistency_anomalies,
    leftover_anomalies,
    short_diff,
    superseded_by_problems,
)
from evals.check.context import (
    AfterWrite,
    Concurrent,
    ControlWrite,
    FaultedWrite,
    NaturalFailure,
    Reopen,
    Site,
    Stranger,
    Subjectless,
)
from evals.check.natural import broken_replies, codes_consistent, why_failed
from evals.check.prompt_contract import check_candidates, check_prompts
from evals.check.write_contract import (
    concurrency_anomalies,
    cross_user_anomalies,
    history_mismatch,
    profile_kept,
    read_anomalies,
    reopen_anomalies,
    replay_anomalies,
    reuse_anomalies,
    subjectless_misfiled,
)
from evals.core.prompt_reading import read_messages, user_name
from evals.core.store_state import canonical, logical_diff
from evals.faults.adversarial import ADVERSARIAL_KINDS, adversarial_anomalies
from evals.faults.plan import Expected
from evals.record import Anomaly, AnomalyKind, Finding, Witnessed
from evals.record._records import Check

K = AnomalyKind
C = TypeVar("C")
CONSISTENCY = frozenset({K.VECTORLESS_NODE, K.ORPHAN_VECTOR, K.SUPERSEDED_BY_WRONG})  # consistency_anomalies
LEFTOVERS = frozenset({K.PARTIAL_WRITE, K.L1_NOT_ROLLED_BACK, K.EPISODE_ADVANCED, K.TRACE_APPENDED})  # leftovers
PROMPT = frozenset({K.PROMPT_LABEL_WRONG, K.NAME_LINE_WRONG, K.FORGED_HEADER})  # check_prompts

# Kinds raised outside the registry, and by what: the replay's own catch of an exception out of the engine while it
# drives it, and the op walk, which drives a copy of the store itself (evals.check.op_walk.walk_case).
RAISED_ELSEWHERE: dict[AnomalyKind, str] = {
    K.ENGINE_EXCEPTION: "evals.run.replay: the engine raised while the replay drove it (engine_call)",
    K.SIZE_LIMIT_WRONG: "evals.check.op_walk: the size limits, driven on a copy of the store",
}
WALK_KINDS = frozenset({K.APPLIED_OP_WRONG, K.REOPEN_DIVERGED, K.SIZE_LIMIT_WRONG, K.ENGINE_EXCEPTION})  # walk_case


class UndeclaredAnomaly(RuntimeError):
    """A check returned a kind its registration does not declare: the registry's data is wrong."""


@dataclass(frozen=True)
class Analyzer:
    """One registered check: what it reads, the name its findings carry, the kinds it may raise."""

    name: str  # the function's name
    context: type  # the context it reads (evals.check.context)
    check: str  # the Finding.check its findings carry (a Check); on a faulted write, which part of its check
    kinds: frozenset[AnomalyKind]
    run: Callable[[Any], list[Witnessed]]
    once: bool = False  # each (kind, witness) once in its result
    fresh_only: bool = False  # only what the analyzers before it on this context did not find


@dataclass
class Registry:
    """The analyzers, in registration order."""

    analyzers: list[Analyzer] = field(default_factory=list)

    def register(self, context: type[C], check: str, kinds: frozenset[AnomalyKind] | set[AnomalyKind], *,
                 once: bool = False, fresh_only: bool = False
                 ) -> Callable[[Callable[[C], list[Witnessed]]], Callable[[C], list[Witnessed]]]:
        def add(fn: Callable[[C], list[Witnessed]]) -> Callable[[C], list[Witnessed]]:
            self.analyzers.append(Analyzer(fn.__name__, context, check, frozenset(kinds), fn, once, fresh_only))
            return fn
        return add

    def for_context(self, context: type) -> list[Analyzer]:
        return [a for a in self.analyzers if a.context is context]

    def analyze(self, ctx: Any) -> list[tuple[Analyzer, list[Witnessed]]]:
        """Every analyzer of the context's type, in order, with what it found."""
        out: list[tuple[Analyzer, list[Witnessed]]] = []
        seen: set[Witnessed] = set()
        for analyzer in self.for_context(type(ctx)):
            found = analyzer.run(ctx)
            undeclared = sorted({kind for kind, _ in found} - analyzer.kinds)
            if undeclared:
                raise UndeclaredAnomaly(f"{analyzer.name} returned {undeclared}, not among its declared kinds "
                                        f"{sorted(analyzer.kinds)}")
            if analyzer.once:
                found = list(dict.fromkeys(found))
            if analyzer.fresh_only:
                found = [w for w in found if w not in seen]
            seen.update(found)
            out.append((analyzer, found))
        return out

    def findings(self, ctx: Site) -> list[Finding]:
        """A case's findings from one context, reported at its site."""
        return [Finding(kind=kind, check=cast(Check, analyzer.check), write=ctx.write, path=ctx.path, witness=witness)
                for analyzer, found in self.analyze(ctx) for kind, witness in found]

    def anomalies(self, ctx: FaultedWrite) -> list[Anomaly]:
        """A faulted write's anomalies."""
        return [Anomaly(kind=kind, witness=witness) for _, found in self.analyze(ctx) for kind, witness in found]

    def kinds(self) -> frozenset[AnomalyKind]:
        """Every kind some registered analyzer may raise."""
        return frozenset().union(*(a.kinds for a in self.analyzers))


REGISTRY = Registry()
analyzer = REGISTRY.register


def record_prompts(outcome: Any) -> list[dict[str, str]]:
    """The model calls a write made ({site, text, reply}): tapped at the model (hymem), or the replies an engine
    reports (mem0), else none."""
    return list(getattr(outcome, "prompts", None) or getattr(outcome, "replies", None) or [])


def prompt_findings(path: str, payload: Any, outcome: Any, where: str) -> list[Witnessed]:
    """Prompt-contract anomalies of one write's extraction calls (chat and working paths show a conversation)."""
    if path not in ("chat", "working") or not getattr(outcome, "prompts", None):
        return []
    return check_prompts(payload, outcome.prompts, where)


def third_party_name(payload: list[dict[str, Any]], profile: dict[str, Any]) -> list[str]:
    """The L0 profile describes only the current user (spec 3): its name is never a named human's of this write."""
    messages = read_messages(payload)
    name = str(profile.get("name") or "").strip()
    user = (user_name(messages) or "").casefold()
    others = {m.name.casefold() for m in messages if m.role == "assistant" and m.name}
    if name and name.casefold() in others and name.casefold() != user:
        return [f"the user's profile name is {name!r}, a named human of this write (the user is "
                f"{user_name(messages) or 'unnamed'}): {profile}"]
    return []


# --- a fault-free write, as it returned ---------------------------------------------------------------------------

@analyzer(ControlWrite, "prompt", PROMPT)
def control_prompts(ctx: ControlWrite) -> list[Witnessed]:
    """Every extraction prompt shows the write's messages under the spec's labels."""
    return prompt_findings(ctx.path, ctx.payload, ctx.outcome, f"write {ctx.write}")


@analyzer(ControlWrite, "prompt", {K.RECONCILE_CANDIDATES_WRONG})
def reconcile_candidates(ctx: ControlWrite) -> list[Witnessed]:
    """The reconcile prompt's candidates are the top-k retrieval (a new, successful write only)."""
    if ctx.candidates is None or not ctx.outcome.success or ctx.outcome.duplicate:
        return []
    return check_candidates(ctx.outcome.prompts, ctx.outcome.proposed_facts, ctx.live, ctx.candidates,
                            f"write {ctx.write}")


@analyzer(ControlWrite, "natural", {K.DEGRADED_SUCCESS})
def success_on_a_broken_reply(ctx: ControlWrite) -> list[Witnessed]:
    """A success on a reply that breaks the output contract."""
    if not ctx.outcome.success:
        return []
    return [(K.DEGRADED_SUCCESS, f"success=true on a reply that breaks the output contract at {r.site} "
                                 f"({r.cause}: {r.detail}): {r.reply[:200]!r}")
            for r in broken_replies(record_prompts(ctx.outcome))]


@analyzer(ControlWrite, "control", {K.CONTROL_WRITE_FAILED})
def control_write_failed(ctx: ControlWrite) -> list[Witnessed]:
    """A failure with every model reply intact is the engine's."""
    if ctx.failure is None or ctx.failure.cause != "engine":
        return []
    return [(K.CONTROL_WRITE_FAILED, f"fault-free write failed with every model reply delivered intact: "
                                     f"{ctx.outcome.codes} {ctx.outcome.message[:200]}")]


# --- a successful write's round trips -----------------------------------------------------------------------------

@analyzer(AfterWrite, "history", {K.HISTORY_MISMATCH})
def history_kept(ctx: AfterWrite) -> list[Witnessed]:
    """history() holds the messages written so far, user ones whole."""
    if ctx.written is None or ctx.history is None:
        return []
    diff = history_mismatch(ctx.written, ctx.history)
    return [] if diff is None else [(K.HISTORY_MISMATCH, diff)]


@analyzer(AfterWrite, "profile", {K.PROFILE_FROM_THIRD_PARTY})
def profile_of_the_user(ctx: AfterWrite) -> list[Witnessed]:
    """The profile's name is never another named human's of this write."""
    if ctx.profile is None:
        return []
    return [(K.PROFILE_FROM_THIRD_PARTY, witness) for witness in third_party_name(ctx.payload, ctx.profile)]


@analyzer(AfterWrite, "profile", {K.PROFILE_UPDATE_LOST})
def profile_updated(ctx: AfterWrite) -> list[Witnessed]:
    """profile() holds what the user stated in this write (later statements win)."""
    if ctx.profile is None:
        return []
    return profile_kept(ctx.payload, ctx.prompts, ctx.profile, ctx.stated)


@analyzer(AfterWrite, "ops", {K.APPLIED_OP_WRONG})
def ops_applied(ctx: AfterWrite) -> list[Witnessed]:
    """Each op the write reports, against the row it left and the op proposed (evals.check.applied_ops)."""
    if ctx.written_state is None:
        return []
    r = ctx.record
    return applied_op_anomalies(r.ops, r.proposed_ops, r.proposed_facts, ctx.ops_before, ctx.written_state,
                                ctx.user_id, r.request_id, f"write {ctx.write}")


@analyzer(AfterWrite, "replay", {K.DOUBLE_WRITE})
def replay_changes_nothing(ctx: AfterWrite) -> list[Witnessed]:
    """The same request_id sent again changes nothing and says duplicate."""
    if ctx.written_state is None or ctx.replayed is None or ctx.replayed_state is None:
        return []
    return replay_anomalies(ctx.written_state, ctx.replayed_state, ctx.replayed.duplicate, ctx.replayed.success)


@analyzer(AfterWrite, "replay", {K.REQUEST_ID_REUSE_MISSED})
def reuse_refused(ctx: AfterWrite) -> list[Witnessed]:
    """The request_id re-sent with a changed payload is refused and changes nothing."""
    if not ctx.reused or ctx.replayed_state is None or ctx.reused_state is None:
        return []
    return reuse_anomalies(ctx.record.request_id, list(ctx.reused), ctx.replayed_state, ctx.reused_state)


@analyzer(AfterWrite, "replay", {K.SUPERSEDED_BY_WRONG})
def superseded_by_kept(ctx: AfterWrite) -> list[Witnessed]:
    """Every superseded_by names another memory of the same user, each problem reported once per case."""
    if ctx.settled is None:
        return []
    return [(K.SUPERSEDED_BY_WRONG, witness) for witness in superseded_by_problems(ctx.settled)
            if witness not in ctx.reported_superseded]


@analyzer(AfterWrite, "reads", {K.READ_WRONG})
def reads_answer_the_live_rows(ctx: AfterWrite) -> list[Witnessed]:
    """get_all() and searches answer the live rows, best first, at most k."""
    if ctx.reads is None:
        return []
    return read_anomalies(ctx.user_id, ctx.reads.state, ctx.reads.memories, ctx.reads.searches)


# --- a write the model's own reply failed --------------------------------------------------------------------------

@analyzer(NaturalFailure, "natural", {K.WRONG_ERROR_CODE}, once=True)
def natural_codes(ctx: NaturalFailure) -> list[Witnessed]:
    """The failure table's codes for the reply's failure class."""
    failure = ctx.failure
    if failure.expected is None:
        return []
    want = Expected.model_validate(failure.expected.model_dump())
    if codes_consistent(want, ctx.codes.model_dump()):
        return []
    return [(K.WRONG_ERROR_CODE, f"the reply's failure class ({failure.cause} at {failure.site}) gives "
                                 f"{want.model_dump()}, the write returned {ctx.codes.model_dump()}")]


@analyzer(NaturalFailure, "natural", LEFTOVERS | CONSISTENCY, once=True)
def natural_rollback(ctx: NaturalFailure) -> list[Witnessed]:
    """The store as it was: no row, vector, episode, L1 raw, trace or chain round left."""
    found = [(a.kind, a.witness) for a in leftover_anomalies(ctx.before, ctx.after)] if ctx.before is not None else []
    return found + [(a.kind, a.witness) for a in consistency_anomalies(ctx.after, ctx.dim)]


@analyzer(NaturalFailure, "natural", {K.DOUBLE_WRITE, K.CONTROL_WRITE_FAILED} | LEFTOVERS | CONSISTENCY, once=True)
def natural_retry(ctx: NaturalFailure) -> list[Witnessed]:
    """A retry under a new request_id stores cleanly and once, or fails leaving the store as it was."""
    if ctx.retry.success:
        found: list[Witnessed] = []
        if ctx.repeat_after is not None and canonical(ctx.repeat_after) != canonical(ctx.retry_after):
            found.append((K.DOUBLE_WRITE, "the retry's request_id re-sent changed the store: "
                          + short_diff(logical_diff(ctx.retry_after, ctx.repeat_after))))
        return found + [(a.kind, "after retry: " + a.witness) for a in consistency_anomalies(ctx.retry_after, ctx.dim)]
    if why_failed(record_prompts(ctx.retry), ctx.retry_attempts).cause == "engine":
        return [(K.CONTROL_WRITE_FAILED, "the retry failed with every model reply delivered intact: "
                 f"{ctx.retry.codes} {ctx.retry.message[:200]}")]
    return [(a.kind, "after a failed retry: " + a.witness) for a in leftover_anomalies(ctx.after, ctx.retry_after)]


# --- the case's store reopened ---------------------------------------------------------------------------------------

@analyzer(Reopen, "reopen", {K.REOPEN_DIVERGED})
def planted_index_refused(ctx: Reopen) -> list[Witnessed]:
    """A stale index file planted on a copy is rebuilt, never served; an open without one rebuilds the same."""
    found = []
    for open_ in ctx.planted:
        if open_.answers != ctx.reopened:
            what = (f"a stale index file ({open_.source}'s) was served on reopen" if open_.source is not None
                    else "an open without its index files rebuilt another index")
            found.append((K.REOPEN_DIVERGED, f"{what}: search returned {open_.answers}, the current index "
                                             f"{ctx.reopened}"))
    return found


@analyzer(Reopen, "reopen", {K.REOPEN_DIVERGED})
def reopen_keeps_state(ctx: Reopen) -> list[Witnessed]:
    """The same state and search answers across close and reopen, and as an index rebuilt from SQLite."""
    if ctx.after is None:
        return []
    return reopen_anomalies(ctx.before, ctx.after, ctx.reopened, ctx.references)


# --- other users and other callers -------------------------------------------------------------------------------------

@analyzer(Stranger, "stranger", {K.CROSS_USER_LEAK})
def users_apart(ctx: Stranger) -> list[Witnessed]:
    """Another user's write under the same request_id is a new write; each user's search sees only theirs."""
    if ctx.provider_failed:  # the provider's failure, not the engine's: nothing to conclude
        return []
    return cross_user_anomalies(ctx.user_id, ctx.stranger, ctx.request_id, ctx.outcome, ctx.before, ctx.after,
                                ctx.answers, ctx.searched)


@analyzer(Subjectless, "subjectless", {K.SUBJECTLESS_MISFILED})
def subjectless_filed(ctx: Subjectless) -> list[Witnessed]:
    """Seeds without subjects are filed by the subject rule (a failure is the control write's to judge)."""
    if not ctx.outcome.success:
        return []
    return [(K.SUBJECTLESS_MISFILED, witness) for witness in subjectless_misfiled(ctx.sent, ctx.rows)]


@analyzer(Concurrent, "concurrency", {K.ENGINE_EXCEPTION})
def concurrent_raised(ctx: Concurrent) -> list[Witnessed]:
    """A write sent alongside others returns a result, never an exception."""
    return [(K.ENGINE_EXCEPTION, f"request {call[2]} raised {type(outcome).__name__}: {outcome}")
            for call, outcome in zip(ctx.calls, ctx.results, strict=True) if isinstance(outcome, BaseException)]


@analyzer(Concurrent, "concurrency", {K.DOUBLE_WRITE, K.CONCURRENT_WRITE_LOST, K.CONCURRENT_WRITE_INTERLEAVED}
          | CONSISTENCY)
def concurrent_writes_serialised(ctx: Concurrent) -> list[Witnessed]:
    """Each request written once and whole, the histories not interleaved, the store consistent."""
    results = [None if isinstance(r, BaseException) else r for r in ctx.results]
    return concurrency_anomalies([(p, rid, payload if p == "chat" else []) for p, payload, rid in ctx.calls],
                                 results, ctx.history, ctx.episodes, ctx.state, ctx.dim)


# --- one faulted write -----------------------------------------------------------------------------------------------

@analyzer(FaultedWrite, "rollback", {K.WRONG_ERROR_CODE, K.RETRY_DIVERGED, K.DEGRADED_SUCCESS, K.DOUBLE_WRITE}
          | LEFTOVERS | CONSISTENCY)
def rolled_back(ctx: FaultedWrite) -> list[Witnessed]:
    """The failure table's codes, nothing left behind, a retry that reaches the fault-free state, once."""
    return [(a.kind, a.witness) for a in check_faulted_write(ctx)]


@analyzer(FaultedWrite, "closed", {K.VECTORLESS_NODE, K.PARTIAL_WRITE} | CONSISTENCY, fresh_only=True)
def closed_store_kept(ctx: FaultedWrite) -> list[Witnessed]:
    """The checks above read the open store: the index its close persisted holds the same."""
    if ctx.closed is None:
        return []
    return [(a.kind, a.witness) for a in closed_store_anomalies(ctx.repeat_after, ctx.closed, ctx.dim)]


@analyzer(FaultedWrite, "adversarial", {K.CROSS_SUBJECT_MERGE_APPLIED, K.THIRD_PARTY_AS_USER, K.THIRD_PARTY_AS_AI,
                                        K.PROFILE_UPDATE_LOST, K.PROFILE_FROM_THIRD_PARTY, K.UPDATE_WRONG,
                                        K.APPLIED_OP_WRONG}, once=True)
def adversarial_refused(ctx: FaultedWrite) -> list[Witnessed]:
    """An adversarial reply's decision is refused or filed as the spec says (evals.faults.adversarial)."""
    if ctx.fault_kind not in ADVERSARIAL_KINDS or not ctx.result.injected:
        return []
    return adversarial_anomalies(ctx.fault_kind, ctx.result.injected, ctx.user_id, ctx.before, ctx.after)


@analyzer(FaultedWrite, "ops", {K.APPLIED_OP_WRONG}, once=True)
def faulted_ops_applied(ctx: FaultedWrite) -> list[Witnessed]:
    """Each op a successful faulted write reports, against the rows it left (evals.check.applied_ops)."""
    if not ctx.result.success:
        return []
    r = ctx.result
    return applied_op_anomalies(r.ops, r.proposed_ops, r.proposed_facts, ctx.before, ctx.after, ctx.user_id,
                                ctx.request_id, "faulted write")


@analyzer(FaultedWrite, "reopen", {K.REOPEN_DIVERGED}, once=True)
def faulted_reopen(ctx: FaultedWrite) -> list[Witnessed]:
    """A store fault that must not fail the write: reopening answers as an index rebuilt from SQLite."""
    if ctx.reopened is None or ctx.rebuilt is None:
        return []
    return [(kind, "after the faulted write: " + witness) for kind, witness in
            reopen_anomalies(None, None, ctx.reopened, {"from an index rebuilt from SQLite": ctx.rebuilt})]


@analyzer(FaultedWrite, "prompt", PROMPT, once=True)
def faulted_prompts(ctx: FaultedWrite) -> list[Witnessed]:
    """The faulted write's extraction prompts keep the labels."""
    return prompt_findings(ctx.path, ctx.payload, ctx.result, "faulted write")


@analyzer(FaultedWrite, "prompt", PROMPT, once=True)
def retry_prompts(ctx: FaultedWrite) -> list[Witnessed]:
    """And its retry's."""
    if ctx.retry_result is None:
        return []
    return prompt_findings(ctx.path, ctx.payload, ctx.retry_result, "retry")


@analyzer(FaultedWrite, "fired", {K.FAULT_NOT_REACHED})
def fault_reached(ctx: FaultedWrite) -> list[Witnessed]:
    """A planned fault that never fired leaves the unit indeterminate."""
    return [] if ctx.fired else [(K.FAULT_NOT_REACHED, f"{ctx.site} was not called under this fault")]


__all__ = ["RAISED_ELSEWHERE", "REGISTRY", "WALK_KINDS", "Analyzer", "Registry", "UndeclaredAnomaly", "analyzer",
           "prompt_findings", "record_prompts", "third_party_name"]
