"""A write transaction: SQLite statements now, the FAISS changes they imply only after COMMIT."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import TYPE_CHECKING, Literal

import numpy as np

from hymem.store._schema import KINDS, LIVE, OWNERS
from hymem.store._vectors import checked_vector, vector_digest

if TYPE_CHECKING:
    from hymem.store._store import Store


class WriteTx:
    """One SQLite transaction, plus the FAISS changes to apply once it has committed."""

    def __init__(self, store: Store):
        self._store = store
        # memory id -> (user_id, kind, vector) when live after commit, else None
        self._changes: dict[int, tuple[str, str, np.ndarray] | None] = {}
        self._checksum_delta = 0  # digests of the live vectors added minus those of the vectors removed
        self._open = False

    def __enter__(self) -> WriteTx:
        self._store._begin()
        self._open = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> Literal[False]:
        self._open = False
        if exc_type is not None:
            self._store._rollback()
            return False
        self._store._commit(self._changes, self._checksum_delta)
        return False

    def _conn(self) -> sqlite3.Connection:
        if not self._open:
            raise RuntimeError("write transaction is not open (use `with store.write() as tx:`)")
        return self._store._conn

    def _live_row(self, memory_id: int) -> tuple[str, str, bytes]:
        """(user_id, kind, vector BLOB) of a live memory; raises when there is none."""
        row = self._conn().execute(f"SELECT user_id, kind, vector FROM memories WHERE id = ? AND {LIVE}",
                                   (memory_id,)).fetchone()
        if row is None:
            raise ValueError(f"memory {memory_id} does not exist or is not live")
        return row

    def add_memory(self, user_id: str, text: str, subject: str, owner: str, kind: str, vector: np.ndarray,
                   request_id: str | None) -> int:
        """Insert a live memory; returns its id (also its FAISS id)."""
        if owner not in OWNERS:
            raise ValueError(f"owner must be one of {OWNERS}, got {owner!r}")
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        vec = checked_vector(vector, self._store.dim)
        now = time.time()
        cur = self._conn().execute(
            "INSERT INTO memories (user_id, text, subject, owner, kind, vector, created_at, updated_at, request_id)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (user_id, text, subject, owner, kind, vec.tobytes(), now, now, request_id))
        assert cur.lastrowid is not None  # an INSERT always sets it
        memory_id = cur.lastrowid
        self._changes[memory_id] = (user_id, kind, vec.copy())
        self._checksum_delta += vector_digest(memory_id, vec.tobytes())
        return memory_id

    def update_memory(self, memory_id: int, text: str, subject: str, owner: str, vector: np.ndarray,
                      request_id: str | None) -> None:
        """Rewrite a live memory in place (same id, new text and vector)."""
        if owner not in OWNERS:
            raise ValueError(f"owner must be one of {OWNERS}, got {owner!r}")
        vec = checked_vector(vector, self._store.dim)
        user_id, kind, old = self._live_row(memory_id)
        self._conn().execute(
            "UPDATE memories SET text = ?, subject = ?, owner = ?, vector = ?, request_id = ?, updated_at = ?"
            " WHERE id = ?", (text, subject, owner, vec.tobytes(), request_id, time.time(), memory_id))
        self._changes[memory_id] = (user_id, kind, vec.copy())
        self._checksum_delta += vector_digest(memory_id, vec.tobytes()) - vector_digest(memory_id, old)

    def supersede(self, old_id: int, new_id: int) -> None:
        """Mark a live memory as replaced by another live memory of the same user."""
        if old_id == new_id:
            raise ValueError(f"memory {old_id} cannot supersede itself")
        (old_user, _, old_vector), (new_user, _, _) = self._live_row(old_id), self._live_row(new_id)
        if old_user != new_user:
            raise ValueError(f"memory {new_id} belongs to another user than memory {old_id}")
        self._conn().execute("UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                             (new_id, time.time(), old_id))
        self._changes[old_id] = None
        self._checksum_delta -= vector_digest(old_id, old_vector)

    def delete(self, memory_id: int) -> None:
        """Soft-delete a live memory (the row stays for history; its vector leaves FAISS)."""
        _, _, old = self._live_row(memory_id)
        self._conn().execute("UPDATE memories SET deleted_at = ? WHERE id = ?", (time.time(), memory_id))
        self._changes[memory_id] = None
        self._checksum_delta -= vector_digest(memory_id, old)

    def append_l1_raw(self, user_id: str, request_id: str | None, content: str) -> None:
        """Append one rendered conversation to the user's L1 history."""
        self._conn().execute("INSERT INTO l1_raw (user_id, request_id, content, created_at) VALUES (?, ?, ?, ?)",
                             (user_id, request_id, content, time.time()))

    def merge_profile(self, user_id: str, updates: dict) -> None:
        """Merge non-None fields into the user's basic_info (a None never erases a known value)."""
        updates = {k: v for k, v in updates.items() if v is not None}
        if not updates:
            return
        conn = self._conn()
        row = conn.execute("SELECT basic_info FROM profiles WHERE user_id = ?", (user_id,)).fetchone()
        merged = {**(json.loads(row[0]) if row else {}), **updates}
        conn.execute(
            "INSERT INTO profiles (user_id, basic_info, updated_at) VALUES (?, ?, ?) ON CONFLICT(user_id)"
            " DO UPDATE SET basic_info = excluded.basic_info, updated_at = excluded.updated_at",
            (user_id, json.dumps(merged, ensure_ascii=False), time.time()))

    def advance_episode(self, user_id: str) -> int:
        """Increment the user's episode counter; returns the new value (1 for the first episode)."""
        row = self._conn().execute(
            "INSERT INTO episodes (user_id, counter) VALUES (?, 1)"
            " ON CONFLICT(user_id) DO UPDATE SET counter = counter + 1 RETURNING counter", (user_id,)).fetchone()
        return int(row[0])

    def append_trace(self, user_id: str, request_id: str | None, path: str, payload: dict) -> None:
        """Record what this write proposed and applied."""
        self._conn().execute(
            "INSERT INTO traces (user_id, request_id, path, payload, created_at) VALUES (?, ?, ?, ?, ?)",
            (user_id, request_id, path, json.dumps(payload, ensure_ascii=False), time.time()))

    def add_chain_round(self, user_id: str, request_id: str | None, round: int, stage: str, payload: dict) -> None:
        """Record one LM round of the chain (extract, reconcile, ...)."""
        self.add_chain_rounds(user_id, request_id, [(round, stage, payload)])

    def add_chain_rounds(self, user_id: str, request_id: str | None, rounds: list[tuple[int, str, dict]]) -> None:
        """Record a write's LM rounds, (round number, stage, payload) each, in order, with one statement."""
        if not rounds:
            return
        conn, now = self._conn(), time.time()
        conn.executemany(
            "INSERT INTO chain_rounds (user_id, request_id, round, stage, payload, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [(user_id, request_id, number, stage, json.dumps(payload, ensure_ascii=False), now)
             for number, stage, payload in rounds])

    def record_request(self, request_id: str, user_id: str, result: dict, fingerprint: str | None = None) -> None:
        """Record a successful write's result and payload fingerprint; a second record of one
        (user_id, request_id) fails the transaction."""
        self._conn().execute(
            "INSERT INTO requests (request_id, user_id, result, created_at, fingerprint) VALUES (?, ?, ?, ?, ?)",
            (request_id, user_id, json.dumps(result, ensure_ascii=False), time.time(), fingerprint))
