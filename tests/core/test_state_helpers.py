"""The state helpers the checks of every write use: the same answers as the plain comprehensions they replace."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from evals.core.store_state import StoreState, changed_row_ids, rows_by_id, user_live_memories

_rows = st.lists(st.fixed_dictionaries({"id": st.integers(0, 8), "user_id": st.sampled_from(["a", "b"]),
                                        "superseded_by": st.sampled_from([None, 1]),
                                        "deleted_at": st.sampled_from([None, 5])}), max_size=12)


@given(old=_rows, edits=st.lists(st.tuples(st.sampled_from(["keep", "copy", "drop", "new"]), st.integers(0, 8)),
                                  max_size=14))
def test_changed_row_ids_holds_every_id_whose_row_is_another_object(old, edits):
    """However the rows moved, were copied, dropped or added (duplicate ids too): every id whose row by id is
    not the same object in both states is among the ids found."""
    new = []
    for (op, mid), row in zip(edits, old + [None] * len(edits), strict=False):
        if op == "keep" and row is not None:
            new.append(row)
        elif op == "copy" and row is not None:
            new.append(dict(row))
        elif op == "new":
            new.append({"id": mid, "user_id": "a", "superseded_by": None, "deleted_at": None})
    before, after = StoreState(tables={"memories": old}, faiss={}), StoreState(tables={"memories": new}, faiss={})
    a, b = {r["id"]: r for r in old}, {r["id"]: r for r in new}
    assert rows_by_id(before) == a and rows_by_id(after) == b
    differ = {mid for mid in set(a) | set(b) if a.get(mid) is not b.get(mid)}
    assert differ <= changed_row_ids(before, after)


@given(rows=_rows)
def test_user_live_memories_are_the_users_live_rows_in_order(rows):
    state = StoreState(tables={"memories": rows}, faiss={})
    want = [r for r in rows if r["user_id"] == "a" and r["superseded_by"] is None and r["deleted_at"] is None]
    assert user_live_memories(state, "a") == want
