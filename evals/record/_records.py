"""The run record: what the harness learned from each (provider, case) unit, typed and versioned.

Every persisted record is one of these models and carries `schema_version`; the report, scorers,
compare, gate and tuning read them, never the executor's internals (this module imports neither
dspy nor `evals.run.replay`). A unit is one line of `units.jsonl`; the Parquet tables are projections.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, TypedDict

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from evals.record._gold import CaseGold
from evals.record._version import SCHEMA_VERSION

Outcome = Literal["ok", "wrong", "indeterminate", "infra_error"]  # of one faulted run
Status = Literal["ok", "infra_error"]  # of one unit
Unit = Literal["control", "fault", "retry", "repeat", "replay", "concurrency", "stranger", "subjectless", "walk",
               "limits", "natural"]  # which run of a write an attempt belongs to
Check = Literal["control", "prompt", "history", "replay", "reopen", "concurrency", "profile", "stranger", "reads",
                "subjectless", "ops", "walk", "limits", "natural"]  # a Finding's check
# Why a fault-free write failed, as the harness reads the model's replies (evals.check.natural): the model's causes,
# or `engine` (every reply valid: the engine failed on its own, CONTROL_WRITE_FAILED).
Cause = Literal["parse", "empty", "schema", "refused", "unavailable", "engine"]


class AnomalyKind(StrEnum):
    """What the checker can find about one faulted write; each breaks one property (sets below)."""

    DEGRADED_SUCCESS = "DEGRADED_SUCCESS"  # success under a fault that must fail the write
    PARTIAL_WRITE = "PARTIAL_WRITE"  # a failed write left memories, profile or request rows behind
    L1_NOT_ROLLED_BACK = "L1_NOT_ROLLED_BACK"  # a failed write left its raw messages in L1 history
    EPISODE_ADVANCED = "EPISODE_ADVANCED"  # a failed write advanced the user's episode counter
    TRACE_APPENDED = "TRACE_APPENDED"  # a failed write left a trace or chain-round row
    VECTORLESS_NODE = "VECTORLESS_NODE"  # a live memory without exactly one usable vector
    ORPHAN_VECTOR = "ORPHAN_VECTOR"  # a FAISS vector whose memory is not live
    WRONG_ERROR_CODE = "WRONG_ERROR_CODE"  # the codes differ from the failure table's
    RETRY_DIVERGED = "RETRY_DIVERGED"  # the retry without the fault did not reach the fault-free state
    DOUBLE_WRITE = "DOUBLE_WRITE"  # a retry or a re-sent request_id wrote again
    FAULT_NOT_REACHED = "FAULT_NOT_REACHED"  # the planned fault never fired: the unit is indeterminate
    # The write contract, checked on every write, faulted or not (evals.check.prompt_contract, evals.check.write_contract,
    # evals.faults.adversarial); outside a faulted write these are a CaseRun's findings.
    ENGINE_EXCEPTION = "ENGINE_EXCEPTION"  # the engine raised instead of returning a result (never an infra error)
    CONTROL_WRITE_FAILED = "CONTROL_WRITE_FAILED"  # a fault-free write failed with every provider reply intact
    PROMPT_LABEL_WRONG = "PROMPT_LABEL_WRONG"  # a message's header in the prompt is not the spec's label
    NAME_LINE_WRONG = "NAME_LINE_WRONG"  # the user's name line is missing, repeated, misplaced or in the wrong language
    FORGED_HEADER = "FORGED_HEADER"  # message content a str.splitlines() reader takes for a header or name line
    HISTORY_MISMATCH = "HISTORY_MISMATCH"  # history() differs from the messages written (user ones cut, names lost)
    REOPEN_DIVERGED = "REOPEN_DIVERGED"  # state or search answers changed across close/reopen (a stale index served)
    CONCURRENT_WRITE_LOST = "CONCURRENT_WRITE_LOST"  # a write sent alongside others did not land whole
    CONCURRENT_WRITE_INTERLEAVED = "CONCURRENT_WRITE_INTERLEAVED"  # concurrent writes' messages interleaved in history
    CROSS_SUBJECT_MERGE_APPLIED = "CROSS_SUBJECT_MERGE_APPLIED"  # an UPDATE/SUPERSEDE/DELETE across subjects applied
    THIRD_PARTY_AS_USER = "THIRD_PARTY_AS_USER"  # a named human's fact stored under the user
    THIRD_PARTY_AS_AI = "THIRD_PARTY_AS_AI"  # a named human's fact stored under the AI (they speak on role=assistant)
    PROFILE_FROM_THIRD_PARTY = "PROFILE_FROM_THIRD_PARTY"  # the user's L0 profile took a named human's name or words
    RECONCILE_CANDIDATES_WRONG = "RECONCILE_CANDIDATES_WRONG"  # the reconcile prompt's candidates are not the top-k retrieval
    PROFILE_UPDATE_LOST = "PROFILE_UPDATE_LOST"  # profile() lacks a value the user stated in the latest write
    REQUEST_ID_REUSE_MISSED = "REQUEST_ID_REUSE_MISSED"  # a request_id re-sent with another payload was not refused
    CROSS_USER_LEAK = "CROSS_USER_LEAK"  # another user's write or search saw, changed or was refused by this user's data
    SUPERSEDED_BY_WRONG = "SUPERSEDED_BY_WRONG"  # superseded_by names no other memory of the same user (or loops)
    UPDATE_WRONG = "UPDATE_WRONG"  # an in-place UPDATE lost a fact (a second op on one memory) or its timestamps
    READ_WRONG = "READ_WRONG"  # get_all()/search() disagree with the live rows: missing, extra, not best first, over k
    SUBJECTLESS_MISFILED = "SUBJECTLESS_MISFILED"  # a memory sent without a subject was not filed by the subject rule
    APPLIED_OP_WRONG = "APPLIED_OP_WRONG"  # a reported op's row lacks the op's fields, or it is not the op proposed
    SIZE_LIMIT_WRONG = "SIZE_LIMIT_WRONG"  # a write over a size limit was not refused before any call, or one at it was


# Which anomaly kinds break each property of a faulted write.
CODE_KINDS = frozenset({AnomalyKind.WRONG_ERROR_CODE, AnomalyKind.DEGRADED_SUCCESS, AnomalyKind.ENGINE_EXCEPTION})
STATE_KINDS = frozenset({AnomalyKind.PARTIAL_WRITE, AnomalyKind.L1_NOT_ROLLED_BACK, AnomalyKind.EPISODE_ADVANCED,
                         AnomalyKind.TRACE_APPENDED, AnomalyKind.VECTORLESS_NODE, AnomalyKind.ORPHAN_VECTOR,
                         AnomalyKind.DEGRADED_SUCCESS})
RETRY_KINDS = frozenset({AnomalyKind.RETRY_DIVERGED, AnomalyKind.DOUBLE_WRITE})

def _statement_row(row: dict[str, Any]) -> dict[str, Any]:
    """A memory or proposed fact as the scorers read it: `text` a string, `subject`/`owner`/`kind` strings or
    absent. Checked when a record is made and when units.jsonl is read back: a `"text": null` edited into a
    record crashed the gate and every --resume deep inside the scorers."""
    if not isinstance(row.get("text"), str):
        raise ValueError(f"text: must be a string, not {type(row.get('text')).__name__}")
    for key in ("subject", "owner", "kind"):
        if row.get(key) is not None and not isinstance(row[key], str):
            raise ValueError(f"{key}: must be a string or null, not {type(row[key]).__name__}")
    return row


StatementRow = Annotated[dict[str, Any], AfterValidator(_statement_row)]

Witnessed = tuple[AnomalyKind, str]  # (kind, witness): what a contract check returns, before it is an Anomaly


class Record(BaseModel):
    """Base of every persisted record: its schema version travels with it."""

    schema_version: int = SCHEMA_VERSION


class Anomaly(BaseModel):
    """One named anomaly and the evidence for it."""

    model_config = ConfigDict(frozen=True)

    kind: AnomalyKind
    witness: str = ""  # what shows it: a short state diff, or the codes


class Codes(BaseModel):
    """A write's outcome fields as compared with the failure table; only the fields the writer set are kept."""

    model_config = ConfigDict(extra="allow")

    success: bool | None = None
    error_code: str | None = None  # LLM_ERROR | EMPTY_RESPONSE | JSON_PARSE_FAILED | EMBEDDING_FAILED | STORE_FAILED
    agent_error_code: str | None = None  # RECONCILE_FAILED
    reconcile_error_code: str | None = None  # LLM_UNAVAILABLE | EMPTY_RESPONSE | JSON_PARSE_FAILED | RECONCILE_EXCEPTION
    retry_safe: bool | None = None
    exception: str | None = None  # the harness exception of an infra_error unit

    @model_serializer(mode="wrap")
    def _set_fields_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Dump what was set (so a round trip through units.jsonl keeps the same keys), extras included."""
        data = handler(self)
        keep = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in keep}

    def get(self, key: str, default: Any = None) -> Any:
        """A field or extra by name, as for the plain codes of a `WriteOutcome`."""
        return self.model_dump().get(key, default)


class Attempt(Record):
    """One model or embedding attempt (a row of attempts.parquet)."""

    provider: str
    model: str
    case_id: str
    write: int | None = None  # index of the write within the case
    unit: Unit = "control"
    site: str  # lm.extract | lm.extract_working | lm.reconcile | embed
    attempt: int = 1  # 1 for the first try of a call, 2.. for retries
    status: str = "ok"  # ok, or the exception's class name
    error: str | None = None  # first line of the exception
    latency_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None  # when a price is known
    cache_hit: bool = False
    injected: str | None = None  # the fault kind injected into this attempt


class OpRecord(BaseModel):
    """One change an engine applied, or refused, in one write: hymem's `AppliedOp`, mem0's events alike."""

    op: str  # ADD | UPDATE | SUPERSEDE | DELETE | NOOP (mem0: its event name)
    memory_id: int | str | None = None  # the new or changed memory (mem0's ids are strings)
    target_id: int | str | None = None  # the existing memory an UPDATE/SUPERSEDE/DELETE/NOOP names
    text: str | None = None
    subject: str | None = None
    owner: str | None = None
    kind: str = "fact"
    refused: str | None = None  # why the engine refused the model's op (e.g. cross-subject)


class WriteFailure(BaseModel):
    """Why a fault-free write failed, read from the model's replies rather than the engine's account, and what the
    write contract check on it found (a natural failure: no fault was injected; evals.check.natural)."""

    cause: Cause
    site: str  # the call site whose reply (or provider error) broke the write
    detail: str = ""  # what the harness's reading of the reply found
    reply: str = ""  # a redacted excerpt of the broken reply
    expected: Codes | None = None  # the failure table's codes for the reply's failure class (None: the engine's)
    checked: bool = False  # the store was read before and after, and the write contract checked on it
    retry_success: bool | None = None  # the retry with a new request_id, on a copy of the store, succeeded


class WriteRecord(Record):
    """One write of the fault-free control run, as the engine reported it."""

    index: int  # 0.., seeds first (one extracted write), then one per turn
    path: str  # extracted (seeds) | chat | working
    request_id: str
    success: bool
    codes: Codes
    message: str = ""
    ops: list[OpRecord] = Field(default_factory=list)  # applied (and refused) ops
    proposed_facts: list[StatementRow] = Field(default_factory=list)  # what the extractor proposed
    proposed_ops: list[dict[str, Any]] = Field(default_factory=list)  # what the reconcile model proposed, as it said it
    reached: dict[str, int] = Field(default_factory=dict)  # call site -> calls made in this write
    seconds: float = 0.0
    failure: WriteFailure | None = None  # why it failed, when it did (its anomalies are the unit's findings)
    # What a reader of the run (`hymem-eval view`) needs to see the write without the dataset files: the
    # messages (or seeded memories) as sent, and each model call's prompt and reply, cut at CALL_TEXT_LIMIT.
    payload: list[dict[str, Any]] = Field(default_factory=list)
    calls: list[dict[str, str]] = Field(default_factory=list)  # {site, text, reply}: what each model call was shown


CALL_TEXT_LIMIT = 20_000  # characters of one recorded prompt or reply; the rest is cut with a marker


def clipped(text: str, limit: int = CALL_TEXT_LIMIT) -> str:
    """`text`, cut to `limit` characters with a note of how much was left out (a record stays bounded)."""
    return text if len(text) <= limit else f"{text[:limit]}\n… [{len(text) - limit} more characters not recorded]"


def recorded_calls(prompts: list[dict[str, str]]) -> list[dict[str, str]]:
    """A write's model calls ({site, text, reply}, as the harness's prompt tap saw them) as the record keeps them."""
    return [{key: clipped(str(value)) for key, value in call.items()} for call in prompts]


class FaultRecord(Record):
    """One faulted run of one write, with its checked outcome."""

    write: int
    path: str
    site: str
    kind: str  # the fault kind (evals.faults.plan)
    occurrence: int = 0  # which call at the site was faulted
    fired: bool
    expected: Codes  # the failure table's outcome for (site, kind)
    actual: Codes  # what the write returned (or `exception` for an infra_error unit)
    retry_success: bool | None = None
    outcome: Outcome
    anomalies: list[Anomaly] = Field(default_factory=list)
    wire: list[dict[str, Any]] = Field(default_factory=list)  # the fault proxy's log lines (request id, kind, time)
    injected: dict[str, Any] = Field(default_factory=dict)  # what an adversarial reply changed (evals.faults.adversarial)
    seconds: float = 0.0

    @property
    def checked(self) -> bool:
        """The fault fired and the store was checked: the unit is evidence either way."""
        return self.outcome in ("ok", "wrong")

    @property
    def kinds(self) -> set[AnomalyKind]:
        return {a.kind for a in self.anomalies}


class Finding(Record):
    """A broken engine promise found outside a faulted write's rollback check, with its witness.

    Why apart from FaultRecord: the write contract (prompts, history, idempotency, reopen, concurrency,
    exceptions) must hold in every write, faulted or not, so it is checked in the control run too.
    """

    kind: AnomalyKind
    check: Check  # which check found it
    write: int = -1  # index of the write within the case; -1: the case as a whole (reopen, concurrency)
    path: str = ""  # chat | working | extracted
    witness: str = ""


class CaseRun(Record):
    """Everything the harness learned from one (provider, case) unit: one line of units.jsonl."""

    case_id: str
    dataset: str
    provider: str  # the arm label: the provider name, prefixed `SYSTEM/` for an engine other than hymem
    system: str = "hymem"  # the engine under test: hymem | mem0
    transport: str = "in-process"  # where its LM faults were injected: in-process | wire (an HTTP provider)
    epoch: int = 0  # the repeat of this case (run --epochs K: 0..K-1), each with its own sampling seed
    lang: str
    tags: list[str]
    gold: CaseGold | None = None  # what the unit is scored against; None: a record from before v5 (its dataset's)
    status: Status
    error: str | None = None  # the infra error with its traceback
    writes: list[WriteRecord] = Field(default_factory=list)
    memories: list[StatementRow] = Field(default_factory=list)  # live memories after the control run
    profile: dict[str, Any] | None = Field(default_factory=dict)  # None: the engine keeps no profile (mem0)
    faults: list[FaultRecord] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)  # write-contract anomalies outside faulted writes
    attempts: list[Attempt] = Field(default_factory=list)  # every LM and embedding attempt
    seconds: float = 0.0

    def failure_findings(self, write: int) -> list[Finding]:
        """What the checks of a failed control write found: its own failure (`control`) and the write contract on
        a natural failure (`natural`)."""
        return [f for f in self.findings if f.write == write and f.check in ("natural", "control")]


class FactRow(TypedDict):
    """One row of facts.parquet as scored (the run's matcher spec is added when the table is written): a gold
    fact and the prediction matched to it, a missed gold fact, or an unmatched prediction."""

    provider: str
    dataset: str
    case_id: str
    epoch: int
    stage: str  # proposed | stored
    gold_text: str | None
    gold_subject: str | None
    gold_owner: str | None
    pred_text: str | None
    pred_subject: str | None
    pred_owner: str | None
    match_score: float | None
    matched: bool
    subject_ok: bool | None  # None unless matched
    owner_ok: bool | None
    gold_class: str | None  # user | assistant | a named person, folded
    pred_class: str | None
    note: str | None  # why a prediction is left out of precision, or infra_error


class OpRow(TypedDict):
    """One row of ops.parquet: a proposed or applied op, with the fact and target subjects it involved."""

    provider: str
    dataset: str
    case_id: str
    write: int
    source: str  # proposed | applied
    op: str | None  # as the model or the engine named it
    fact_text: str | None
    fact_subject: str | None
    target_id: int | str | None
    target_text: str | None
    target_subject: str | None
    cross_subject: bool | None  # None when no merge or the target is unknown
    refused: str | None


class MetricRow(Record):
    """One row of metrics.parquet; every metric name is declared in `evals.record.catalogue`."""

    provider: str
    dataset: str  # a dataset name, or "all"
    metric: str
    value: float  # NaN when nothing was measured
    ci_low: float
    ci_high: float
    n: int  # what n counts is the catalogue's `n` for the metric
    note: str | None = None


class CaseMetricRow(Record):
    """One row of case_metrics.parquet: a rate's numerator and denominator in one case, for pairing runs."""

    provider: str
    dataset: str
    case_id: str
    metric: str
    num: float
    den: float
    epoch: int = 0  # the repeat of the case; pair runs by case over the epochs' pooled num/den
