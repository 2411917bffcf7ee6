"""Natural failures: fault-free writes that failed because of what the model (or its provider) returned.

Why a reading of its own: a real model answers prose, echoes the schema or stops mid-string, and the engine
must then fail the write cleanly (spec reconcile-failure.md). Whether a failed write is the model's doing or
the engine's is decided here from the reply itself, read against the output contract the prompts state, never
from the engine's own account: a reply this reading finds valid that the engine still failed on is the
engine's failure (CONTROL_WRITE_FAILED), and a reply it finds broken that the engine reported as a success is
DEGRADED_SUCCESS. The strict parse mirrors the spec (one JSON object, optionally inside one ``` fence, holding
every output field, no repair); the field shapes mirror the prompts' stated schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError, field_validator

from evals.core.prompt_reading import section_json
from evals.core.redact import redact_text
from evals.faults.plan import MEM0_EXTRACT, Expected, expected_for_class
from evals.record import Attempt, Cause

# Each cause's failure class in the failure table (evals.faults.plan): which codes the engine must return.
FAILURE_CLASS = {"parse": "parse", "empty": "empty", "schema": "parse", "refused": "parse",
                 "unavailable": "unavailable"}
EXCERPT_CHARS = 300  # of a broken reply kept in the record (redacted)

_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)
_REFUSAL = re.compile(r"(?i)\b(?:i(?:'| a)?m sorry|sorry,|i can(?:not|'t|’t)|i am unable|i'm unable|i won(?:'|’)t|"
                      r"as an ai\b|i (?:must|have to) decline)|抱歉|对不起|无法(?:提供|完成|帮助)|不能(?:提供|帮助)")
_OK_STATUSES = ("ok", "empty_content")
# DSPy's error for an HTTP 200 whose body is not JSON: "the reply (HTTP 200, text/html, 52 bytes) is not JSON"
_HTTP_200_BODY = re.compile(r"\(HTTP 200\b[^)]*?\b(\d+) bytes\)")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore")  # extra keys are ignored, as the engine's adapter ignores them


MAX_SUBJECT_CHARS = 64  # a subject is a name: one line, as long as a speaker label may be (README, spec 2)


class _Fact(_Strict):
    text: StrictStr
    subject: StrictStr
    owner: Literal["user", "agent"]

    @field_validator("text")
    @classmethod
    def _has_text(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("a fact has empty text")
        return text

    @field_validator("subject")
    @classmethod
    def _a_name(cls, subject: str) -> str:
        subject = subject.strip()
        if len(subject) > MAX_SUBJECT_CHARS or len(subject.splitlines()) > 1:
            raise ValueError(f"a subject is a name of one line and at most {MAX_SUBJECT_CHARS} characters, "
                             f"got {subject[:80]!r}")
        return subject


class _Profile(_Strict):
    name: StrictStr | None = None
    age: StrictStr | None = None
    gender: StrictStr | None = None
    occupation: StrictStr | None = None
    location: StrictStr | None = None


class _Extract(_Strict):
    facts: list[_Fact]
    profile: _Profile


class _Working(_Strict):
    experiences: list[_Fact]
    facts: list[_Fact]


class _Op(_Strict):
    op: Literal["ADD", "UPDATE", "DELETE", "SUPERSEDE", "NOOP"]
    fact: StrictInt | None = None
    id: StrictInt | None = None


class _Reconcile(_Strict):
    ops: list[_Op]


class _Mem0Extract(_Strict):
    """mem0's extraction reply (mem0 2.x): its memories to add."""

    memory: list[dict[str, Any]]


_SCHEMAS: dict[str, type[_Strict]] = {"lm.extract": _Extract, "lm.extract_working": _Working,
                                      "lm.reconcile": _Reconcile, MEM0_EXTRACT: _Mem0Extract}


class Reading(BaseModel):
    """The harness's reading of one model call: broken (with its cause) or not, and what showed it."""

    site: str
    cause: Cause | None  # None: a valid reply
    detail: str = ""
    reply: str = ""  # a redacted excerpt of the reply


def read_reply(site: str, reply: str | None, prompt: str = "") -> Reading:
    """Whether one reply of the model at `site` breaks the output contract, and how.

    `prompt`: what the call was shown; for reconcile, its `new_facts` and `existing` sections say which fact
    indexes and memory ids an op may name (an op naming another is a broken reply: spec reconcile-failure.md).
    """
    excerpt = excerpt_of(reply)
    if reply is None or not reply.strip():
        return Reading(site=site, cause="empty", detail="the reply's content is empty", reply=excerpt)
    text = reply.strip()
    fenced = _FENCE.match(text) if site != MEM0_EXTRACT else re.match(r"^\s*```(?:\w+)?\s*\n?(.*?)\n?\s*```\s*$",
                                                                         text, re.DOTALL)
    body = fenced.group(1) if fenced else text
    try:
        value = json.loads(body)
    except ValueError as exc:
        cause: Cause = "refused" if _REFUSAL.search(text[:400]) and "{" not in text[:200] else "parse"
        return Reading(site=site, cause=cause, detail=f"not strict JSON: {exc}", reply=excerpt)
    schema = _SCHEMAS.get(site)
    if not isinstance(value, dict):
        return Reading(site=site, cause="parse", detail=f"a JSON {type(value).__name__}, not an object",
                       reply=excerpt)
    if schema is None:
        return Reading(site=site, cause=None, reply=excerpt)
    missing = [name for name in schema.model_fields if name not in value]
    if missing:
        return Reading(site=site, cause="schema", detail=f"lacks output field(s) {missing}", reply=excerpt)
    try:
        parsed = schema.model_validate(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return Reading(site=site, cause="schema", detail=f"{where}: {first['msg']}", reply=excerpt)
    if isinstance(parsed, _Reconcile):
        wrong = _unknown_reference(parsed.ops, prompt)
        if wrong:
            return Reading(site=site, cause="schema", detail=wrong, reply=excerpt)
    return Reading(site=site, cause=None, reply=excerpt)


def _unknown_reference(ops: list[_Op], prompt: str) -> str:
    """The first op that names a fact index or memory id the reconcile prompt did not offer, or lacks one its
    op needs; "" when every op is well-formed (or the prompt's sections cannot be read: nothing to judge by)."""
    facts = section_json(prompt, "new_facts", "\n\n[[ ## existing ## ]]")
    existing = section_json(prompt, "existing", "\n\nRespond with")
    if not isinstance(facts, list) or not isinstance(existing, list):
        return ""
    ids = {e.get("id") for e in existing if isinstance(e, dict)}
    for i, op in enumerate(ops):
        if op.fact is not None and not 0 <= op.fact < len(facts):
            return f"ops[{i}]: fact index {op.fact} is not among the {len(facts)} new facts"
        if op.id is not None and op.id not in ids:
            return f"ops[{i}]: id {op.id} is not among the memories shown {sorted(i for i in ids if i is not None)}"
        if op.op in ("ADD", "UPDATE", "SUPERSEDE", "NOOP") and op.fact is None:
            return f"ops[{i}]: {op.op} names no fact index"
        if op.op in ("UPDATE", "SUPERSEDE", "DELETE") and op.id is None:
            return f"ops[{i}]: {op.op} names no memory id"
    return ""


def excerpt_of(reply: str | None) -> str:
    """A redacted excerpt of a reply, short enough for a table cell."""
    if not reply:
        return ""
    text = redact_text(reply)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


def why_failed(prompts: Sequence[dict[str, str]], attempts: Sequence[Attempt]) -> Reading:
    """Why a fault-free write failed, read from the model calls it made (`prompts`, each with the reply when one
    came back) and its attempt rows: the provider's error on the call that never answered, else the first reply
    that breaks the contract, else `engine` (every reply valid: the engine failed on its own)."""
    failed = _failed_call(attempts)
    if failed is not None:
        return Reading(site=failed.site, cause=_attempt_cause(failed),
                       detail=redact_text(f"{failed.status}: {failed.error or ''}")[:EXCERPT_CHARS])
    for call in prompts:
        if "reply" not in call:  # the call raised before a reply came back (a model without attempt rows)
            return Reading(site=call.get("site", "lm"), cause="unavailable", detail="the call returned no reply")
        reading = read_reply(call.get("site", "lm"), call.get("reply"), call.get("text", ""))
        if reading.cause is not None:
            return reading
    last = prompts[-1]["site"] if prompts else ""
    return Reading(site=last, cause="engine", detail="every reply the model gave reads as valid")


def broken_replies(prompts: Sequence[dict[str, str]]) -> list[Reading]:
    """The replies of one write that break the contract (for a write reported as a success)."""
    readings = [read_reply(c.get("site", "lm"), c.get("reply"), c.get("text", "")) for c in prompts if "reply" in c]
    return [r for r in readings if r.cause is not None]


def _failed_call(attempts: Sequence[Attempt]) -> Attempt | None:
    """The attempt whose provider error ended a call (its last attempt failed), if any."""
    last: dict[tuple[str, int], Attempt] = {}
    calls = 0
    for a in attempts:
        if a.attempt == 1:
            calls += 1
        last[(a.site, calls)] = a
    failed = [a for a in last.values() if not a.cache_hit and a.status not in _OK_STATUSES]
    return failed[-1] if failed else None


def _attempt_cause(attempt: Attempt) -> Cause:
    """A failed attempt's cause: an HTTP 200 whose body is empty or not JSON is a broken reply (`empty`, `parse`),
    as the failure table classes it; any other provider error (5xx, 429, timeout, a dropped connection) is
    `unavailable`."""
    body = _HTTP_200_BODY.search(attempt.error or "")
    if body is None:
        return "unavailable"
    return "empty" if body.group(1) == "0" else "parse"


def reached_provider(attempts: Sequence[Attempt], site: str) -> bool:
    """Some call of the unit to the provider behind `site` (the model, or the embedder) got an answer (a reply, an
    empty one, or an HTTP 200 with a broken body): it can be reached, so its failure on this write is the
    provider's doing, not an infra error."""
    embedder = site.startswith("embed")
    return any((a.cache_hit or a.status in _OK_STATUSES or _HTTP_200_BODY.search(a.error or ""))
               and a.site.startswith("embed") == embedder for a in attempts)


def expected_codes(reading: Reading) -> Expected | None:
    """The failure table's outcome for the cause at its site (None for the engine's own failure)."""
    if reading.cause is None or reading.cause == "engine":
        return None
    return expected_for_class(reading.site, FAILURE_CLASS[reading.cause])


def codes_consistent(expected: Expected, actual: dict[str, Any]) -> bool:
    """The write returned the codes the failure table gives for its reply's failure class."""
    want = expected.model_dump()
    return {k: actual.get(k) for k in want} == want


__all__ = ["MEM0_EXTRACT", "Cause", "Reading", "broken_replies", "codes_consistent",
           "excerpt_of", "expected_codes", "read_reply", "reached_provider", "why_failed"]
