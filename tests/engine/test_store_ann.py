"""The approximate search of a large group (issue 35): close to the exact answer, all-or-nothing with its write,
and a function of SQLite alone (the same answers after a reopen, and after the index is rebuilt from SQLite).

Real SQLite and FAISS files throughout; the data are seeded unit vectors shaped like sentence embeddings (see
`clustered`); the recall on real MiniLM embeddings is measured by `evals/bench/ann.py`."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hymem.failpoints import RAISE_ENV, FailpointError
from hymem.store import DB_FILE, INDEX_FILE, SIDECAR_FILE, Store, rebuilt_index
from hymem.store._ann import ANN_MIN_ROWS, RETRAIN_GROWTH, centre_key
from hymem.store._vectors import query_vector

DIM = 256
K = 5


def clustered(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit vectors that vary along 32 hidden directions, all in one narrow cone: sentence embeddings have few
    effective dimensions for their size, and every vector of an embedder leans one way. (Isotropic noise, where a
    nearest neighbour is barely nearer than any other vector, is no one's memories.)"""
    mixing = np.random.default_rng(99).standard_normal((32, DIM)).astype(np.float32) / np.sqrt(32)
    vectors = rng.standard_normal((n, 32)).astype(np.float32) @ mixing
    vectors += 0.05 * rng.standard_normal((n, DIM)).astype(np.float32) + 1.0
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def fill(store: Store, user: str, vectors: np.ndarray, request_id: str = "seed") -> list[int]:
    with store.write() as tx:
        return [tx.add_memory(user, f"m{i}", "user", "user", "fact", v, request_id) for i, v in enumerate(vectors)]


def exact_top(ids: list[int], vectors: np.ndarray, query: np.ndarray, k: int) -> set[int]:
    scores = vectors.astype(np.float64) @ query.astype(np.float64)
    return {ids[i] for i in np.argsort(-scores, kind="stable")[:k]}


def answers(store: Store, user: str, queries: np.ndarray, k: int = K) -> list[list[tuple[int, float | None]]]:
    return [[(m.id, m.score) for m in store.search(user, q, k=k)] for q in queries]


def meta_rows(path) -> dict[str, str]:
    conn = sqlite3.connect(path / DB_FILE)
    try:
        return dict(conn.execute("SELECT key, value FROM meta WHERE key LIKE 'ann:%'"))
    finally:
        conn.close()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(35)
    vectors = clustered(rng, ANN_MIN_ROWS + 2000)
    held_out = clustered(np.random.default_rng(36), 150)  # queries that are not stored memories
    return vectors, held_out


def test_a_large_groups_answers_agree_with_the_exact_ranking_above_a_recall_bound(tmp_path, data):
    vectors, queries = data
    with Store(tmp_path / "s", DIM) as store:
        ids = fill(store, "u1", vectors)
        fill(store, "u2", vectors[:50])  # another user's memories never show up
        assert store._index.centre(("u1", "fact")) is not None  # the sketch is in use for u1 ...
        assert store._index.centre(("u2", "fact")) is None  # ... and not for a small group
        hits = answers(store, "u1", queries)
        own = set(ids)
        recall = np.mean([len({i for i, _ in found} & exact_top(ids, vectors, q, K)) / K
                          for found, q in zip(hits, queries, strict=True)])
        assert recall >= 0.9, recall
        for found, q in zip(hits, queries, strict=True):
            assert len(found) == K and {i for i, _ in found} <= own
            scores = [s for _, s in found]
            assert scores == sorted(scores, reverse=True)
            for memory_id, score in found:  # every score is the exact inner product of that memory
                assert score == pytest.approx(float(vectors[ids.index(memory_id)] @ q), abs=1e-5)
        # a stored memory searched by its own vector is found first
        for i in range(0, len(ids), 397):
            assert store.search("u1", vectors[i], k=K)[0].id == ids[i]
        # with k a large share of the group the search is exact again
        big_k = len(ids) // 8
        q = queries[0]
        found = {m.id for m in store.search("u1", q, k=big_k)}
        scores = dict(zip(ids, (vectors @ q).tolist(), strict=True))
        assert len(found) == big_k
        assert min(scores[i] for i in found) >= max(scores[i] for i in own - found) - 1e-6
        assert store.check_consistency() == []


def test_a_failed_write_leaves_rows_centre_and_answers_unchanged(tmp_path, data, monkeypatch):
    """The write that makes the group large computes the sketch centre inside its transaction: a failure at the
    centre or before COMMIT stores nothing, neither the rows nor the centre, and searches answer as before."""
    vectors, queries = data
    path = tmp_path / "s"
    with Store(path, DIM) as store:
        first = ANN_MIN_ROWS - 10
        ids = fill(store, "u1", vectors[:first])
        before = answers(store, "u1", queries)
        for point in ("store.sketch_centre", "store.before_commit"):
            monkeypatch.setenv(RAISE_ENV, point)
            with pytest.raises(FailpointError):
                fill(store, "u1", vectors[first:first + 500], request_id="failed")
            monkeypatch.delenv(RAISE_ENV)
            assert [m.id for m in store.live_memories("u1")] == ids
            assert meta_rows(path) == {}
            assert store._index.centre(("u1", "fact")) is None
            assert store._index.group_size(("u1", "fact")) == first
            assert answers(store, "u1", queries) == before
            assert store.check_consistency() == []
        added = fill(store, "u1", vectors[first:first + 500], request_id="ok")  # the same write, succeeding
        assert list(meta_rows(path)) == [centre_key("u1", "fact")]
        assert store.check_consistency() == []
        centre = store._index.centre(("u1", "fact"))
        assert centre is not None and centre.rows == first + 500
        # a failed write into the group with its centre: rows, centre and answers unchanged
        after = answers(store, "u1", queries)
        monkeypatch.setenv(RAISE_ENV, "store.before_commit")
        with pytest.raises(FailpointError):
            with store.write() as tx:
                for mid in added[:100]:
                    tx.delete(mid)
                tx.add_memory("u1", "new", "user", "user", "fact", queries[0], "failed-2")
        monkeypatch.delenv(RAISE_ENV)
        assert [m.id for m in store.live_memories("u1")] == ids + added
        assert store._index.centre(("u1", "fact")) is centre
        assert answers(store, "u1", queries) == after
        assert store.check_consistency() == []
    assert os.environ.get(RAISE_ENV) is None


def test_reopen_and_rebuild_from_sqlite_give_the_same_answers(tmp_path, data):
    """The answers are a function of SQLite: a reopen (index file loaded), an open without the index files (rebuilt),
    and the engine's read-only rebuild all answer the same memories with the same scores, after supersedes and
    deletes have moved rows around inside the group."""
    vectors, queries = data
    path = tmp_path / "s"
    rng = np.random.default_rng(1)
    with Store(path, DIM) as store:
        ids = fill(store, "u1", vectors)
        with store.write() as tx:  # rows move: the last row fills each hole
            for mid in rng.choice(ids, 300, replace=False).tolist():
                if rng.random() < 0.5:
                    tx.delete(mid)
                else:
                    tx.supersede(mid, tx.add_memory("u1", "newer", "user", "user", "fact",
                                                    clustered(rng, 1)[0], "moves"))
        live = answers(store, "u1", queries)
        assert store.check_consistency() == []
    with Store(path, DIM) as store:
        assert store.index_rebuild_reason is None  # loaded from the file
        assert answers(store, "u1", queries) == live
    index = rebuilt_index(path, DIM)
    rebuilt = [sorted(index.search("u1", query_vector(q, DIM), K, ("fact", "experience")),
                      key=lambda hit: (-hit[1], hit[0])) for q in queries]
    assert [[(i, pytest.approx(s, abs=1e-6)) for i, s in hits] for hits in rebuilt] == live
    (path / INDEX_FILE).unlink()
    (path / SIDECAR_FILE).unlink()
    with Store(path, DIM) as store:
        assert store.index_rebuild_reason == "index file missing"
        assert answers(store, "u1", queries) == live
        assert store.check_consistency() == []


@pytest.mark.slow
def test_the_centre_is_recomputed_as_the_group_grows_and_kept_when_it_empties(tmp_path):
    """A group that grows RETRAIN_GROWTH times past its centre's size gets a new one (recall stays); a group
    emptied and refilled keeps the centre SQLite records, in the open index and after a rebuild alike."""
    rng = np.random.default_rng(2)
    path = tmp_path / "s"
    vectors = clustered(rng, RETRAIN_GROWTH * ANN_MIN_ROWS + 100)
    with Store(path, DIM) as store:
        ids: list[int] = []
        for start in range(0, len(vectors), 2048):
            ids += fill(store, "u1", vectors[start:start + 2048])
        centre = store._index.centre(("u1", "fact"))
        assert centre is not None and centre.rows >= RETRAIN_GROWTH * ANN_MIN_ROWS
        queries = clustered(np.random.default_rng(3), 100)
        recall = np.mean([len({m.id for m in store.search("u1", q, k=K)} & exact_top(ids, vectors, q, K)) / K
                          for q in queries])
        assert recall >= 0.9, recall
        fill(store, "u3", vectors[:ANN_MIN_ROWS])
        with store.write() as tx:
            for m in store.live_memories("u3"):
                tx.delete(m.id)
        assert store._index.group_size(("u3", "fact")) == 0
        refill = fill(store, "u3", vectors[:200])
        assert store._index.centre(("u3", "fact")) is not None
        small = answers(store, "u3", queries[:20])
        assert store.check_consistency() == []
    (path / INDEX_FILE).unlink()
    with Store(path, DIM) as store:
        assert answers(store, "u3", queries[:20]) == small
        assert {m.id for m in store.live_memories("u3")} == set(refill)


@pytest.mark.slow
def test_past_the_sampled_size_a_search_answers_as_a_count_of_every_row_does(tmp_path, monkeypatch):
    """Past `_SAMPLED_ROWS` rows the sketch's cut-off distance is guessed from a sample of the rows' distances
    and then read from the rows within the guess: the answers (ids and scores) must be those of counting every
    row, for a small and a larger k, and stay so after a reopen that rebuilds the index from SQLite."""
    from hymem.store import _ann

    rng = np.random.default_rng(40)
    rows = _ann._SAMPLED_ROWS + 7000
    vectors = clustered(rng, rows)
    queries = np.concatenate([clustered(np.random.default_rng(41), 40), vectors[::997][:20]])
    path = tmp_path / "s"
    with Store(path, DIM) as store:
        ids: list[int] = []
        for start in range(0, rows, 8192):
            ids += fill(store, "u1", vectors[start:start + 8192])
        sampled = {k: answers(store, "u1", queries, k) for k in (1, K, 40)}
        monkeypatch.setattr(_ann, "_SAMPLED_ROWS", 10 * rows)  # every row's distance counted
        counted = {k: answers(store, "u1", queries, k) for k in (1, K, 40)}
        monkeypatch.undo()
        assert sampled == counted
        recall = np.mean([len({i for i, _ in found} & exact_top(ids, vectors, q, K)) / K
                          for found, q in zip(sampled[K], queries, strict=True)])
        assert recall >= 0.9, recall
        for q, found in zip(queries[:3], sampled[40][:3], strict=True):  # the hits' scores are the exact scan's
            exact = {m.id: m.score for m in store.search("u1", q, k=rows // 8)}  # a k this large scans every row
            assert all(exact[memory_id] == score for memory_id, score in found)
    (path / INDEX_FILE).unlink()
    with Store(path, DIM) as store:
        assert {k: answers(store, "u1", queries, k) for k in (1, K, 40)} == sampled


CRASH_AFTER_WRITE = """
import os, signal, sys
import numpy as np
from hymem.store import Store

store = Store(sys.argv[1], {dim})  # the default durability
with store.write() as tx:
    tx.add_memory("u1", "The user lives in Paris.", "user", "user", "fact", np.ones({dim}, np.float32), "r1")
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint, no persist
"""


def test_by_default_a_write_that_returned_survives_a_crash_of_the_application(tmp_path):
    """WAL with synchronous=NORMAL (the default): a killed process loses none of the writes that returned (only a
    power loss or OS crash could lose the last ones, which no test here can cause)."""
    script = tmp_path / "child.py"
    script.write_text(CRASH_AFTER_WRITE.format(dim=DIM))
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.run([sys.executable, str(script), str(tmp_path / "s")], capture_output=True, text=True,
                           timeout=60, env={"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"})
    assert child.returncode == -signal.SIGKILL and "written" in child.stdout, child.stderr
    with Store(tmp_path / "s", DIM) as store:
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
        assert [m.text for m in store.live_memories("u1")] == ["The user lives in Paris."]
        assert store.search("u1", np.ones(DIM, np.float32), k=1)[0].request_id == "r1"
        assert store.check_consistency() == []
