"""Writes for one user are serialised; different users write concurrently; the store stays consistent."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from hymem import HyMemoryClient


def test_concurrent_writes_for_two_users_all_land_once_and_stay_consistent(tmp_path):
    cities = ["Berlin", "Paris", "Rome", "Oslo", "Lima", "Kyoto", "Quito", "Cairo"]
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as client:
        def write(i: int):
            user = "ana" if i % 2 else "tim"
            return client.add([{"role": "user", "content": f"I like {cities[i % 8]} and my cat number {i}."}],
                              user_id=user, request_id=f"r{i}")

        with ThreadPoolExecutor(max_workers=8) as pool:
            results = list(pool.map(write, range(32)))
        assert all(r.success for r in results)
        assert client.store.episode("tim") == 16 and client.store.episode("ana") == 16
        assert len(client.store.l1_raw("tim")) == 16 and len(client.store.l1_raw("ana")) == 16
        assert client.store.check_consistency() == []
        again = [write(i) for i in range(0, 32, 2)]
        assert all(r.duplicate for r in again) and client.store.episode("tim") == 16
        reused = client.add([{"role": "user", "content": "x"}], user_id="tim", request_id="r0")
        assert reused.error_code == "REQUEST_ID_REUSED" and client.store.episode("tim") == 16


def test_one_users_writes_never_overlap(tmp_path, monkeypatch):
    import hymem.client as client_module

    inside, overlaps, lock = {"n": 0}, [], threading.Lock()
    real = client_module.HyMemoryClient._commit

    def watched(self, *args, **kwargs):
        with lock:
            inside["n"] += 1
            overlaps.append(inside["n"])
        try:
            return real(self, *args, **kwargs)
        finally:
            with lock:
                inside["n"] -= 1

    monkeypatch.setattr(client_module.HyMemoryClient, "_commit", watched)
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as client:
        with ThreadPoolExecutor(max_workers=6) as pool:
            list(pool.map(lambda i: client.add([{"role": "user", "content": f"I have {i} plants."}], user_id="tim"),
                          range(18)))
    assert max(overlaps) == 1
