"""The rollback checker: store files → logical state → named anomalies with witnesses.

Like Elle, it trusts no report from the engine about itself: it reads every
table listed in `sqlite_master` and the FAISS ids and vectors from disk, diffs
the state around each faulted write, and names what it finds.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evals.faults import Expected
from evals.record import Anomaly, AnomalyKind
from hymem.store import DB_FILE, INDEX_FILE, SIDECAR_FILE

# Which anomaly a leftover change in each table is.
_K = AnomalyKind
_TABLE_ANOMALY = {"memories": _K.PARTIAL_WRITE, "profiles": _K.PARTIAL_WRITE, "requests": _K.PARTIAL_WRITE,
                  "l1_raw": _K.L1_NOT_ROLLED_BACK, "episodes": _K.EPISODE_ADVANCED, "traces": _K.TRACE_APPENDED,
                  "chain_rounds": _K.TRACE_APPENDED, "faiss": _K.PARTIAL_WRITE,
                  # mem0's logical state (evals.systems.mem0_system): saved messages are its raw log
                  "messages": _K.L1_NOT_ROLLED_BACK, "history": _K.TRACE_APPENDED, "entities": _K.PARTIAL_WRITE}
_IGNORED_TABLES = {"meta", "migrations", "sqlite_sequence"}
_VOLATILE = {"id", "created_at", "updated_at", "request_id", "deleted_at", "superseded_by", "result", "payload",
             "memory_id"}  # memory_id: a row's reference to a memory's (random) id, in mem0's history

@dataclass
class StoreState:
    """Every row of every table, plus the FAISS vectors as the engine will see them on open."""

    tables: dict[str, list[dict[str, Any]]]
    faiss: dict[int, tuple[float, ...]]
    faiss_stale: bool = False  # the FAISS file is behind SQLite and will be rebuilt on open
    notes: list[str] = field(default_factory=list)
    canonical_form: dict[str, list[str]] | None = field(default=None, repr=False, compare=False)  # memo


def read_state(store_dir: Path) -> StoreState:
    """Read a (closed) store's files directly."""
    store_dir = Path(store_dir)
    db = sqlite3.connect(f"file:{store_dir / DB_FILE}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        tables = {n: [dict(r) for r in db.execute(f'SELECT * FROM "{n}"')] for n in names if n not in _IGNORED_TABLES}
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall()) if "meta" in names else {}
    finally:
        db.close()
    faiss_vectors, stale = _read_faiss(store_dir, int(meta.get("generation", 0)))
    if stale:  # the engine rebuilds from SQLite on open: that is the index it will use
        faiss_vectors = {row["id"]: _vector(row["vector"]) for row in tables.get("memories", []) if _live(row)}
    return StoreState(tables=tables, faiss=faiss_vectors, faiss_stale=stale)


def _read_faiss(store_dir: Path, generation: int) -> tuple[dict[int, tuple[float, ...]], bool]:
    import faiss

    index_path, sidecar_path = store_dir / INDEX_FILE, store_dir / SIDECAR_FILE
    if not index_path.exists() or not sidecar_path.exists():
        return {}, True
    try:
        sidecar = json.loads(sidecar_path.read_text())
        if int(sidecar.get("generation", -1)) != generation:
            return {}, True
        index = faiss.read_index(str(index_path))
    except Exception:
        return {}, True
    ids = faiss.vector_to_array(index.id_map).astype(np.int64) if index.ntotal else np.zeros(0, np.int64)
    out: dict[int, tuple[float, ...]] = {}
    for position, mid in enumerate(ids):
        vector = tuple(float(x) for x in index.index.reconstruct(position))
        if int(mid) in out:
            out[-int(mid) - 1_000_000_000] = vector  # a duplicate id: keep it visible to the checker
        else:
            out[int(mid)] = vector
    return out, False


def _vector(blob: bytes | None) -> tuple[float, ...]:
    return tuple(float(x) for x in np.frombuffer(blob or b"", dtype=np.float32))


def _live(row: dict[str, Any]) -> bool:
    return row.get("superseded_by") is None and row.get("deleted_at") is None


def _row_key(row: dict[str, Any]) -> str:
    return json.dumps({k: (v.hex() if isinstance(v, bytes) else v) for k, v in row.items()}, sort_keys=True,
                      ensure_ascii=False, default=str)


def diff_states(before: StoreState, after: StoreState) -> dict[str, dict[str, list[str]]]:
    """Rows added and removed per table (a changed row is one removed and one added), and FAISS ids."""
    out: dict[str, dict[str, list[str]]] = {}
    for table in sorted(set(before.tables) | set(after.tables)):
        a = {_row_key(r) for r in before.tables.get(table, [])}
        b = {_row_key(r) for r in after.tables.get(table, [])}
        if a != b:
            out[table] = {"added": sorted(b - a), "removed": sorted(a - b)}
    fa, fb = before.faiss, after.faiss
    changed = sorted(i for i in set(fa) | set(fb) if fa.get(i) != fb.get(i))
    if changed:
        out["faiss"] = {"added": [str(i) for i in changed if i in fb], "removed": [str(i) for i in changed if i in fa]}
    return out


def canonical(state: StoreState) -> dict[str, list[str]]:
    """The logical content with ids, timestamps, request ids and payloads left out (for retry equivalence).

    Memoised on the state: a write's pre- and post-control states are compared once per fault.
    """
    if state.canonical_form is not None:
        return state.canonical_form
    out = {}
    for table, rows in state.tables.items():
        canon = []
        for row in rows:
            rec = {k: v for k, v in row.items() if k not in _VOLATILE}
            if "superseded_by" in row:
                rec["live"] = _live(row)
            canon.append(_row_key(rec))
        out[table] = sorted(canon)
    out["faiss"] = sorted(_row_key({"v": list(v)}) for v in state.faiss.values())
    state.canonical_form = out
    return out


def consistency_anomalies(state: StoreState, dim: int) -> list[Anomaly]:
    """An anomaly for every live row without exactly one good vector and every orphan vector."""
    found: list[Anomaly] = []
    live = {row["id"]: row for row in state.tables.get("memories", []) if _live(row)}
    for mid, row in sorted(live.items()):
        blob = row.get("vector") or b""
        if len(blob) != 4 * dim or not np.isfinite(np.frombuffer(blob, dtype=np.float32)).all():
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no usable vector BLOB"))
        elif mid not in state.faiss:
            found.append(Anomaly(kind=_K.VECTORLESS_NODE,
                                 witness=f"memory {mid} ({row.get('text')!r}) has no FAISS vector"))
    for mid in sorted(state.faiss):
        if mid not in live:
            found.append(Anomaly(kind=_K.ORPHAN_VECTOR, witness=f"FAISS id {mid} has no live row"))
    return found


def short_diff(diff: dict[str, dict[str, list[str]]], limit: int = 600) -> str:
    parts = []
    for table, change in diff.items():
        head = (change["added"] or change["removed"] or [""])[0]
        parts.append(f"{table}: +{len(change['added'])} -{len(change['removed'])} e.g. {head[:160]}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def codes_of(result: Any) -> dict[str, Any]:
    """The outcome fields a fault's expected outcome is compared on (a system's `WriteOutcome.codes` as given)."""
    if isinstance(getattr(result, "codes", None), dict):
        return dict(result.codes)
    return {"success": result.success, "error_code": result.error_code,
            "agent_error_code": result.agent_error_code, "reconcile_error_code": result.reconcile_error_code,
            "retry_safe": result.retry_safe}


def check_faulted_write(expected: Expected, result: Any, before: StoreState, after: StoreState,
                        control_after: StoreState, retry_result: Any, retry_after: StoreState,
                        repeat_after: StoreState, dim: int, *, same_as_control: bool = True) -> list[Anomaly]:
    """Anomalies of one faulted write and its retry, each with its witness. Pure: no I/O.

    `same_as_control=False`: a fault that changes what the write decides (an adversarial reply) need not
    leave the fault-free run's state; what it must leave is checked by `evals.adversarial`.
    """
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
                                 + short_diff(diff_states(control_after, after))))
    else:
        diff = diff_states(before, after)
        if result.success:
            found.append(Anomaly(kind=_K.DEGRADED_SUCCESS,
                                 witness=f"success=true under a fault that must fail; ops={len(result.ops)}"
                                 + (f"; state diff: {short_diff(diff)}" if diff else "")))
        elif {k: actual.get(k) for k in want} != want:  # a system may report more fields (e.g. what it raised)
            found.append(Anomaly(kind=_K.WRONG_ERROR_CODE, witness=f"expected {want}, got {actual}"))
        for kind in sorted({_TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) for t in diff}):
            tables = [t for t in diff if _TABLE_ANOMALY.get(t, _K.PARTIAL_WRITE) == kind]
            found.append(Anomaly(kind=kind, witness=short_diff({t: diff[t] for t in tables})))
    found += consistency_anomalies(after, dim)
    if not expected.success:
        if retry_result is None or not retry_result.success:
            codes = codes_of(retry_result) if retry_result else None
            found.append(Anomaly(kind=_K.RETRY_DIVERGED, witness=f"the retry without fault failed: {codes}"))
        elif canonical(retry_after) != canonical(control_after):
            extra = _extra_rows(control_after, retry_after)
            kind = _K.DOUBLE_WRITE if extra else _K.RETRY_DIVERGED
            found.append(Anomaly(kind=kind, witness=short_diff(diff_states(control_after, retry_after))))
        found += [Anomaly(kind=a.kind, witness="after retry: " + a.witness) for a in consistency_anomalies(retry_after, dim)]
    if canonical(repeat_after) != canonical(retry_after if not expected.success else after):
        found.append(Anomaly(kind=_K.DOUBLE_WRITE, witness="re-sending the same request_id changed the store: "
                             + short_diff(diff_states(retry_after if not expected.success else after, repeat_after))))
    return list(dict.fromkeys(found))  # each (kind, witness) once, in the order found


def _extra_rows(control: StoreState, other: StoreState) -> bool:
    """True when `other` holds more live memories than the control run: a write landed twice."""
    def live_count(state: StoreState) -> int:
        return sum(1 for r in state.tables.get("memories", []) if _live(r))

    return live_count(other) > live_count(control)
