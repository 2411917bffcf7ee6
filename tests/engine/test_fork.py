"""A store or client used across fork() (multiprocessing's default on Linux), on real files.

The child must refuse with a clear error and must never release the parent's directory lock; the
generation is counted inside the SQL transaction; a persisted FAISS file is trusted on open only when
its vectors match the checksum SQLite recorded for them.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3

import numpy as np
import pytest

from hymem.client import HyMemoryClient
from hymem.store import DB_FILE, INDEX_FILE, SIDECAR_FILE, Store, StoreForkedError, StoreLockedError

DIM = 8


def vec(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def add(store: Store, user: str, text: str, seed: int) -> int:
    with store.write() as tx:
        return tx.add_memory(user, text, "user", "user", "fact", vec(seed), "r")


def _in_fork(body) -> int:
    """Run body() in a forked child (os.fork); its exit code is body's return value (99 on an exception)."""
    pid = os.fork()
    if pid == 0:
        code = 99
        try:
            code = body()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_forked_child_refuses_every_call_and_its_close_keeps_the_parents_lock(tmp_path):
    with Store(tmp_path, DIM) as s:
        first = add(s, "u1", "first", 1)

        def child() -> int:
            refused = 0
            for call in (lambda: s.search("u1", vec(1)), lambda: s.live_memories("u1"),
                         lambda: add(s, "u1", "from the child", 2), lambda: s.request_result("u1", "r"),
                         s.check_consistency):
                try:
                    call()
                except StoreForkedError as e:
                    refused += "fork" in str(e) and str(os.getppid()) in str(e)
            s.close()  # must not unlock the parent's directory
            return 0 if refused == 5 else 1

        assert _in_fork(child) == 0
        with pytest.raises(StoreLockedError):  # the parent still holds the directory
            Store(tmp_path, DIM)
        assert [m.id for m in s.search("u1", vec(1), k=5)] == [first]  # the parent still works
        second = add(s, "u1", "second", 3)
        assert s.check_consistency() == []
    with Store(tmp_path, DIM) as s:
        assert s.index_rebuild_reason is None
        assert {m.id for m in s.live_memories("u1")} == {first, second}


def _client_child(path: str, queue) -> None:
    client = _CLIENTS[path]
    out = []
    for call in (lambda: client.add([{"role": "user", "content": "I live in Oslo."}], user_id="tim"),
                 lambda: client.add_extracted([{"text": "The user likes tea.", "owner": "user"}], user_id="tim"),
                 lambda: client.get_all("tim"), lambda: client.profile("tim"), lambda: client.history("tim")):
        try:
            call()
            out.append("ran")
        except StoreForkedError:
            out.append("refused")
    client.close()
    queue.put(out)


_CLIENTS: dict[str, HyMemoryClient] = {}  # inherited by the forked child


def test_a_client_used_in_a_multiprocessing_fork_child_refuses_and_the_parent_is_unharmed(tmp_path):
    path = tmp_path / "store"
    ctx = multiprocessing.get_context("fork")
    with HyMemoryClient(path, lm="offline", embedder="hash") as client:
        _CLIENTS[str(path)] = client
        try:
            assert client.add([{"role": "user", "content": "I work at Stripe."}], user_id="tim").success
            queue = ctx.Queue()
            proc = ctx.Process(target=_client_child, args=(str(path), queue))
            proc.start()
            outcome = queue.get(timeout=60)
            proc.join(timeout=60)
        finally:
            _CLIENTS.pop(str(path))
        assert outcome == ["refused"] * 5
        with pytest.raises(StoreLockedError):
            HyMemoryClient(path, lm="offline", embedder="hash")
        assert client.add([{"role": "user", "content": "I live in Oslo."}], user_id="tim").success
        texts = [m.text for m in client.get_all("tim")]
        assert client.store.check_consistency() == []
    with HyMemoryClient(path, lm="offline", embedder="hash") as client:
        assert client.store.index_rebuild_reason is None
        assert [m.text for m in client.get_all("tim")] == texts
        assert not any("Oslo" in t for t in texts[:1]) and any("Oslo" in t for t in texts)


def test_the_generation_is_counted_in_sqlite_not_per_process(tmp_path):
    with Store(tmp_path, DIM) as s:
        add(s, "u1", "a", 1)
        other = sqlite3.connect(tmp_path / DB_FILE)  # another writer moved the counter meanwhile
        other.execute("UPDATE meta SET value = '40' WHERE key = 'generation'")
        other.commit()
        other.close()
        add(s, "u1", "b", 2)
        generation = sqlite3.connect(tmp_path / DB_FILE).execute(
            "SELECT value FROM meta WHERE key = 'generation'").fetchone()[0]
        assert int(generation) == 41


def test_an_index_file_with_the_right_generation_but_other_vectors_is_rebuilt(tmp_path):
    """Two stores with the same history of ids and generations but different vectors: swapping their
    index files (sidecar included, so generation, size and crc32 all agree) must not fool the open."""
    a, b = tmp_path / "a", tmp_path / "b"
    for path, offset in ((a, 0), (b, 100)):
        with Store(path, DIM) as s:
            for i in range(3):
                add(s, "u1", f"fact {i}", i + offset)
    for name in (INDEX_FILE, SIDECAR_FILE):
        shutil.copyfile(b / name, a / name)
    with Store(a, DIM) as s:
        assert "checksum" in s.index_rebuild_reason
        assert s.check_consistency() == []
        hit = s.search("u1", vec(1), k=1)[0]
        assert hit.text == "fact 1" and hit.score == pytest.approx(1.0, abs=1e-5)
    with Store(a, DIM) as s:
        assert s.index_rebuild_reason is None  # the rebuilt index was persisted with its checksum
