"""HyMemoryClient: the write chain and the all-or-nothing write contract.

A write runs: normalise → render → extract (LM) → embed → reconcile (LM) →
one SQLite transaction (L1 raw, memories, profile, episode, trace, chain
rounds, request record) → FAISS update. Everything that can fail runs
before the transaction, so a failed write stores nothing and is safe to retry.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import unicodedata
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from hymem.chain import ChainError, Round, jsonable, run_round
from hymem.embedder import EmbeddingError, embed_checked, embedder_dim, make_embedder
from hymem.failpoints import failpoint
from hymem.llm import make_lm, raise_if_programming_error
from hymem.messages import normalize_messages
from hymem.models import AppliedOp, ChatMessage, ErrorCode, Memory, WriteResult
from hymem.program import MemoryProgram
from hymem.reconciler import NewFact, PlannedOp, ReconcilePlan, direct_plan, reconcile
from hymem.render import MAX_NAME_CHARS, conversation_language, parse_history, render_conversation, render_working
from hymem.sites import calling, recording_calls
from hymem.store import Store, WriteTx
from hymem.subjects import canonical_subject, memory_subject, same_subject, subject_of
from hymem.validation import (
    DEFAULT_MAX_MESSAGE_CHARS,
    DEFAULT_MAX_WRITE_CHARS,
    InputValidationError,
    check_positive_int,
    check_request_id,
    check_user_id,
    size_problem,
    text_problem,
)

_T = TypeVar("_T")

_EXTRACT_CODES = {"unavailable": ErrorCode.LLM_ERROR, "empty": ErrorCode.EMPTY_RESPONSE,
                  "parse": ErrorCode.JSON_PARSE_FAILED, "other": ErrorCode.LLM_ERROR}
_RECONCILE_CODES = {"unavailable": ErrorCode.LLM_UNAVAILABLE, "empty": ErrorCode.EMPTY_RESPONSE,
                    "parse": ErrorCode.JSON_PARSE_FAILED, "other": ErrorCode.RECONCILE_EXCEPTION}


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


class _WriteFailed(Exception):
    """Internal: carries the failed WriteResult out of the chain."""

    def __init__(self, result: WriteResult):
        super().__init__(result.message)
        self.result = result


class HyMemoryClient:
    """An in-process memory engine over one store directory.

    `lm`: a `dspy.LM` or a model string (`"offline"` for the reference model).
    `embedder`: an object with `embed(texts)`, or `hash` / `minilm` / `openai[/MODEL][@URL]`.
    `reconcile_enabled=None` reads RECONCILE_ENABLED (default true).
    `max_message_chars` / `max_write_chars`: the most characters of text one message (or extracted memory,
    or search query) and one write may carry; larger input is refused before any model call (None: no limit).
    Every argument is checked before any model call; a bad one raises `InputValidationError`.
    `synchronous`: SQLite's, in WAL mode (see `Store`). The default, NORMAL, makes a write that returned durable
    against a crash of the application (an exception, kill -9, the OOM killer), not against power loss or an OS
    crash, which can lose the last writes (never part of one). FULL adds an fsync per write, durable against power
    loss too, and the writer then waits for the disk (and, on a busy machine, for the scheduler: issue 35).
    """

    def __init__(self, path: str | os.PathLike = "hymem-store", lm: Any = "offline", embedder: Any = "hash",
                 mode: str = "pro", reconcile_enabled: bool | None = None, program: MemoryProgram | None = None,
                 candidates_per_fact: int = 5, history_limit: int = 2000,
                 max_message_chars: int | None = DEFAULT_MAX_MESSAGE_CHARS,
                 max_write_chars: int | None = DEFAULT_MAX_WRITE_CHARS, synchronous: str = "NORMAL"):
        self.max_message_chars = check_positive_int("max_message_chars", max_message_chars, allow_none=True)
        self.max_write_chars = check_positive_int("max_write_chars", max_write_chars, allow_none=True)
        self.path = Path(path)
        self.mode = mode
        self.lm = make_lm(lm)
        self.embedder = make_embedder(embedder)
        self.reconcile_enabled = _env_flag("RECONCILE_ENABLED", True) if reconcile_enabled is None else reconcile_enabled
        self.program = program or MemoryProgram()
        self.candidates_per_fact = candidates_per_fact
        self.history_limit = history_limit
        self.dim = embedder_dim(self.embedder)
        self.store = Store(self.path, dim=self.dim, synchronous=synchronous)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> HyMemoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _user_lock(self, user_id: str) -> Iterator[None]:
        """Writes for one user are serialised; different users run concurrently."""
        with self._locks_guard:
            lock = self._locks.setdefault(user_id, threading.Lock())
        with lock:
            yield

    # ------------------------------------------------------------------ reads
    def search(self, query: str, user_id: str, k: int = 5) -> list[Memory]:
        problem = text_problem(query, max_chars=self.max_message_chars, limit="max_message_chars")
        if problem is not None:
            raise InputValidationError("query", problem)
        user_id, k = check_user_id(user_id), check_positive_int("k", k)
        with calling("embed"):
            vector = embed_checked(self.embedder, [query], self.dim)[0]
        return self.store.search(user_id, vector, k=k)

    def get_all(self, user_id: str) -> list[Memory]:
        return self.store.live_memories(check_user_id(user_id))

    def profile(self, user_id: str) -> dict:
        return self.store.profile(check_user_id(user_id))

    def history(self, user_id: str) -> list[ChatMessage]:
        # Each write's L1 raw is parsed on its own, so one write's name line never names another's user.
        return [m for raw in self.store.l1_raw(check_user_id(user_id))
                for m in parse_history(raw, history_limit=self.history_limit)]

    # ------------------------------------------------------------------ writes
    def add(self, messages: list, user_id: str, request_id: str | None = None) -> WriteResult:
        """Chat path: L1 raw → extract → reconcile → store."""
        user_id, request_id = check_user_id(user_id), check_request_id(request_id)
        msgs = self._messages(messages)
        return self._write(user_id, request_id, "chat", _messages_payload(msgs),
                           lambda rid: self._chat_chain(msgs, user_id, rid))

    def add_extracted(self, memories: list[dict], user_id: str, request_id: str | None = None) -> WriteResult:
        """Already-extracted memories (`text`, `owner`[, `subject`, `kind`]): reconcile → store."""
        user_id, request_id = check_user_id(user_id), check_request_id(request_id)
        facts = self._memories(memories)
        payload = [{"text": f.text, "subject": f.subject, "owner": f.owner, "kind": f.kind} for f in facts]
        return self._write(user_id, request_id, "extracted", payload,
                           lambda rid: self._facts_chain(facts, user_id, rid))

    def add_working(self, messages: list, user_id: str, request_id: str | None = None) -> WriteResult:
        """Working/coding path: experiences and facts from a trajectory."""
        user_id, request_id = check_user_id(user_id), check_request_id(request_id)
        msgs = self._messages(messages)
        return self._write(user_id, request_id, "working", _messages_payload(msgs),
                           lambda rid: self._working_chain(msgs, user_id, rid))

    def _write(self, user_id: str, request_id: str | None, path: str, payload: Any, chain: Any) -> WriteResult:
        """Idempotency per (user_id, request_id), then the chain, then the commit.

        A request_id this user already wrote answers that write's result (`duplicate=true`) when the
        payload and path are the same, and REQUEST_ID_REUSED otherwise; nothing is written either way.
        """
        rid = request_id if request_id is not None else uuid.uuid4().hex
        fingerprint = _fingerprint(path, payload)
        with self._user_lock(user_id), recording_calls() as calls:
            prior = self.store.recorded_request(user_id, rid)
            if prior is not None:
                prior_fingerprint, prior_result = prior
                if prior_fingerprint is not None and prior_fingerprint != fingerprint:
                    return self._failure(rid, error_code=ErrorCode.REQUEST_ID_REUSED, message=(
                        f"request_id {rid!r} was already used by user {user_id!r} for another payload;"
                        " nothing was written (send a new request_id)"))
                # nothing is called again: the stored result says what the first write did
                return WriteResult.model_validate({**prior_result, "duplicate": True, "calls": []})
            try:
                work = chain(rid)
            except _WriteFailed as failed:
                return failed.result.model_copy(update={"calls": list(calls)})
            return self._commit(user_id, rid, path, work, fingerprint).model_copy(update={"calls": list(calls)})

    def _messages(self, messages: Any) -> list[ChatMessage]:
        return normalize_messages(messages, max_message_chars=self.max_message_chars,
                                  max_write_chars=self.max_write_chars)

    def _memories(self, memories: Any) -> list[NewFact]:
        """Checked already-extracted memories, within the size limits."""
        if not isinstance(memories, list):
            raise InputValidationError("memories", f"must be a list of dicts, got {type(memories).__name__}")
        facts = [_fact_from_dict(i, m, self.max_message_chars) for i, m in enumerate(memories)]
        total = sum(len(f.text) for f in facts)
        if self.max_write_chars is not None and total > self.max_write_chars:
            raise InputValidationError("memories", size_problem(total, self.max_write_chars, "max_write_chars"))
        return facts

    # ------------------------------------------------------------------ chains
    def _chat_chain(self, msgs: list[ChatMessage], user_id: str, rid: str) -> dict:
        rendered = render_conversation(msgs)
        lang = conversation_language(msgs)
        extract = self._round(rid, "extract", self.program.extractor(lang), conversation=rendered)
        failpoint("client.after_extract")
        facts = self._facts_of(rid, extract, msgs, ("facts", "fact"))
        profile = extracted_profile(extract.outputs.get("profile"), msgs)
        work = self._reconcile_chain(facts, user_id, rid)
        work["rounds"].insert(0, extract)
        work.update(l1_raw=rendered, profile=profile, proposed_facts=[_fact_json(f) for f in facts], lang=lang)
        return work

    def _working_chain(self, msgs: list[ChatMessage], user_id: str, rid: str) -> dict:
        extract = self._round(rid, "extract_working", self.program.extract_working, trajectory=render_working(msgs))
        failpoint("client.after_extract")
        facts = self._facts_of(rid, extract, msgs, ("experiences", "experience"), ("facts", "fact"))
        work = self._reconcile_chain(facts, user_id, rid)
        work["rounds"].insert(0, extract)
        work["proposed_facts"] = [_fact_json(f) for f in facts]
        return work

    def _facts_chain(self, facts: list[NewFact], user_id: str, rid: str) -> dict:
        work = self._reconcile_chain(facts, user_id, rid)
        work["proposed_facts"] = [_fact_json(f) for f in facts]
        return work

    def _reconcile_chain(self, facts: list[NewFact], user_id: str, rid: str) -> dict:
        """Embed every new fact, then reconcile against retrieved candidates. Nothing is stored here."""
        try:
            with calling("embed"):
                vectors = embed_checked(self.embedder, [f.text for f in facts], self.dim)
        except EmbeddingError as exc:
            raise _WriteFailed(self._failure(rid, error_code=ErrorCode.EMBEDDING_FAILED, message=str(exc))) from exc
        for fact, vector in zip(facts, vectors, strict=True):
            fact.vector = vector
        failpoint("client.after_embed")
        rounds: list[Round] = []
        if not facts:
            plan = ReconcilePlan(proposed=[], ops=[])
        elif not self.reconcile_enabled:
            plan = direct_plan(facts)
        else:
            try:
                plan = reconcile(self.program.reconcile, self.lm, facts, self._candidates(user_id, facts))
            except ChainError as exc:
                raise _WriteFailed(self._failure(
                    rid, agent_error_code=ErrorCode.RECONCILE_FAILED,
                    reconcile_error_code=_RECONCILE_CODES[exc.kind], message=str(exc))) from exc
            except Exception as exc:  # anything else raised before storing
                raise_if_programming_error(exc)  # a bug (e.g. a scripted model out of replies), never a model failure
                raise _WriteFailed(self._failure(
                    rid, agent_error_code=ErrorCode.RECONCILE_FAILED,
                    reconcile_error_code=ErrorCode.RECONCILE_EXCEPTION,
                    message=f"{type(exc).__name__}: {exc}")) from exc
            if plan.round is not None:
                rounds.append(plan.round)
        failpoint("client.after_reconcile")
        return {"facts": facts, "plan": plan, "rounds": rounds}

    def _round(self, rid: str, stage: str, predictor: Any, **inputs: Any) -> Round:
        try:
            return run_round(stage, predictor, self.lm, **inputs)
        except ChainError as exc:
            raise _WriteFailed(self._failure(rid, error_code=_EXTRACT_CODES[exc.kind], message=str(exc))) from exc

    def _facts_of(self, rid: str, extract: Round, msgs: list[ChatMessage], *fields: tuple[str, str]) -> list[NewFact]:
        """The extracted facts of the named output fields, each tagged with its kind."""
        try:
            return extracted_facts(extract.outputs, msgs, *fields)
        except ChainError as exc:
            raise _WriteFailed(self._failure(rid, error_code=_EXTRACT_CODES[exc.kind], message=str(exc))) from exc

    def _candidates(self, user_id: str, facts: list[NewFact]) -> list[Memory]:
        """Existing memories most similar to any new fact, best first, without repeats."""
        best: dict[int, Memory] = {}
        for fact in facts:
            for memory in self.store.search(user_id, fact.vector, k=self.candidates_per_fact, kind=fact.kind):
                if memory.id not in best or (memory.score or 0) > (best[memory.id].score or 0):
                    best[memory.id] = memory
        return sorted(best.values(), key=lambda m: (-(m.score or 0.0), m.id))

    @staticmethod
    def _failure(rid: str, **fields: Any) -> WriteResult:
        fields = {k: (v.value if isinstance(v, ErrorCode) else v) for k, v in fields.items()}
        return WriteResult(success=False, request_id=rid, retry_safe=True, **fields)

    # ------------------------------------------------------------------ commit
    def _commit(self, user_id: str, rid: str, path: str, work: dict, fingerprint: str) -> WriteResult:
        facts: list[NewFact] = work["facts"]
        plan: ReconcilePlan = work["plan"]
        applied: list[AppliedOp] = []
        try:
            with self.store.write() as tx:
                if "l1_raw" in work:
                    tx.append_l1_raw(user_id, rid, work["l1_raw"])
                for op in plan.ops:
                    applied.append(self._apply(tx, user_id, rid, facts, op))
                if work.get("profile"):
                    tx.merge_profile(user_id, work["profile"])
                episode = tx.advance_episode(user_id)
                result = WriteResult(success=True, request_id=rid, ops=applied,
                                     proposed_facts=work.get("proposed_facts", []), proposed_ops=plan.proposed,
                                     message=f"{sum(a.op != 'NOOP' for a in applied)} change(s)")
                tx.append_trace(user_id, rid, path, {
                    "episode": episode,
                    "proposed_facts": work.get("proposed_facts", []),
                    "profile": work.get("profile") or {},
                    "candidates": [m.id for m in plan.candidates],
                    "proposed_ops": plan.proposed,
                    "applied_ops": [a.model_dump() for a in applied],
                    "reconciled": bool(plan.round),
                })
                tx.add_chain_rounds(user_id, rid, [
                    (number, round_.stage, {"outputs": jsonable(round_.outputs), "seconds": round_.seconds})
                    for number, round_ in enumerate(work["rounds"], start=1)])
                tx.record_request(rid, user_id, result.model_dump(), fingerprint)
        except Exception as exc:  # the transaction rolled back: nothing was stored
            return self._failure(rid, error_code=ErrorCode.STORE_FAILED, message=f"{type(exc).__name__}: {exc}")
        return result

    @staticmethod
    def _apply(tx: WriteTx, user_id: str, rid: str, facts: list[NewFact], op: PlannedOp) -> AppliedOp:
        fact = facts[op.fact] if op.fact is not None else None
        common: dict[str, Any] = {"target_id": op.target_id, "refused": op.refused}
        if fact is not None:
            common.update(text=fact.text, subject=fact.subject, owner=fact.owner, kind=fact.kind)
        if op.op == "ADD":
            new = _planned(fact, op)
            new_id = tx.add_memory(user_id, new.text, new.subject, new.owner, new.kind, new.vector, rid)
            return AppliedOp(op="ADD", memory_id=new_id, **common)
        if op.op == "UPDATE":
            new, target = _planned(fact, op), _planned(op.target_id, op)
            tx.update_memory(target, new.text, new.subject, new.owner, new.vector, rid)
            return AppliedOp(op="UPDATE", memory_id=target, **common)
        if op.op == "SUPERSEDE":
            new, target = _planned(fact, op), _planned(op.target_id, op)
            new_id = tx.add_memory(user_id, new.text, new.subject, new.owner, new.kind, new.vector, rid)
            tx.supersede(target, new_id)
            return AppliedOp(op="SUPERSEDE", memory_id=new_id, **common)
        if op.op == "DELETE":
            target = _planned(op.target_id, op)
            tx.delete(target)
            return AppliedOp(op="DELETE", memory_id=target, **common)
        return AppliedOp(op="NOOP", memory_id=op.target_id, **common)


# ---------------------------------------------------------------------- helpers
def _messages_payload(msgs: list[ChatMessage]) -> list[dict]:
    return [m.model_dump() for m in msgs]


def _fingerprint(path: str, payload: Any) -> str:
    """A digest of what a write was asked to store: its path and normalised payload."""
    canonical = json.dumps({"path": path, "payload": payload}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def extracted_facts(outputs: Mapping[str, Any], msgs: list[ChatMessage], *fields: tuple[str, str]) -> list[NewFact]:
    """The facts of an extract round's named output fields, as the engine stores them: each held to
    `_fact_from_model` (a bad one raises ChainError, which fails the write) and filed under the named human
    its sentence is about. Prompt tuning scores these, so it optimises what a write would store."""
    return _named_subjects([_fact_from_model(f, kind=kind) for name, kind in fields for f in outputs[name]], msgs)


def extracted_profile(profile: Any, msgs: list[ChatMessage]) -> dict:
    """The L0 update an extract round's profile makes (see `_profile_updates`)."""
    return _profile_updates(profile, msgs)


def _fact_from_model(fact: Any, kind: str = "fact") -> NewFact:
    """A fact the model extracted, held to what `add_extracted` takes: text, and a subject of one short line
    (a subject with a line break would carry a forged speaker line into the reconcile prompt)."""
    text = " ".join(str(fact.text).split())
    if not text:
        raise ChainError("extract", "parse", "an extracted fact has empty text")
    subject = str(fact.subject).strip()
    if len(subject) > MAX_NAME_CHARS or len(subject.splitlines()) > 1:
        raise ChainError("extract", "parse", f"an extracted fact's subject must be one line of at most {MAX_NAME_CHARS}"
                                            f" characters, got {subject[:80]!r}")
    return NewFact(text=text, subject=subject or "user", owner=fact.owner, kind=kind)


def _planned(value: _T | None, op: PlannedOp) -> _T:
    """The fact or target an op needs; validate_ops plans none without it, so None is an engine bug."""
    if value is None:
        raise ValueError(f"planned {op} lacks its fact or target")
    return value


_MEMORY_FIELDS = ("text", "owner", "subject", "kind")


def _fact_from_dict(index: int, memory: Any, max_chars: int | None) -> NewFact:
    """One already-extracted memory, checked field by field; a bad one names `memories[index].field`."""
    def refuse(field: str | None, problem: str) -> InputValidationError:
        return InputValidationError("memories", problem, index=index, field=field)

    if not isinstance(memory, Mapping):
        raise refuse(None, f"must be a dict with {', '.join(_MEMORY_FIELDS)}, got {type(memory).__name__}")
    for key in memory:
        if key not in _MEMORY_FIELDS:
            raise refuse(str(key), f"unknown field (a memory has {', '.join(_MEMORY_FIELDS)})")
    text = memory.get("text")
    if (problem := text_problem(text, max_chars=max_chars, limit="max_message_chars")) is not None:
        raise refuse("text", problem)
    assert isinstance(text, str)  # text_problem refuses anything else
    owner = memory.get("owner", "user")
    if not isinstance(owner, str) or owner not in ("user", "agent"):
        raise refuse("owner", f"must be 'user' or 'agent', got {owner!r}")
    kind = memory.get("kind", "fact")
    if not isinstance(kind, str) or kind not in ("fact", "experience"):
        raise refuse("kind", f"must be 'fact' or 'experience', got {kind!r}")
    subject = memory.get("subject")
    if subject is not None:
        if (problem := text_problem(subject, allow_blank=True)) is not None:
            raise refuse("subject", problem)
        subject = subject.strip()
        if len(subject) > MAX_NAME_CHARS or len(subject.splitlines()) > 1:
            raise refuse("subject", f"must be one line of at most {MAX_NAME_CHARS} characters")
    return NewFact(text=" ".join(text.split()), subject=subject or memory_subject(text, owner), owner=owner,
                   kind=kind)


def _named_humans(msgs: list[ChatMessage]) -> list[str]:
    return [m.name.strip() for m in msgs if m.role == "assistant" and m.name and m.name.strip()]


def _named_subjects(facts: list[NewFact], msgs: list[ChatMessage]) -> list[NewFact]:
    """A fact labelled the user's or the AI's whose sentence is about a named human of the conversation is
    theirs (spec 3: "John is a nurse in Berlin." has subject John), whatever the model labelled it: the subject
    the sentence names, read with the conversation's names first (`hymem.subjects.subject_of` with the named
    speakers and the user's own name), is that person: "赵敏很喜欢喝咖啡。" and "Dr. Smith is a dentist." are
    theirs, "John's sister is a doctor." is not John's, nor is "张伟…" 张's or "Al-Jazeera…" Al's. The owner is
    left as the model gave it: a wrong owner is the model's error, which the harness scores."""
    humans = _named_humans(msgs)
    user_name = next((m.name.strip() for m in msgs if m.role == "user" and m.name and m.name.strip()), None)
    for fact in facts:
        if canonical_subject(fact.subject) not in ("user", "assistant"):
            continue
        named = subject_of(fact.text, humans, user_name)
        speaker = next((n for n in humans if same_subject(named, n)), None)
        if speaker is not None:
            fact.subject = speaker
    return facts


def _profile_updates(profile: Any, msgs: list[ChatMessage]) -> dict:
    """The model's L0 update, which describes only the current user (spec 3): the role=user message's name is
    trusted over the model's; a named human's name, or a value only a named human said, is never taken."""
    updates = {}
    if profile is not None:
        data = profile.model_dump() if hasattr(profile, "model_dump") else dict(profile)
        updates = {k: v for k, v in data.items() if v is not None and str(v).strip()}
    if updates:  # the speakers' words are read only when a value needs judging (most writes state none)
        _drop_others_values(updates, msgs)
    name = next((m.name for m in msgs if m.role == "user" and m.name), None)
    if name:
        updates["name"] = name
    return updates


def _drop_others_values(updates: dict, msgs: list[ChatMessage]) -> None:
    """Drop from `updates` every value that is a named human's name, or that only a named human's words support."""
    others = _words("\n".join(m.content for m in msgs if m.role == "assistant" and m.name and m.name.strip()))
    said = _words("\n".join(m.content for m in msgs if m.role == "user"))
    third = {n.casefold() for n in _named_humans(msgs)}
    for key, value in list(updates.items()):
        words = _words(str(value))
        # a value that only a named human's words support ("Nurse.", "registered nurse", "Berlin, Germany"
        # when only John said "I am a nurse in Berlin.") is theirs, not the user's
        if str(value).strip().casefold() in third or (words & others and not words & said):
            del updates[key]


def _words(text: str) -> set[str]:
    """The words of a text, case-folded, for telling who said a profile value: Latin words and numbers, and
    each Chinese character pair (护士 in 我是护士)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = set(re.findall(r"[^\W\d_\u3400-\u9fff]{2,}|\d+", folded))
    for run in re.findall(r"[\u3400-\u9fff]+", folded):
        words |= {run[i:i + 2] for i in range(len(run) - 1)} if len(run) > 1 else {run}
    return words - _STOPWORDS


# Words any speaker says, which tell nothing about who said a value.
_STOPWORDS = frozenset("""the and for with from that this are was were has have had not but you your his her their its
our they she him them who what when where which also very just now one two in at on to of is am an as by or be do my me
we it""".split())


def _fact_json(fact: NewFact) -> dict:
    subject = canonical_subject(fact.subject)
    return {"text": fact.text, "subject": fact.subject, "owner": fact.owner, "kind": fact.kind,
            "subject_class": subject if subject in ("user", "assistant") else "named"}

