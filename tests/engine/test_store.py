"""Store behaviour on real files: round trips, live semantics, search isolation, rollback,
FAISS rebuilds, and crash safety under SIGKILL at every failpoint of a write."""

from __future__ import annotations

import itertools
import json
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from hymem.failpoints import FailpointError
from hymem.store import (
    DB_FILE,
    INDEX_FILE,
    SIDECAR_FILE,
    DimensionMismatchError,
    Store,
    StoreLockedError,
    rebuilt_index,
)

DIM = 8
REPO = Path(__file__).resolve().parents[2]


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def add(store: Store, user: str, text: str, seed: int, kind: str = "fact", request_id: str = "r") -> int:
    with store.write() as tx:
        return tx.add_memory(user, text, "user", "user", kind, vec(seed), request_id)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s", DIM) as s:
        yield s


def test_round_trip_of_every_table(store):
    with store.write() as tx:
        mid = tx.add_memory("u1", "The user likes tea.", "user", "user", "fact", vec(1), "req-1")
        tx.append_l1_raw("u1", "req-1", "[user]: I like tea.")
        tx.merge_profile("u1", {"name": "Tim", "age": None})
        assert tx.advance_episode("u1") == 1
        tx.append_trace("u1", "req-1", "chat", {"facts": ["The user likes tea."]})
        tx.add_chain_round("u1", "req-1", 1, "extract", {"raw": "[]"})
        tx.record_request("req-1", "u1", {"success": True, "ops": []})

    (m,) = store.live_memories("u1")
    assert (m.id, m.text, m.subject, m.owner, m.kind, m.request_id) == (mid, "The user likes tea.", "user", "user",
                                                                         "fact", "req-1")
    assert store.get_memory(mid) == m
    assert store.l1_raw("u1") == ["[user]: I like tea."]
    assert store.profile("u1") == {"name": "Tim"}
    assert store.episode("u1") == 1
    assert store.request_result("u1", "req-1") == {"success": True, "ops": []}
    assert [t["payload"] for t in store.traces("u1")] == [{"facts": ["The user likes tea."]}]
    assert [(c["round"], c["stage"]) for c in store.chain_rounds("u1", "req-1")] == [(1, "extract")]
    assert store.search("u1", vec(1), k=1)[0].score == pytest.approx(1.0, abs=1e-5)
    assert store.check_consistency() == []


def test_empty_reads_have_neutral_values(store):
    assert store.live_memories("nobody") == []
    assert store.get_memory(42) is None
    assert store.search("nobody", vec(1)) == []
    assert (store.l1_raw("nobody"), store.profile("nobody"), store.episode("nobody")) == ([], {}, 0)
    assert store.request_result("u1", "nope") is None


def test_reopen_loads_the_same_store_without_rebuilding(tmp_path):
    with Store(tmp_path, DIM) as s:
        ids = [add(s, "u1", f"fact {i}", i) for i in range(5)]
        before = s.search("u1", vec(3), k=5)
    with Store(tmp_path, DIM) as s:
        assert s.index_rebuild_reason is None
        assert [m.id for m in s.live_memories("u1")] == ids
        assert s.search("u1", vec(3), k=5) == before
        assert s.check_consistency() == []


def test_rebuilt_index_of_a_closed_store_answers_as_an_open_that_rebuilds_it_and_writes_nothing(tmp_path):
    with Store(tmp_path, DIM) as s:
        a, b, c = (add(s, "u1", t, i) for i, t in enumerate(["old job", "new job", "a pet"]))
        add(s, "u1", "fixing a build", 3, kind="experience")
        add(s, "u2", "someone else", 4)
        with s.write() as tx:
            tx.supersede(a, b)
            tx.delete(c)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    index = rebuilt_index(tmp_path, DIM)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.endswith("-shm")}  # SQLite's reader
    assert after.pop(DB_FILE + "-wal", b"") == b"" and after == files  # read-only: no row, index file or lock changed
    (tmp_path / INDEX_FILE).unlink()
    with Store(tmp_path, DIM) as s:
        assert "missing" in s.index_rebuild_reason
        for user in ("u1", "u2"):
            for seed in range(5):
                expected = [(m.id, m.score) for m in s.search(user, vec(seed), k=10)]
                assert index.search(user, vec(seed), 10, ("fact", "experience")) == expected


def test_superseded_and_deleted_memories_leave_live_set_and_index_but_stay_readable(store):
    a, b, c = (add(store, "u1", t, i) for i, t in enumerate(["old job", "new job", "a pet"]))
    with store.write() as tx:
        tx.supersede(a, b)
        tx.delete(c)
    assert [m.id for m in store.live_memories("u1")] == [b]
    assert {m.id for m in store.search("u1", vec(0), k=5)} == {b}
    assert store.get_memory(a).text == "old job" and store.get_memory(c).text == "a pet"
    assert store.check_consistency() == []
    with pytest.raises(ValueError, match="not live"), store.write() as tx:
        tx.delete(a)


def test_update_memory_keeps_the_id_and_replaces_text_and_vector(store):
    mid = add(store, "u1", "The user lives in Rome.", 1)
    with store.write() as tx:
        tx.update_memory(mid, "The user lives in Paris.", "user", "user", vec(2), "req-2")
    (hit,) = store.search("u1", vec(2), k=1)
    assert (hit.id, hit.text, hit.request_id) == (mid, "The user lives in Paris.", "req-2")
    assert hit.score == pytest.approx(1.0, abs=1e-5)
    assert store.check_consistency() == []


def test_supersede_across_users_is_refused(store):
    a, b = add(store, "u1", "x", 1), add(store, "u2", "y", 2)
    with pytest.raises(ValueError, match="another user"), store.write() as tx:
        tx.supersede(a, b)


def test_search_returns_only_the_users_live_memories_best_first_and_honours_k(store):
    for i in range(10):
        add(store, "u1", f"u1 fact {i}", i, kind="experience" if i % 2 else "fact")
    other = add(store, "u2", "u2 fact", 3)  # identical vector to one of u1's
    hits = store.search("u1", vec(3), k=4)
    assert len(hits) == 4 and other not in {h.id for h in hits}
    assert all(h.user_id == "u1" for h in hits)
    assert hits[0].text == "u1 fact 3"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert {h.kind for h in store.search("u1", vec(3), k=10, kind="fact")} == {"fact"}
    assert len(store.search("u1", vec(3), k=50)) == 10
    assert [h.id for h in store.search("u2", vec(3), k=5)] == [other]


def test_exception_inside_a_write_rolls_back_rows_and_index(store):
    with pytest.raises(RuntimeError, match="boom"), store.write() as tx:
        tx.add_memory("u1", "x", "user", "user", "fact", vec(1), "req-1")
        tx.append_l1_raw("u1", "req-1", "[user]: x")
        tx.advance_episode("u1")
        raise RuntimeError("boom")
    assert store.live_memories("u1") == [] and store.l1_raw("u1") == [] and store.episode("u1") == 0
    assert store.search("u1", vec(1)) == []
    assert store.check_consistency() == []
    add(store, "u1", "after", 2)  # the store is usable again
    assert len(store.live_memories("u1")) == 1


@pytest.mark.parametrize("bad", [vec(1).astype(np.float64), vec(1)[:4], np.full(DIM, np.nan, np.float32),
                                 vec(1).reshape(2, 4), [0.1] * DIM])
def test_invalid_vectors_are_rejected_and_nothing_is_written(store, bad):
    with pytest.raises(ValueError), store.write() as tx:
        tx.append_l1_raw("u1", "r", "kept only if the write commits")
        tx.add_memory("u1", "x", "user", "user", "fact", bad, "r")
    assert store.l1_raw("u1") == [] and store.live_memories("u1") == []


def test_recording_a_request_twice_fails_the_second_write(store):
    with store.write() as tx:
        tx.record_request("req-1", "u1", {"n": 1})
    with pytest.raises(sqlite3.IntegrityError), store.write() as tx:
        tx.append_l1_raw("u1", "req-1", "dup")
        tx.record_request("req-1", "u1", {"n": 2})
    assert store.request_result("u1", "req-1") == {"n": 1} and store.l1_raw("u1") == []


def test_one_request_id_of_two_users_is_two_records(store):
    with store.write() as tx:
        tx.record_request("req-1", "u1", {"n": 1}, "fp-1")
    with store.write() as tx:
        tx.record_request("req-1", "u2", {"n": 2}, "fp-2")
    assert store.recorded_request("u1", "req-1") == ("fp-1", {"n": 1})
    assert store.recorded_request("u2", "req-1") == ("fp-2", {"n": 2})
    assert store.recorded_request("u3", "req-1") is None


def test_profile_merge_ignores_none_and_episodes_count_up(store):
    with store.write() as tx:
        tx.merge_profile("u1", {"name": "Tim", "location": "Berlin"})
        tx.advance_episode("u1")
    with store.write() as tx:
        tx.merge_profile("u1", {"name": None, "location": "Paris", "occupation": "nurse"})
        assert tx.advance_episode("u1") == 2
    assert store.profile("u1") == {"name": "Tim", "location": "Paris", "occupation": "nurse"}
    assert store.episode("u1") == 2 and store.episode("u2") == 0


def test_the_stored_profile_json_keeps_key_order_and_non_ascii_text_and_two_rounds_of_a_write_are_both_kept(
        store, tmp_path):
    with store.write() as tx:
        tx.merge_profile("u1", {"name": "李雷", "location": "北京"})
        tx.add_chain_rounds("u1", "r1", [(1, "extract", {"outputs": {"facts": []}}), (2, "reconcile", {"ops": []})])
    with store.write() as tx:
        tx.merge_profile("u1", {"occupation": "老师", "name": "Li Lei"})
    raw = sqlite3.connect(tmp_path / "s" / "hymem.sqlite3").execute(
        "SELECT basic_info FROM profiles WHERE user_id = 'u1'").fetchone()[0]
    assert raw == json.dumps({"name": "Li Lei", "location": "北京", "occupation": "老师"}, ensure_ascii=False)
    assert [(c["round"], c["stage"], c["payload"]) for c in store.chain_rounds("u1", "r1")] == [
        (1, "extract", {"outputs": {"facts": []}}), (2, "reconcile", {"ops": []})]


def test_the_vectors_checksum_and_generation_follow_every_kind_of_change(tmp_path):
    from hymem.store._vectors import checksum_of

    def meta(s: Store) -> dict:
        return dict(s._conn.execute("SELECT key, value FROM meta"))

    with Store(tmp_path / "s", DIM) as s:
        a, b = add(s, "u1", "one", 1), add(s, "u1", "two", 2)
        with s.write() as tx:
            tx.update_memory(a, "one, again", "user", "user", vec(3), "r")
            c = tx.add_memory("u1", "three", "user", "user", "fact", vec(4), "r")
            tx.supersede(b, c)
        with s.write() as tx:
            tx.delete(c)
        with s.write() as tx:
            tx.append_l1_raw("u1", "r", "[user]: hello")  # no vector moved: the checksum stays
        live = s._conn.execute("SELECT id, vector FROM memories WHERE superseded_by IS NULL AND deleted_at IS NULL")
        assert meta(s)["vectors_checksum"] == checksum_of(live)
        assert meta(s)["generation"] == "5"
        assert s.check_consistency() == []
    with Store(tmp_path / "s", DIM) as s:  # the index file's sidecar agrees with SQLite: loaded, not rebuilt
        assert s.index_rebuild_reason is None


def test_failed_faiss_update_after_commit_is_not_a_failed_write(store, monkeypatch):
    keep, gone = add(store, "u1", "keep", 1), add(store, "u1", "gone", 2)
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", "store.faiss_update")
    with store.write() as tx:  # the failpoint fires after stale vectors were removed, before adds
        new = tx.add_memory("u1", "new", "user", "user", "fact", vec(3), "r")
        tx.update_memory(keep, "kept, updated", "user", "user", vec(4), "r")
        tx.delete(gone)
    assert store.check_consistency() == []
    assert {m.id for m in store.search("u1", vec(3), k=5)} == {new, keep}


@pytest.mark.parametrize("point", ["store.after_commit", "store.after_faiss"])
def test_failures_after_commit_do_not_fail_the_write(store, monkeypatch, point):
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", point)
    mid = add(store, "u1", "x", 1)
    assert store.get_memory(mid) is not None and store.check_consistency() == []


def test_failure_before_commit_fails_the_write_and_stores_nothing(store, monkeypatch):
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", "store.before_commit")
    with pytest.raises(FailpointError):
        add(store, "u1", "x", 1)
    monkeypatch.delenv("HYMEM_FAILPOINT_RAISE")
    assert store.live_memories("u1") == [] and store.check_consistency() == []


def _corrupt_bytes(d: Path) -> None:
    data = bytearray((d / INDEX_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (d / INDEX_FILE).write_bytes(bytes(data))


def _garbage_with_matching_sidecar(d: Path) -> None:
    import zlib
    garbage = b"not a faiss index" * 10
    (d / INDEX_FILE).write_bytes(garbage)
    side = json.loads((d / SIDECAR_FILE).read_text())
    side.update(size=len(garbage), crc32=zlib.crc32(garbage))
    (d / SIDECAR_FILE).write_text(json.dumps(side))


@pytest.mark.parametrize("damage, reason", [
    (lambda d: (d / INDEX_FILE).unlink(), "missing"),
    (lambda d: (d / SIDECAR_FILE).unlink(), "sidecar"),
    (_corrupt_bytes, "checksum"),
    (_garbage_with_matching_sidecar, "unreadable"),
])
def test_missing_or_corrupt_index_file_is_rebuilt_on_open(tmp_path, damage, reason):
    with Store(tmp_path, DIM) as s:
        ids = [add(s, "u1", f"f{i}", i) for i in range(4)]
    damage(tmp_path)
    with Store(tmp_path, DIM) as s:
        assert reason in s.index_rebuild_reason
        assert s.check_consistency() == []
        assert s.search("u1", vec(2), k=1)[0].id == ids[2]
    with Store(tmp_path, DIM) as s:  # the rebuilt index was persisted
        assert s.index_rebuild_reason is None


def test_stale_index_file_is_rebuilt_on_open(tmp_path):
    with Store(tmp_path, DIM) as s:
        add(s, "u1", "first", 1)
    old = {name: (tmp_path / name).read_bytes() for name in (INDEX_FILE, SIDECAR_FILE)}
    with Store(tmp_path, DIM) as s:
        second = add(s, "u1", "second", 2)
    for name, data in old.items():
        (tmp_path / name).write_bytes(data)
    with Store(tmp_path, DIM) as s:
        assert "stale" in s.index_rebuild_reason
        assert s.check_consistency() == []
        assert s.search("u1", vec(2), k=1)[0].id == second


def test_index_is_persisted_lazily_every_n_commits(tmp_path):
    def persisted_generation() -> int:
        return json.loads((tmp_path / SIDECAR_FILE).read_text())["generation"]

    s = Store(tmp_path, DIM, persist_every=3)
    add(s, "u1", "a", 1)
    add(s, "u1", "b", 2)
    assert persisted_generation() == 0
    add(s, "u1", "c", 3)
    assert persisted_generation() == 3
    add(s, "u1", "d", 4)
    s.close()
    s.close()  # idempotent
    assert persisted_generation() == 4


def test_a_large_index_file_is_rewritten_a_tenth_of_its_rows_in_commits_apart(tmp_path):
    """Each rewrite of the index file costs O(rows); spaced by ntotal / 10 commits it costs about one row's
    bytes per commit, whatever the store's size (issue 35)."""
    def persisted_generation() -> int:
        return json.loads((tmp_path / SIDECAR_FILE).read_text())["generation"]

    with Store(tmp_path, DIM, persist_every=1) as s:
        with s.write() as tx:  # commit 1: 100 live rows, so 10 commits between two rewrites
            for i in range(100):
                tx.add_memory("u1", f"m{i}", "user", "user", "fact", vec(i), "r")
        for commit in range(2, 10):
            add(s, "u1", f"n{commit}", 1000 + commit)
        assert persisted_generation() == 0  # written by the open, not since
        add(s, "u1", "n10", 1010)
        assert persisted_generation() == 10
        add(s, "u1", "n11", 1011)
        assert persisted_generation() == 10
    assert persisted_generation() == 11  # and on close, as ever


def test_opening_with_another_dim_raises_a_clear_error(tmp_path):
    Store(tmp_path, DIM).close()
    with pytest.raises(DimensionMismatchError, match="8-dimensional.*dim=16"):
        Store(tmp_path, 16)
    Store(tmp_path, DIM).close()  # the failed open released the directory


def test_a_second_open_of_the_same_directory_is_refused(store):
    with pytest.raises(StoreLockedError):
        Store(store.path, DIM)


def test_closed_store_refuses_use(tmp_path):
    s = Store(tmp_path, DIM)
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.live_memories("u1")


def test_concurrent_writes_for_different_users_all_land(store):
    def writer(user: str) -> None:
        for i in range(15):
            with store.write() as tx:
                tx.add_memory(user, f"{user} {i}", "user", "user", "fact", vec(i), f"{user}-{i}")
                tx.append_l1_raw(user, f"{user}-{i}", f"[user]: {i}")
            store.search(user, vec(i), k=3)

    threads = [threading.Thread(target=writer, args=(f"u{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(len(store.live_memories(f"u{n}")) == 15 and len(store.l1_raw(f"u{n}")) == 15 for n in range(4))
    assert store.check_consistency() == []


def test_schema_is_pinned(tmp_path):
    Store(tmp_path, DIM).close()
    conn = sqlite3.connect(tmp_path / DB_FILE)
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in
               ("memories", "l1_raw", "episodes", "profiles", "traces", "chain_rounds", "requests", "meta")}
    assert columns == {
        "memories": ["id", "user_id", "text", "subject", "owner", "kind", "vector", "created_at", "updated_at",
                     "request_id", "superseded_by", "deleted_at"],
        "l1_raw": ["id", "user_id", "request_id", "content", "created_at"],
        "episodes": ["user_id", "counter"],
        "profiles": ["user_id", "basic_info", "updated_at"],
        "traces": ["id", "user_id", "request_id", "path", "payload", "created_at"],
        "chain_rounds": ["id", "user_id", "request_id", "round", "stage", "payload", "created_at"],
        "requests": ["request_id", "user_id", "result", "created_at", "fingerprint"],
        "meta": ["key", "value"],
    }
    assert [r[0] for r in conn.execute("SELECT name FROM migrations")] == ["m001_initial", "m002_requests_per_user"]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


# --- crash safety: a child process is SIGKILLed at a failpoint in the middle of one write ------------------

CHILD = """
import json, sys
import numpy as np
from hymem.store import Store  # hymem/__init__.py is lazy: this imports neither the client nor dspy

def vec(seed):
    v = np.random.default_rng(seed).standard_normal({dim}).astype(np.float32)
    return v / np.linalg.norm(v)

path, seeds = sys.argv[1], json.loads(sys.argv[2])
store = Store(path, {dim}, synchronous="{sync}")
with store.write() as tx:
    new = tx.add_memory("u1", "The user lives in Paris.", "user", "user", "fact", vec(100), "req-crash")
    tx.update_memory(seeds[0], "The user is a nurse.", "user", "user", vec(101), "req-crash")
    tx.supersede(seeds[1], new)
    tx.delete(seeds[2])
    tx.append_l1_raw("u1", "req-crash", "[user]: I moved to Paris.")
    tx.merge_profile("u1", {{"location": "Paris"}})
    tx.advance_episode("u1")
    tx.append_trace("u1", "req-crash", "chat", {{"facts": ["The user lives in Paris."]}})
    tx.add_chain_round("u1", "req-crash", 1, "extract", {{"raw": "..."}})
    tx.add_chain_round("u1", "req-crash", 2, "reconcile", {{"raw": "..."}})
    tx.record_request("req-crash", "u1", {{"success": True}})
store.close()
print("survived")
"""


def _rows_of_crash_write(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path / DB_FILE)
    counts = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE request_id = 'req-crash'").fetchone()[0]
              for t in ("memories", "l1_raw", "traces", "chain_rounds", "requests")}
    counts["episodes"] = conn.execute("SELECT coalesce(sum(counter), 0) FROM episodes").fetchone()[0]
    counts["profiles"] = conn.execute("SELECT count(*) FROM profiles").fetchone()[0]
    counts["superseded"] = conn.execute("SELECT count(*) FROM memories WHERE superseded_by IS NOT NULL").fetchone()[0]
    counts["deleted"] = conn.execute("SELECT count(*) FROM memories WHERE deleted_at IS NOT NULL").fetchone()[0]
    conn.close()
    return counts


ALL_ROWS = {"memories": 2, "l1_raw": 1, "traces": 1, "chain_rounds": 2, "requests": 1, "episodes": 1,
            "profiles": 1, "superseded": 1, "deleted": 1}


@pytest.mark.parametrize("point, committed", [
    ("store.before_commit", False),
    ("store.after_commit", True),
    ("store.faiss_update", True),
    ("store.after_faiss", True),
    ("store.persist", True),
])
@pytest.mark.parametrize("sync", ["FULL", "NORMAL"])  # NORMAL (no fsync per commit): what sweeps use
def test_sigkill_during_a_write_leaves_a_consistent_store_with_all_or_nothing(tmp_path, point, committed, sync):
    path = tmp_path / "store"
    with Store(path, DIM) as s:
        seeds = [add(s, "u1", f"seed {i}", i, request_id="seed") for i in range(3)]
        add(s, "u2", "other user", 7, request_id="seed")
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(dim=DIM, sync=sync))
    env = {"HYMEM_FAILPOINT": point, "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    child = subprocess.run([sys.executable, str(script), str(path), json.dumps(seeds)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert "survived" not in child.stdout

    expected = ALL_ROWS if committed else dict.fromkeys(ALL_ROWS, 0)
    assert _rows_of_crash_write(path) == expected
    with Store(path, DIM) as s:
        assert s.check_consistency() == []
        assert (s.index_rebuild_reason is not None) == committed  # the persisted index is stale iff it committed
        assert (s.request_result("u1", "req-crash") is not None) == committed
        live = {m.text for m in s.live_memories("u1")}
        if committed:
            assert live == {"The user lives in Paris.", "The user is a nurse."}
            assert s.search("u1", vec(100), k=1)[0].text == "The user lives in Paris."
        else:
            assert live == {"seed 0", "seed 1", "seed 2"}
        assert [m.text for m in s.search("u2", vec(100), k=5)] == ["other user"]


def test_search_matches_a_brute_force_ranking_after_many_mixed_writes_and_a_reopen(tmp_path):
    """The per-user index (rows moved on removal, groups per user and kind) against a ranking computed
    from SQLite's live rows, after adds, updates, supersedes and deletes across users and kinds."""
    rng = np.random.default_rng(5)
    path = tmp_path / "s"

    def expected(s: Store, user: str, q: np.ndarray, k: int, kind: str | None) -> list[int]:
        rows = [m for m in s.live_memories(user) if kind is None or m.kind == kind]
        scored = sorted((-float(vec(int(m.text.split()[1])) @ q), m.id) for m in rows)
        return [mid for _, mid in scored[:k]]

    with Store(path, DIM, persist_every=7) as s:
        live: dict[str, list[int]] = {"u1": [], "u2": [], "u3": []}
        for step in range(300):
            user = ["u1", "u2", "u3"][int(rng.integers(3))]
            seed = int(rng.integers(10_000))
            action = rng.random()
            with s.write() as tx:
                if action < 0.55 or len(live[user]) < 2:
                    kind = "fact" if rng.random() < 0.7 else "experience"
                    live[user].append(tx.add_memory(user, f"seed {seed}", "user", "user", kind, vec(seed), f"r{step}"))
                elif action < 0.7:
                    tx.update_memory(live[user][int(rng.integers(len(live[user])))], f"seed {seed}", "user", "user",
                                     vec(seed), f"r{step}")
                elif action < 0.85:
                    old = live[user].pop(int(rng.integers(len(live[user]))))
                    new = tx.add_memory(user, f"seed {seed}", "user", "user", "fact", vec(seed), f"r{step}")
                    tx.supersede(old, new)
                    live[user].append(new)
                else:
                    tx.delete(live[user].pop(int(rng.integers(len(live[user])))))
        assert s.check_consistency() == []
        queries = [vec(int(rng.integers(10_000))) for _ in range(20)]
        for q in queries:
            for user in live:
                for kind in (None, "fact", "experience"):
                    assert [m.id for m in s.search(user, q, k=4, kind=kind)] == expected(s, user, q, 4, kind)
        before = {(u, i): [m.id for m in s.search(u, q, k=6)] for u in live for i, q in enumerate(queries)}
    with Store(path, DIM) as s:
        assert s.index_rebuild_reason is None
        assert s.check_consistency() == []
        assert {(u, i): [m.id for m in s.search(u, q, k=6)] for u in live for i, q in enumerate(queries)} == before


@pytest.mark.parametrize("sync, level", [("FULL", 2), ("NORMAL", 1)])
def test_the_synchronous_level_is_the_one_asked_for_and_nothing_else_is_accepted(tmp_path, sync, level):
    with Store(tmp_path / sync, DIM, synchronous=sync) as s:
        assert s._conn.execute("PRAGMA synchronous").fetchone()[0] == level
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(ValueError, match="synchronous"):
        Store(tmp_path / "off", DIM, synchronous="OFF")


@pytest.mark.parametrize("sync, fsyncs", [("FULL", True), ("NORMAL", False)])
def test_the_index_file_is_fsynced_only_under_full_and_a_torn_one_is_rebuilt(tmp_path, monkeypatch, sync, fsyncs):
    """NORMAL: the index file is written without fsync, like SQLite's commits; a power loss can then leave it
    torn (here: cut in half behind a sidecar that survived), and the next open refuses and rebuilds it."""
    import os as os_module

    synced: list[int] = []
    real_fsync = os_module.fsync
    monkeypatch.setattr(os_module, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    with Store(tmp_path, DIM, synchronous=sync) as s:
        ids = [add(s, "u1", f"f{i}", i) for i in range(4)]
        synced.clear()
    assert bool(synced) is fsyncs  # Python-level fsyncs are the index file's and its directory's only
    data = (tmp_path / INDEX_FILE).read_bytes()
    (tmp_path / INDEX_FILE).write_bytes(data[: len(data) // 2])
    with Store(tmp_path, DIM, synchronous=sync) as s:
        assert "checksum" in s.index_rebuild_reason
        assert s.check_consistency() == []
        assert s.search("u1", vec(2), k=1)[0].id == ids[2]


def test_search_of_a_large_group_answers_as_the_exact_scan_through_adds_removals_ties_and_reopen(tmp_path, monkeypatch):
    """Above a few thousand of one user's memories the search reads a float16 copy first (issue 18.4); it must
    still return the exact scan's memories and scores: near-duplicates, exact ties (broken by the lower id),
    memories superseded on the way, and the index rebuilt on reopen included."""
    import hymem.store._index as index_module

    rng = np.random.default_rng(7)
    dim = 32

    def unit(v):
        return (v / np.linalg.norm(v)).astype(np.float32)

    base = [unit(rng.standard_normal(dim)) for _ in range(40)]
    vectors = []  # clusters of near-duplicates, exact duplicates, and spread vectors
    for i in range(3000):
        if i % 5 == 0:
            vectors.append(unit(base[i % 40] + 1e-3 * rng.standard_normal(dim)))
        elif i % 7 == 0:
            vectors.append(vectors[i // 2].copy())
        else:
            vectors.append(unit(rng.standard_normal(dim)))
    queries = [unit(base[i] + 1e-3 * rng.standard_normal(dim)) for i in range(0, 40, 3)]
    queries += [vectors[i] for i in (7, 14, 700, 2100)] + [unit(rng.standard_normal(dim)) for _ in range(10)]

    def answers(s):
        return [[(m.id, m.score) for m in s.search("u1", q, k=k)] for q in queries for k in (1, 5, 12)]

    def exact(s):
        with monkeypatch.context() as m:
            m.setattr(index_module, "_SCAN_ROWS", 10**9)
            return answers(s)

    path = tmp_path / "big"
    with Store(path, dim) as s:
        with s.write() as tx:
            for i, v in enumerate(vectors):
                tx.add_memory("u1", f"m{i}", "user", "user", "fact", v, "seed")
            tx.add_memory("u2", "other", "user", "user", "fact", queries[0], "seed")
        fast = answers(s)
        assert fast == exact(s)
        assert [len(a) for a in fast] == [1, 5, 12] * len(queries)
        for q_hits in fast:  # best first, ties to the lower id
            assert all((a[1], -a[0]) >= (b[1], -b[0]) for a, b in itertools.pairwise(q_hits))
        assert any(a[1] == b[1] for q_hits in fast for a, b in itertools.pairwise(q_hits))  # ties were met
        with s.write() as tx:  # remove the best hits and add more: the copy follows every move
            for mid in {h[0] for hits in fast[:12] for h in hits}:
                tx.supersede(mid, tx.add_memory("u1", "new", "user", "user", "fact",
                                                unit(rng.standard_normal(dim)), "r2"))
        after = answers(s)
        assert after == exact(s)
        assert not {h[0] for hits in fast[:12] for h in hits} & {h[0] for hits in after for h in hits}
    with Store(path, dim) as s:
        assert answers(s) == after


@pytest.mark.parametrize("dim", [4, 8, 384])
def test_the_same_vector_scores_the_same_wherever_it_sits_so_a_tie_goes_to_the_lower_id(tmp_path, dim):
    """FAISS sums the rows of a few small dims differently by their position in a batch; a vector must score the
    same at row 0 and row 16 (review of the float16 change)."""
    rng = np.random.default_rng(3)
    with Store(tmp_path / "s", dim) as s:
        for trial in range(20):
            v = rng.standard_normal(dim).astype(np.float32)
            user = f"u{trial}"
            with s.write() as tx:
                first = tx.add_memory(user, "a", "user", "user", "fact", v, "r")
                for _ in range(15):
                    tx.add_memory(user, "filler", "user", "user", "fact", -v, "r")
                second = tx.add_memory(user, "b", "user", "user", "fact", v.copy(), "r")
            q = v + 0.5 * rng.standard_normal(dim).astype(np.float32)
            hits = s.search(user, q, k=2)
            assert [h.id for h in hits] == [first, second] and hits[0].score == hits[1].score


def test_a_tiny_query_or_products_that_overflow_still_get_the_exact_answer(tmp_path, monkeypatch):
    """The float16 error bound is computed in float64 and counts float32 underflow, so a query of norm 1e-24 gets
    the exact scan's answer; and a NaN score (an overflowed product) ranks below the finite ones instead of
    hiding them (review of the float16 change)."""
    import hymem.store._index as index_module

    dim = 16

    def row(*values):
        v = np.zeros(dim, np.float32)
        v[: len(values)] = values
        return v

    near = row(0.5 - 2**-12 + 0.49 * 2**-12, 0.5 + 0.49 * 2**-11)  # float16 rounds it below `level`
    level = row(0.5, 0.5)
    rest = row(0.5, 0.5 - 2**-12, 2**-13)
    with Store(tmp_path / "tiny", dim) as s:
        with s.write() as tx:
            ids = [tx.add_memory("u1", f"m{i}", "user", "user", "fact", v, "r")
                   for i, v in enumerate([near, level] + [rest] * 2098)]
        q = row(1, 1, 1) * np.float32(2.0**-80)
        hits = [(m.id, m.score) for m in s.search("u1", q, k=1)]
        monkeypatch.setattr(index_module, "_SCAN_ROWS", 10**9)
        assert hits == [(m.id, m.score) for m in s.search("u1", q, k=1)] and hits[0][0] == ids[0]
    with Store(tmp_path / "nan", dim) as s:
        with s.write() as tx:
            for _ in range(7):
                tx.add_memory("u1", "big", "user", "user", "fact", row(10, -10), "r")  # q . v = inf - inf
            finite = [tx.add_memory("u1", "small", "user", "user", "fact", row(1e-30), "r") for _ in range(3)]
        hits = s.search("u1", np.full(dim, 3e38, np.float32), k=5)
        assert [h.id for h in hits[:3]] == finite and len(hits) == 5
