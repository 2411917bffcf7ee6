"""The rollback checker: store files → logical state → named anomalies with witnesses.

Like Elle, it trusts no report from the engine about itself: it reads every
table listed in `sqlite_master` and the FAISS ids and vectors from disk, diffs
the state around each faulted write, and names what it finds.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from evals.arms.base import codes_of
from evals.check.context import FaultedWrite
from evals.core.store_state import StoreState, canonical, diff_states, live_memories, logical_diff
from evals.record import Anomaly, AnomalyKind

# Which anomaly a leftover change in each table is.
_K = AnomalyKind
_TABLE_ANOMALY = {"memories": _K.PARTIAL_WRITE, "profiles": _K.PARTIAL_WRITE, "requests": _K.PARTIAL_WRITE,
                  "l1_raw": _K.L1_NOT_ROLLED_BACK, "episodes": _K.EPISODE_ADVANCED, "traces": _K.TRACE_APPENDED,
                  "chain_rounds": _K.TRACE_APPENDED, "faiss": _K.PARTIAL_WRITE,
                  # mem0's logical state (evals.arms.mem0_system): saved messages are its raw log
                  "messages": _K.L1_NOT_ROLLED_BACK, "history": _K.TRACE_APPENDED, "entities": _K.PARTIAL_WRITE}

@lru_cache(maxsize=8192)
def _usable_vector(blob: bytes, dim: int) -> bool:
    """A vector BLOB of `dim` finite float32s (checked once per distinct BLOB)."""
    return len(blob) == 4 * dim and bool(np.isfinite(np.frombuffer(blob, dtype=np.float32)).all())


def consistency_anomalies(state: StoreState, dim: int) -> list[Anomaly]:
    """An anomaly for every live row without exactly one good vector and every orphan vector."""
    found: list[Anomaly] = []
    live = {row["id"]: row for row in live_memories(state)}
    for mid, row in sorted(live.items()):
        blob = row.get("vector") or b""
        if isinstance(blob, (bytearray, memoryview)):
            blob = bytes(blob)
        if not isinstance(blob, bytes) or not _usable_vector(blob, dim):
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no usable vector BLOB"))
        elif mid not in state.faiss:
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no FAISS vector"))
    for mid in sorted(state.faiss):
        if mid not in live:
            found.append(Anomaly(kind=_K.ORPHAN_VECTOR, witness=f"FAISS id {mid} has no live row"))
    found += [Anomaly(kind=_K.SUPERSEDED_BY_WRONG, witness=w) for w in superseded_by_problems(state)]
    return found


def superseded_by_problems(state: StoreState) -> list[str]:
    """A witness for every memory whose `superseded_by` (left out of every state comparison, as ids are) names
    no other memory of the same user, or starts a chain that comes back to itself: the record of which memory
    replaced which is lost. Rows without the column (another engine's state) have nothing to check."""
    rows = state.tables.get("memories", [])
    if state.live_memories is not None and len(state.live_memories) == len(rows):
        return []  # every row live (`read_state` found each one so): none has a superseded_by
    pointing = [row for row in rows if row.get("superseded_by") is not None]
    if not pointing:
        return []
    by_id: dict[Any, dict[str, Any]] = {row.get("id"): row for row in rows}
    found = []
    for row in sorted(pointing, key=lambda r: str(r.get("id"))):
        mid, target = row.get("id"), row.get("superseded_by")
        head = f"memory {mid} ({str(row.get('text'))[:80]!r}, user {row.get('user_id')!r}) is superseded by"
        other: dict[str, Any] | None = by_id.get(target)
        if target == mid:
            found.append(f"{head} itself")
        elif other is None:
            found.append(f"{head} memory {target}, which does not exist")
        elif other.get("user_id") != row.get("user_id"):
            found.append(f"{head} memory {target} of user {other.get('user_id')!r}")
        else:
            seen: set[Any] = {mid}
            at: dict[str, Any] | None = other  # follow the chain: it must end, never come back
            while at is not None and at.get("superseded_by") is not None:
                if at.get("id") in seen:
                    found.append(f"{head} memory {target}, whose chain of superseded_by comes back to memory "
                                 f"{at.get('id')}")
                    break
                seen.add(at.get("id"))
                at = by_id.get(at.get("superseded_by"))
    return found


def closed_store_anomalies(open_state: StoreState, closed: StoreState, dim: int) -> list[Anomaly]:
    """The store as its close left it, against its last state read while open: the same rows, and the index
    it persisted holding exactly the live memories' vectors (the index the next open will serve)."""
    found = consistency_anomalies(closed, dim)
    if not found and canonical(closed) != canonical(open_state):
        diff = diff_states(open_state, closed)
        kind = _K.VECTORLESS_NODE if set(diff) == {"faiss"} else _K.PARTIAL_WRITE
        found.append(Anomaly(kind=kind, witness="closing the store changed it: " + short_diff(diff)))
    return found


def short_diff(diff: dict[str, dict[str, list[str]]], limit: int = 600) -> str:
    parts = []
    for table, change in diff.items():
        head = (change["added"] or change["removed"] or [""])[0]
        parts.append(f"{table}: +{len(change['added'])} -{len(change['removed'])} e.g. {head[:160]}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_faulted_write(ctx: FaultedWrite) -> list[Anomaly]:
    """Anomalies of one faulted write and its retry, each with its witness. Pure: no I/O.

    `ctx.same_as_control=False`: a fault that changes what the write decides (an adversarial reply) need not
    leave the fault-free run's state; what it must leave is checked by `evals.faults.adversarial`.
    `ctx.control_failed`: the fault-free write failed on the model's own reply (`control_after` is the store as it
    was). A retry the model broke the same way (`retry_natural`) must leave the store as it was; one that got
    through has no fault-free state to match, so only its consistency is checked.
    """
    expected, result, before, after = ctx.expected, ctx.result, ctx.before, ctx.after
    control_after, retry_result, retry_after, repeat_after = (ctx.control_after, ctx.retry_result, ctx.retry_after,
                                                              ctx.repeat_after)
    dim, same_as_control, control_failed, retry_natural = (ctx.dim, ctx.same_as_control, ctx.control_failed,
                                                           ctx.retry_natural)
    found: list[Anomaly] = []
    actual = codes_of(result)
    want = expected.model_dump()
    if expected.success:
        if not result.success:
            found.append(Anomaly(kind=_K.WRONG_ERROR_CODE,
                                 witness=f"write failed under a fault that must not fail it: {actual}"))
        elif same_as_control and canonical(after) != canonical(control_after):
            found.append(Anomaly(kind=_K.RETRY_DIVERGED,
                                 witness="state after the write differs from the fault-free run: "
                                 + short_diff(logical_diff(control_after, after))))
    else:
        diff = diff_states(before, after)
        if result.success:
            found.append(Anomaly(kind=_K.DEGRADED_SUCCESS,
                                 witness=f"success=true under a fault that must fail; ops={len(result.ops)}"
                                 + (f"; state diff: {short_diff(diff)}" if diff else "")))
        elif {k: actual.get(k) for k in want} != want:  # a system may report more fields (e.g. what it raised)
            found.append(Anomaly(kind=_K.WRONG_ERROR_CODE, witness=f"expected {want}, got {actual}"))
        found += _leftovers(diff)
    found += consistency_anomalies(after, dim)
    if not expected.success:
        if control_failed and retry_result is not None and not retry_result.success and retry_natural:
            found += [Anomaly(kind=a.kind, witness="after a retry the model's reply failed too: " + a.witness)
                      for a in leftover_anomalies(control_after, retry_after)]
        elif retry_result is None or not retry_result.success:
            codes = codes_of(retry_result) if retry_result else None
            found.append(Anomaly(kind=_K.RETRY_DIVERGED, witness=f"the retry without fault failed: {codes}"))
        elif control_failed:
            pass  # the retry got through where the fault-free write did not: no fault-free state to match
        elif canonical(retry_after) != canonical(control_after):
            extra = _extra_rows(control_after, retry_after)
            kind = _K.DOUBLE_WRITE if extra else _K.RETRY_DIVERGED
            found.append(Anomaly(kind=kind, witness=short_diff(logical_diff(control_after, retry_after))))
        found += [Anomaly(kind=a.kind, witness="after retry: " + a.witness) for a in consistency_anomalies(retry_after, dim)]
    if not retry_natural and canonical(repeat_after) != canonical(retry_after if not expected.success else after):
        found.append(Anomaly(kind=_K.DOUBLE_WRITE, witness="re-sending the same request_id changed the store: "
                             + short_diff(logical_diff(retry_after if not expected.success else after, repeat_after))))
    return list(dict.fromkeys(found))  # each (kind, witness) once, in the order found


def leftover_anomalies(before: StoreState, after: StoreState) -> list[Anomaly]:
    """What a failed write left behind: one anomaly per kind of leftover (rows, vectors, L1 raw, episodes, traces),
    each with the tables' diff as its witness. Empty when the store is as it was."""
    return _leftovers(diff_states(before, after))


def _leftovers(diff: dict[str, dict[str, list[str]]]) -> list[Anomaly]:
    found = []
    for kind in sorted({_TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) for t in diff}):
        tables = [t for t in diff if _TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) == kind]
        found.append(Anomaly(kind=kind, witness=short_diff({t: diff[t] for t in tables})))
    return found


def _extra_rows(control: StoreState, other: StoreState) -> bool:
    """True when `other` holds more live memories than the control run: a write landed twice."""
    return len(live_memories(other)) > len(live_memories(control))
