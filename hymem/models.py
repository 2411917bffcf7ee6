"""Typed records that cross the engine's public boundary.

Kept in one small module so the client, the store and the harness agree on
one shape for a message, a memory, a reconcile op and a write result.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["user", "assistant", "system", "tool"]
Owner = Literal["user", "agent"]
Kind = Literal["fact", "experience"]
OpName = Literal["ADD", "UPDATE", "DELETE", "SUPERSEDE", "NOOP"]


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


class WriteResult(BaseModel):
    """Outcome of one write. A failed write stored nothing and is safe to retry."""

    success: bool
    request_id: str
    ops: list[AppliedOp] = Field(default_factory=list)
    agent_error_code: str | None = None  # RECONCILE_FAILED
    reconcile_error_code: str | None = None  # LLM_UNAVAILABLE | EMPTY_RESPONSE | JSON_PARSE_FAILED | RECONCILE_EXCEPTION
    error_code: str | None = None  # LLM_ERROR | EMPTY_RESPONSE | JSON_PARSE_FAILED | EMBEDDING_FAILED | STORE_FAILED
    #                                 | REQUEST_ID_REUSED
    retry_safe: bool = True
    message: str = ""
    duplicate: bool = False  # this user had already written this request_id and payload: nothing was written again
