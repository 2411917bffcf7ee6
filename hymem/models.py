"""Typed records that cross the engine's public boundary.

Kept in one small module so the client, the store and the harness agree on
one shape for a message, a memory, a reconcile op and a write result.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["user", "assistant", "system", "tool"]
Owner = Literal["user", "agent"]
Kind = Literal["fact", "experience"]
OpName = Literal["ADD", "UPDATE", "DELETE", "SUPERSEDE", "NOOP"]
CallSite = Literal["lm.extract", "lm.extract_working", "lm.reconcile", "embed"]  # see hymem.sites


class ChatMessage(BaseModel):
    """One normalised message: the only shape the renderer and L1 history use."""

    model_config = ConfigDict(frozen=True)

    role: Role
    name: str | None = None  # speaker name for user/assistant; tool name for role=tool
    content: str


class Memory(BaseModel):
    """A live memory as returned by search/get_all."""

    id: int  # SQLite rowid; also the FAISS id
    user_id: str
    text: str
    subject: str  # "user", "assistant", or a person's name
    owner: Owner
    kind: Kind = "fact"
    score: float | None = None  # similarity, set by search only
    request_id: str | None = None  # the write that created or last updated it
    created_at: float | None = None
    updated_at: float | None = None


class ErrorCode(StrEnum):
    """The spec's error codes, exactly as written there, and the engine's own REQUEST_ID_REUSED."""

    RECONCILE_FAILED = "RECONCILE_FAILED"  # agent_error_code
    LLM_UNAVAILABLE = "LLM_UNAVAILABLE"  # reconcile_error_code ...
    EMPTY_RESPONSE = "EMPTY_RESPONSE"
    JSON_PARSE_FAILED = "JSON_PARSE_FAILED"
    RECONCILE_EXCEPTION = "RECONCILE_EXCEPTION"
    LLM_ERROR = "LLM_ERROR"  # error_code (extraction / working path) ...
    EMBEDDING_FAILED = "EMBEDDING_FAILED"
    STORE_FAILED = "STORE_FAILED"
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"  # error_code: this user's request_id was already used for another payload


class AppliedOp(BaseModel):
    """One change the engine applied (or refused), with the ids involved."""

    op: OpName
    memory_id: int | None = None  # the new or changed memory
    target_id: int | None = None  # the existing memory an UPDATE/SUPERSEDE/DELETE/NOOP names
    text: str | None = None
    subject: str | None = None
    owner: Owner | None = None
    kind: Kind = "fact"
    refused: str | None = None  # why the engine refused the model's op (e.g. cross-subject)


class ProposedFact(BaseModel):
    """A fact as the extractor proposed it (or as a seeded memory gave it), before reconcile decided."""

    text: str
    subject: str
    owner: Owner
    kind: Kind = "fact"
    subject_class: Literal["user", "assistant", "named"]  # the subject folded: user, the AI, or a named person


class ModelCall(BaseModel):
    """One model or embedding call a write made, named by its call site (the engine says which it is)."""

    site: CallSite


class WriteResult(BaseModel):
    """Outcome of one write. A failed write stored nothing and is safe to retry.

    Besides the applied `ops`, it says what the models proposed (`proposed_facts`, `proposed_ops`, on a
    write that reached them) and every model and embedding call it made (`calls`), so a caller never has
    to read the store's trace tables to learn what the engine did.
    """

    success: bool
    request_id: str
    ops: list[AppliedOp] = Field(default_factory=list)  # what was applied (or refused and rewritten)
    proposed_facts: list[ProposedFact] = Field(default_factory=list)  # what the extractor proposed
    proposed_ops: list[dict[str, Any]] = Field(default_factory=list)  # the reconcile model's ops, as it wrote them
    calls: list[ModelCall] = Field(default_factory=list)  # every model and embedding call, in order
    agent_error_code: str | None = None  # RECONCILE_FAILED
    reconcile_error_code: str | None = None  # LLM_UNAVAILABLE | EMPTY_RESPONSE | JSON_PARSE_FAILED | RECONCILE_EXCEPTION
    error_code: str | None = None  # LLM_ERROR | EMPTY_RESPONSE | JSON_PARSE_FAILED | EMBEDDING_FAILED | STORE_FAILED
    #                                 | REQUEST_ID_REUSED
    retry_safe: bool = True
    message: str = ""
    duplicate: bool = False  # this user had already written this request_id and payload: nothing was written again
