"""Every op a write reports it applied, checked field by field against the row it left and the op proposed.

Why: the offline model seldom UPDATEs and never moves a memory to another owner or supersedes an experience, so
an engine that stores a wrong field of a changed row (the old owner, kind `fact` for an experience, the old
vector, a created_at moved) left every score and every state comparison unchanged: those leave out ids,
timestamps and request ids, and the sweep compares a write only with the same engine's fault-free run. Here the
engine's own report of each op (`WriteResult.ops`) is held to the store's rows read from disk, and to the reconcile
model's proposal where the engine says it applied the op as proposed (`refused` unset).

What each op must leave (the engine's documented ops; `hymem/store/_tx.py`):
- ADD: a new live row of the writing user holding the op's text, subject, owner and kind, stamped with the
  write's request id, created_at <= updated_at;
- UPDATE: the same id, still live, now holding the op's text, subject and owner (its kind kept), the write's request id, its created_at kept, its updated_at moved, and a new vector when
  its text changed;
- SUPERSEDE: a new row as for ADD, and the target (live before) now `superseded_by` it, its content kept;
- DELETE: the target (live before) soft-deleted, its content kept;
- NOOP: the target unchanged.
No other memory row may change in the write. Rows of another engine (no `superseded_by` column) are not checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evals.core.rows import is_live
from evals.core.store_state import StoreState, all_have, changed_row_ids, rows_by_id
from evals.record import AnomalyKind, Witnessed

_CONTENT = ("text", "subject", "owner", "kind")  # what an op carries from its fact, and a row holds
_KEPT = ("user_id", "text", "subject", "owner", "kind", "vector", "created_at", "request_id")  # a superseded/deleted row


def _get(op: Any, field: str) -> Any:
    return op.get(field) if isinstance(op, dict) else getattr(op, field, None)


def _memories(state: StoreState | None) -> Mapping[Any, dict[str, Any]] | None:
    if state is None:
        return None
    return rows_by_id(state, "memories")


def _live(row: dict[str, Any] | None) -> bool:
    return row is not None and is_live(row)


def _show(row: dict[str, Any] | None) -> str:
    if row is None:
        return "no row"
    return ", ".join(f"{f}={row.get(f)!r}" for f in (*_CONTENT, "request_id", "created_at", "updated_at",
                                                     "superseded_by", "deleted_at"))


def hymem_rows(state: StoreState) -> bool:
    """The state holds hymem's memory rows (the columns these checks read)."""
    return "memories" in state.tables and all_have(state, "memories", ("superseded_by", "deleted_at"))


def applied_op_anomalies(ops: list[Any], proposed_ops: list[dict[str, Any]], proposed_facts: list[dict[str, Any]],
                         before: StoreState | None, after: StoreState, user_id: str, request_id: str,
                         where: str) -> list[Witnessed]:
    """`APPLIED_OP_WRONG` for each reported op whose row is not what the op must leave (module doc), or that the
    engine says it applied as proposed although no proposed op (with its fact) matches it.

    `before`: the store's state before the write, or None when it was not read (the checks that compare with the
    row before the write, and the one that every changed row is some op's, are then skipped)."""
    if not hymem_rows(after) or (before is not None and not hymem_rows(before)):
        return []
    found: list[Witnessed] = []
    old, new = _memories(before), _memories(after)
    assert new is not None

    def wrong(op: Any, why: str) -> None:
        found.append((AnomalyKind.APPLIED_OP_WRONG, f"{where}: {_get(op, 'op')} (memory {_get(op, 'memory_id')}, "
                      f"target {_get(op, 'target_id')}, {_get(op, 'text')!r}): {why}"))

    touched: set[Any] = set()
    for op in ops:
        name, mid, target = _get(op, "op"), _get(op, "memory_id"), _get(op, "target_id")
        if name in ("ADD", "SUPERSEDE"):
            touched.add(mid)
            row = new.get(mid)
            if row is None:
                wrong(op, "the memory it reports is not in the store")
                continue
            _holds(op, row, wrong, user_id, request_id, kind=True)
            if not _live(row):
                wrong(op, f"the new memory is not live: {_show(row)}")
            if old is not None and mid in old:
                wrong(op, f"the memory it reports as new existed before the write: {_show(old[mid])}")
            created, updated = row.get("created_at"), row.get("updated_at")
            if created is None or updated is None or created > updated:
                wrong(op, f"the new memory has created_at {created}, updated_at {updated}")
        if name == "SUPERSEDE":
            touched.add(target)
            row = new.get(target)
            if row is None or row.get("superseded_by") != mid or row.get("deleted_at") is not None:
                wrong(op, f"its target is not superseded by memory {mid}: {_show(row)}")
            elif old is not None:
                _kept(op, old.get(target), row, wrong)
        elif name == "UPDATE":
            touched.add(mid)
            row = new.get(mid)
            if mid != target:
                wrong(op, f"an in-place UPDATE reports memory {mid} for target {target}")
            if row is None or not _live(row):
                wrong(op, f"the updated memory is not live: {_show(row)}")
                continue
            _holds(op, row, wrong, user_id, request_id, kind=False)
            prior = old.get(mid) if old is not None else None
            if old is not None:
                if not _live(prior):
                    wrong(op, f"the memory it updated was not live before the write: {_show(prior)}")
                else:
                    assert prior is not None
                    if row.get("created_at") != prior.get("created_at"):
                        wrong(op, f"created_at moved {prior.get('created_at')} -> {row.get('created_at')} "
                                  "(an update keeps it)")
                    if not (row.get("updated_at") or 0) > (prior.get("updated_at") or 0):
                        wrong(op, f"updated_at did not move: {prior.get('updated_at')} -> {row.get('updated_at')}")
                    if row.get("kind") != prior.get("kind"):
                        wrong(op, f"kind changed {prior.get('kind')!r} -> {row.get('kind')!r}")
                    if row.get("text") != prior.get("text") and row.get("vector") == prior.get("vector"):
                        wrong(op, "the text changed but the stored vector is the old text's")
        elif name == "DELETE":
            touched.add(target)
            row = new.get(target)
            if row is None or row.get("deleted_at") is None or row.get("superseded_by") is not None:
                wrong(op, f"its target is not soft-deleted: {_show(row)}")
            elif old is not None:
                _kept(op, old.get(target), row, wrong)
        elif name == "NOOP" and target is not None and old is not None and old.get(target) != new.get(target):
            wrong(op, f"a NOOP changed its target: {_show(old.get(target))} -> {_show(new.get(target))}")
        if _get(op, "refused") is None and name in ("ADD", "UPDATE", "SUPERSEDE", "DELETE"):
            problem = _unproposed(op, proposed_ops, proposed_facts)
            if problem is not None:
                wrong(op, problem)
    if old is not None:
        assert before is not None
        changed = sorted((mid for mid in changed_row_ids(before, after, "memories")  # every id whose row is
                          if old.get(mid) is not new.get(mid)  # another object (a row read once is one object)
                          and old.get(mid) != new.get(mid) and mid not in touched), key=str)
        for mid in changed[:3]:
            found.append((AnomalyKind.APPLIED_OP_WRONG, f"{where}: memory {mid} changed with no op reporting it: "
                          f"{_show(old.get(mid))} -> {_show(new.get(mid))}"))
    return list(dict.fromkeys(found))


def _holds(op: Any, row: dict[str, Any], wrong: Any, user_id: str, request_id: str, *, kind: bool) -> None:
    """The row holds what the op says it wrote, for the writing user, under the write's request id."""
    fields = _CONTENT if kind else _CONTENT[:3]
    differ = [f for f in fields if _get(op, f) is not None and row.get(f) != _get(op, f)]
    if differ:
        wrong(op, "the row holds " + ", ".join(f"{f}={row.get(f)!r}" for f in differ) + ", the op "
              + ", ".join(f"{f}={_get(op, f)!r}" for f in differ))
    if row.get("user_id") != user_id:
        wrong(op, f"the row belongs to user {row.get('user_id')!r}, not the writing user {user_id!r}")
    if row.get("request_id") != request_id:
        wrong(op, f"the row's request_id is {row.get('request_id')!r}, not the write's {request_id!r}")


def _kept(op: Any, prior: dict[str, Any] | None, row: dict[str, Any], wrong: Any) -> None:
    """A superseded or deleted target was live before the write and keeps its content (history)."""
    if not _live(prior):
        wrong(op, f"its target was not live before the write: {_show(prior)}")
        return
    assert prior is not None
    differ = [f for f in _KEPT if row.get(f) != prior.get(f)]
    if differ:
        wrong(op, "its target's " + ", ".join(differ) + f" changed: {_show(prior)} -> {_show(row)}")


def _unproposed(op: Any, proposed_ops: list[dict[str, Any]], facts: list[dict[str, Any]]) -> str | None:
    """Why an op the engine applied as proposed matches no proposed op (and that op's fact), or None.

    With no reconcile proposal (reconcile off, or nothing to reconcile) an ADD must carry a proposed fact."""
    name, target = _get(op, "op"), _get(op, "target_id")
    content = tuple(_get(op, f) for f in _CONTENT)

    def fact_of(index: Any) -> tuple[Any, ...] | None:
        if not isinstance(index, int) or not 0 <= index < len(facts):
            return None
        return tuple(facts[index].get(f, "fact" if f == "kind" else None) for f in _CONTENT)

    if not proposed_ops:
        if name == "ADD" and facts and content not in {fact_of(i) for i in range(len(facts))}:
            return f"it holds {content}, which is no proposed fact"
        return None
    same = [p for p in proposed_ops if isinstance(p, dict) and p.get("op") == name
            and (name == "ADD" or p.get("id") == target)]
    if not same:
        return f"applied as proposed, but the model proposed no {name}" + (f" of {target}" if target is not None else "")
    if name == "DELETE" and _get(op, "text") is None:
        return None
    if not any(fact_of(p.get("fact")) == content for p in same) and not (
            name == "DELETE" and any(p.get("fact") is None for p in same)):
        return (f"applied as proposed with {content}, but the proposed {name}'s fact is "
                f"{[fact_of(p.get('fact')) for p in same][:3]}")
    return None


__all__ = ["applied_op_anomalies", "hymem_rows"]
