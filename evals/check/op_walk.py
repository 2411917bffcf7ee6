"""Walk every reconcile op, a stale index of the same ids and the size limits on a scratch copy of a case's store.

Why: the offline model never moves a memory to another owner, never supersedes an experience and seldom updates
in place, and no case comes near the size limits, so the rows those paths leave, an index file stale only in its
vectors, and the limits' edges were never tried. Here the harness itself decides the reconcile ops (a model of its
own behind a real `dspy.LM`, so the engine's parsing runs on each reply) and drives the engine through its public
API on a copy of the case's final store; the case's store, records and scores are untouched, and no provider is
called (the embedder is the unit's).

The walk, on the copy:
1. ADD an experience when the user has none (so every case walks a SUPERSEDE of an experience);
2. UPDATE the newest live memory in place with a revised text and the *other* owner; the index file from before
   it (the same ids, that memory's old vector) is then planted in a copy, and opening it must serve the new
   vectors: the same answers as the store's own index and one rebuilt from SQLite (`REOPEN_DIVERGED`);
3. SUPERSEDE the newest live experience by another experience; 4. DELETE the oldest live memory (and ADD its
   revision).
Each write must succeed and apply its op as decided (same subject: nothing to refuse), and each reported op must
leave its row as `evals.check.applied_ops` requires (`APPLIED_OP_WRONG`).

Then the limits (`max_message_chars`, `max_write_chars`, read from the client): for each path the case writes, one
write of exactly each limit (accepted) and one a character over it (refused with `InputValidationError` before any
model or embedding call, nothing stored): `SIZE_LIMIT_WRONG`. The text is the case's own, repeated to the size.
"""

from __future__ import annotations

import json
import math
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy
import numpy as np
from dspy import lm15

from evals.check.applied_ops import applied_op_anomalies
from evals.check.checker import short_diff
from evals.check.write_contract import live_rows
from evals.core.prompt_reading import section_json
from evals.core.rows import is_live
from evals.core.store_state import StoreState, canonical, diff_states, parse_faiss, read_state
from evals.record import AnomalyKind
from hymem.client import HyMemoryClient
from hymem.llm import text_response
from hymem.sites import current_call_site
from hymem.store import INDEX_FILE, SIDECAR_FILE
from hymem.validation import InputValidationError

Found = tuple[str, AnomalyKind, str]  # (check, kind, witness)
WALK_EXPERIENCE = ("When `make test` failed with \"No rule to make target 'test'\", the assistant ran the tests "
                   "with `pytest -q` instead.")
_NOTHING: dict[str, dict[str, Any]] = {"lm.extract": {"facts": [], "profile": {}}, "lm.extract_working": {"experiences": [], "facts": []},
            "lm.reconcile": {"ops": []}}


class _DecidingEngine:
    """A dspy.LM engine whose reply the walk decides from the prompt (`decide(site, prompt) -> reply`)."""

    def __init__(self) -> None:
        self.decide: Callable[[str, str], dict[str, Any]] = lambda site, prompt: _NOTHING.get(site, {})
        self.calls = 0
        self._lock = threading.Lock()

    def complete(self, request: Any) -> lm15.Response:
        with self._lock:
            self.calls += 1
        texts = [m.text or "" for m in request.messages if m.role == "user"]
        site = current_call_site() or ""
        return text_response(json.dumps(self.decide(site, texts[-1] if texts else ""), ensure_ascii=False))


class _CountingEmbedder:
    """The unit's embedder, with its calls counted (a refused write must make none)."""

    def __init__(self, inner: Any):
        self.inner, self.calls = inner, 0
        self.dim = getattr(inner, "dim", None)
        self.name = getattr(inner, "name", type(inner).__name__)

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        return self.inner.embed(texts)


def _candidate_ids(prompt: str) -> set[Any]:
    """The ids of the reconcile prompt's existing memories (the section the engine renders)."""
    existing = section_json(prompt, "existing", "\n\nRespond with")
    return {c.get("id") for c in existing if isinstance(c, dict)} if isinstance(existing, list) else set()


class OpWalk:
    """One case's walk and limit checks on a scratch copy of its closed store (see the module doc)."""

    def __init__(self, embedder: Any, store: Path, tmp: Path, case_id: str, user_id: str, paths: list[str],
                 payloads: dict[str, Any], without_index: Callable[[Path, Path, Path | None], Path]):
        self.engine = _DecidingEngine()
        self.embedder = _CountingEmbedder(embedder)
        self.work = tmp / "walk"
        shutil.rmtree(self.work, ignore_errors=True)
        shutil.copytree(store, self.work, ignore=shutil.ignore_patterns("*.lock"))
        self.tmp, self.case_id, self.user = tmp, case_id, user_id
        self.paths, self.payloads, self.without_index = paths, payloads, without_index
        self.found: list[Found] = []
        self.client: HyMemoryClient | None = None
        self._n = 0

    # ---- plumbing
    def _open(self, store: Path | None = None) -> HyMemoryClient:
        lm = dspy.LM("harness/walk", engine=self.engine, cache=False, num_retries=0)
        self.client = HyMemoryClient(path=store or self.work, lm=lm, embedder=self.embedder, reconcile_enabled=True,
                                     candidates_per_fact=5, synchronous="NORMAL")
        return self.client

    def _close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def _state(self) -> StoreState:
        return read_state(self.work)

    def _write(self, what: str, memory: dict[str, Any], ops: Callable[[set[Any]], list[dict[str, Any]] | None],
               before: StoreState | None = None) -> tuple[Any, StoreState, StoreState] | None:
        """One add_extracted of `memory`, its reconcile reply `ops(candidate ids)` (None: the target is not among
        the candidates, so reply no changes and skip the step); the result and the states around it. `before`:
        the open store's state, read since its last write (else it is read here)."""
        offered: list[bool] = []

        def decide(site: str, prompt: str) -> dict[str, Any]:
            decided = ops(_candidate_ids(prompt)) if site == "lm.reconcile" else None
            offered.append(decided is not None)
            return {"ops": decided} if decided is not None else _NOTHING.get(site, {})

        self.engine.decide = decide
        self._n += 1
        rid = f"{self.case_id}/walk/{self._n}"
        opened = self.client is not None
        client = self.client or self._open()
        if before is None or not opened:  # a state read before this open is not the open store's
            before = self._state()
        result = client.add_extracted([memory], user_id=self.user, request_id=rid)
        after = self._state()
        if not any(offered):
            return None
        if not result.success:
            self.found.append(("walk", AnomalyKind.APPLIED_OP_WRONG, f"{what}: the write failed: {result.error_code} "
                               f"{result.agent_error_code} {result.reconcile_error_code} {result.message[:200]}"))
            return None
        self.found += [("walk", kind, witness) for kind, witness in applied_op_anomalies(
            result.ops, result.proposed_ops, [f.model_dump() for f in result.proposed_facts], before, after, self.user,
            rid, what)]
        return result, before, after

    def _applied(self, what: str, result: Any, name: str, target: Any) -> None:
        """The walk's op was applied as decided: same subject, same kind, a live candidate; nothing to refuse."""
        ops = [op for op in result.ops if op.op == name and op.target_id == target]
        if not ops or any(op.refused for op in ops):
            self.found.append(("walk", AnomalyKind.APPLIED_OP_WRONG, f"{what}: the engine did not apply the "
                               f"{name} of memory {target} as proposed: {[o.model_dump() for o in result.ops]}"))

    # ---- the walk
    def run(self) -> list[Found]:
        try:
            self._walk()
            self._limits()
        finally:
            self._close()
        return self.found

    def _walk(self) -> None:
        state = self._state()
        if not any(row.get("kind") == "experience" for row in live_rows(state, self.user)):
            self._write("the walk's ADD of an experience", {"text": WALK_EXPERIENCE, "subject": "assistant",
                                                           "owner": "agent", "kind": "experience"},
                        lambda ids: [{"op": "ADD", "fact": 0}])
        self._close()
        index_before = self.tmp / "walk-index"  # the index file before the in-place UPDATE
        shutil.rmtree(index_before, ignore_errors=True)
        index_before.mkdir()
        for name in (INDEX_FILE, SIDECAR_FILE):
            if (self.work / name).exists():
                shutil.copy2(self.work / name, index_before / name)
        live = live_rows(self._state(), self.user)
        if not live:
            return
        m = live[-1]
        owner = "user" if m["owner"] == "agent" else "agent"
        revised = {"text": f"{m['text']} (revised)", "subject": m["subject"], "owner": owner, "kind": m["kind"]}
        what = f"the walk's UPDATE of memory {m['id']} to owner {owner!r}"
        done = self._write(what, revised, lambda ids: [{"op": "UPDATE", "fact": 0, "id": m["id"]}] if m["id"] in ids
                           else None)
        if done is not None:
            self._applied(what, done[0], "UPDATE", m["id"])
            self._close()
            self._stale_index(m["id"], index_before)
        live = live_rows(self._state(), self.user)
        experience = next((row for row in reversed(live) if row.get("kind") == "experience"), None)
        if experience is not None:
            what = f"the walk's SUPERSEDE of experience {experience['id']}"
            newer = {"text": f"{experience['text']} (superseded)", "subject": experience["subject"],
                     "owner": experience["owner"], "kind": "experience"}
            done = self._write(what, newer, lambda ids: [{"op": "SUPERSEDE", "fact": 0, "id": experience["id"]}]
                               if experience["id"] in ids else None)
            if done is not None:
                self._applied(what, done[0], "SUPERSEDE", experience["id"])
        # after the SUPERSEDE, the store is open and as its write left it: the state read after that write
        state = done[2] if experience is not None and done is not None else self._state()
        live = live_rows(state, self.user)
        if live:
            old = live[0]
            what = f"the walk's DELETE of memory {old['id']}"
            gone = {"text": f"{old['text']} (no longer true)", "subject": old["subject"], "owner": old["owner"],
                    "kind": old["kind"]}
            done = self._write(what, gone, lambda ids: [{"op": "DELETE", "fact": 0, "id": old["id"]},
                                                        {"op": "ADD", "fact": 0}] if old["id"] in ids else None,
                               before=state)
            if done is not None:
                self._applied(what, done[0], "DELETE", old["id"])
        # the client stays open for the limits (`run` closes it): a close and an open less per case

    def _probe(self, store: Path, query: str, k: int) -> list[tuple[int, float]]:
        client = self._open(store)
        try:
            return sorted((r.id, round(float(r.score or 0.0), 4)) for r in client.search(query, self.user, k=k))
        finally:
            self._close()

    def _stale_index(self, updated: int, index_before: Path) -> None:
        """The index file from before the in-place UPDATE, planted in a copy of the closed store: its ids are the
        live ones, the updated memory's vector is the old one. Opening the copy must serve the new vectors."""
        state = self._state()
        live = live_rows(state, self.user)
        try:
            planted_vectors = parse_faiss((index_before / INDEX_FILE).read_bytes())
        except Exception:  # no index file to plant (an engine that persists none): nothing to check
            return
        row = next((r for r in live if r["id"] == updated), None)
        all_live = {r["id"] for r in state.tables.get("memories", []) if is_live(r)}
        if row is None or set(planted_vectors) != all_live or planted_vectors.get(updated) == bytes(row["vector"]):
            return  # not an index of the same ids with another vector for the updated memory
        query, k = row["text"], len(live)
        current = self._probe(self.work, query, k)
        planted = self.without_index(self.work, self.tmp / "walk-stale", index_before)
        served = self._probe(planted, query, k)
        rebuilt = self._probe(self.without_index(self.work, self.tmp / "walk-rebuilt", None), query, k)
        for label, other in (("its own index", current), ("an index rebuilt from SQLite", rebuilt)):
            if served != other:
                self.found.append(("reopen", AnomalyKind.REOPEN_DIVERGED, (
                    f"an index file from before an in-place UPDATE of memory {updated} (the same ids, its old "
                    f"vector) was served on reopen: search {query[:80]!r} returned {served}, {label} {other}")))
                return

    # ---- the limits
    def _limits(self) -> None:
        client = self.client or self._open()
        limits = {"max_message_chars": client.max_message_chars, "max_write_chars": client.max_write_chars}
        per_message = limits["max_message_chars"]
        for path in self.paths:
            base = _base_text(path, self.payloads.get(path))
            sized = [(limit, size) for limit, size in limits.items()
                     if size is not None and not (limit == "max_write_chars" and per_message is None)]
            # The writes one over first: each must leave the store as it found it, so the state read after one is
            # the state before the next (nothing runs between them); then the writes of exactly each limit.
            state: StoreState | None = None
            for limit, size in sized:
                payload = _sized_payload(path, base, limit, size, per_message, True)
                state = self._limit_write(path, payload, limit, size, True, before=state)
            for limit, size in sized:
                self._limit_write(path, _sized_payload(path, base, limit, size, per_message, False), limit, size, False)

    def _limit_write(self, path: str, payload: list[dict[str, Any]], limit: str, size: int, over: bool,
                     before: StoreState | None = None) -> StoreState | None:
        """One write of exactly the limit (`over` False: accepted) or one character over it (refused before any
        model or embedding call, nothing stored); `before`: the store's state now, if already read. Returns the
        state after a write one over (None after one of exactly the limit: not read)."""
        client = self.client or self._open()
        self.engine.decide = lambda site, prompt: _NOTHING.get(site, {})
        self._n += 1
        rid = f"{self.case_id}/limits/{self._n}"
        what = (f"{'an' if path[0] in 'aeiou' else 'a'} {path} write {'one character over' if over else 'of exactly'} "
                f"{limit}={size} "
                f"({len(payload)} {'memories' if path == 'extracted' else 'messages'})")
        calls, embeds = self.engine.calls, self.embedder.calls
        if over and before is None:  # only a refused write's store is compared (nothing stored)
            before = self._state()
        send = {"extracted": client.add_extracted, "working": client.add_working}.get(path, client.add)
        try:
            result = send(payload, user_id=self.user, request_id=rid)
        except InputValidationError as exc:
            if not over:
                self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} was refused: {exc}"))
            elif limit not in str(exc):
                self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} was refused without naming "
                                   f"the limit: {exc}"))
            result = None
        if over and before is not None:  # one character over: refused before any call, nothing stored
            after = self._state()
            if result is not None:
                self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} was not refused: success="
                                   f"{result.success}, error_code={result.error_code}"))
            if self.engine.calls != calls or self.embedder.calls != embeds:
                self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} made "
                                   f"{self.engine.calls - calls} model and {self.embedder.calls - embeds} embedding "
                                   "calls before it was refused"))
            if canonical(before) != canonical(after):
                self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} changed the store: "
                                   + short_diff(diff_states(before, after))))
            return after
        if result is not None and not result.success:
            self.found.append(("limits", AnomalyKind.SIZE_LIMIT_WRONG, f"{what} failed: {result.error_code} "
                               f"{result.agent_error_code} {result.message[:200]}"))
        return None


def _base_text(path: str, payload: Any) -> str:
    """The case's own words to fill a write with: its first memory's or user message's text."""
    for item in payload or []:
        if not isinstance(item, dict):
            continue
        text = item.get("text") if path == "extracted" else item.get("content") if item.get("role") == "user" else None
        if isinstance(text, str) and text.strip():
            return " ".join(text.split())
    return "The user said this."


def _fill(base: str, size: int) -> str:
    """`size` characters of `base` repeated, neither starting nor ending with a space."""
    text = ((base + " ") * (size // (len(base) + 1) + 1))[:size]
    return text[:-1] + "." if text.endswith(" ") else text


def _sized_payload(path: str, base: str, limit: str, size: int, per_message: int | None, over: bool
                   ) -> list[dict[str, Any]]:
    """One write of exactly `size` characters (one more when `over`) against `limit`: one message or memory for
    max_message_chars; for max_write_chars, messages or memories of at most max_message_chars each."""
    total = size + (1 if over else 0)
    if limit == "max_message_chars":
        sizes = [total]
    else:
        assert per_message is not None
        count = math.ceil(total / per_message)
        sizes = [per_message] * (count - 1) + [total - per_message * (count - 1)]
    if path == "extracted":
        return [{"text": _fill(base, n), "subject": "user", "owner": "user"} for n in sizes]
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": _fill(base, n)} for i, n in enumerate(sizes)]


def walk_case(system: Any, store: Path, tmp: Path, case_id: str, user_id: str, writes: list[tuple[str, Any]]
              ) -> list[Found]:
    """The walk and the limits for a hymem unit (None for another engine: nothing it offers to drive so)."""
    embedder = getattr(system, "embedder", None)
    if embedder is None or not hasattr(system, "without_index") or type(system).__name__ != "HymemSystem":
        return []
    payloads: dict[str, Any] = {}
    for path, payload in writes:
        payloads.setdefault(path, payload)
    with dspy.context(trace=None):  # as the replay's own writes (`do_write`): nothing appended to DSPy's trace
        return OpWalk(embedder, store, tmp, case_id, user_id, list(payloads), payloads, system.without_index).run()


__all__ = ["OpWalk", "walk_case"]
