"""The per-write passes over the user's live rows made from the last write's list (`evals.core.row_passes`)
answer as passes over the whole list: for lists that share leading row objects, lists that share none, ids
twice, and a caller that changes its list after the pass."""

from __future__ import annotations

import operator
import random
from collections import Counter
from itertools import compress, repeat

from hypothesis import given, settings
from hypothesis import strategies as st

from evals.check.prompt_contract import _kinds_by_id
from evals.core.row_passes import ListMemo, shared_prefix
from evals.core.store_state import StoreState, user_live_memories


def _rows(seed: int, n: int, start: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    return [{"id": rnd.choice([start + i, start + i, 7]), "user_id": rnd.choice(["ana", "ana", "bo"]),
             "kind": rnd.choice(["fact", "preference", None]), "superseded_by": None, "deleted_at": None}
            for i in range(n)]


def _whole_user_live(live: list[dict], user: str) -> list[dict]:
    return list(compress(live, map(operator.eq, map(dict.get, live, repeat("user_id")), repeat(user))))


def _whole_kinds(live: list[dict]) -> tuple[dict, Counter]:
    by_id = dict(zip(map(dict.get, live, repeat("id")), map(dict.get, live, repeat("kind")), strict=True))
    return by_id, Counter(by_id.values())


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["append", "drop_tail", "replace_middle", "fresh", "mutate_caller"]),
                                st.integers(0, 40), st.integers(0, 10_000)), min_size=1, max_size=12))
def test_passes_from_the_last_list_answer_as_passes_over_the_whole_list(steps):
    live = _rows(0, 30)
    for op, n, seed in steps:
        if op == "append":  # a write added rows: the old ones are the same objects
            live = live + _rows(seed, n % 5 + 1, start=1000 + seed)
        elif op == "drop_tail":
            live = live[:max(0, len(live) - n % 4)]
        elif op == "replace_middle":  # a row superseded: another object from there on
            if live:
                i = n % len(live)
                live = live[:i] + [dict(live[i], kind="fact", id=5000 + seed)] + live[i + 1:]
        elif op == "fresh":  # another case's rows: no object shared
            live = _rows(seed, n)
        state = StoreState(tables={"memories": live}, faiss={}, live_memories=list(live))
        got = user_live_memories(state, "ana")
        whole = _whole_user_live(live, "ana")
        assert got == whole and all(a is b for a, b in zip(got, whole, strict=True))
        assert _kinds_by_id(live) == _whole_kinds(live)
        if op == "mutate_caller":  # a caller that changes its lists after the pass: the next pass is not misled
            got.clear()
            live[:1] = [dict(live[0], user_id="bo", kind="preference")] if live else []
            state = StoreState(tables={"memories": live}, faiss={}, live_memories=live)
            assert user_live_memories(state, "ana") == _whole_user_live(live, "ana")
            assert _kinds_by_id(live) == _whole_kinds(live)


def test_shared_prefix_compares_objects_not_values():
    a, b = {"id": 1}, {"id": 1}
    assert shared_prefix([a, a], [a, b]) == 1 and shared_prefix([a], [a, b]) == 1 and shared_prefix([], [a]) == 0
    memo: ListMemo[int] = ListMemo(max_keys=1)
    rows = [a, b]
    memo.keep("k", rows, 3)
    rows.append(a)  # the caller's list changes: the memo kept its own copy
    assert memo.last("k", [a, b, a]) == (2, [a, b], 3)
    memo.keep("other", rows, 4)  # one key kept: the oldest dropped
    assert memo.last("k", rows) is None
