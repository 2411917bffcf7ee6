"""Idempotency is per (user_id, request_id): a repeat answers the first result, another payload is refused.

Issue 12 point 1: a request_id another user already used must not drop this user's write, and the same
request_id with a different payload (messages, memories or path) is refused with REQUEST_ID_REUSED.
"""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from hymem import HyMemoryClient
from hymem.store import DB_FILE, Store
from hymem.store._schema import m001_initial
from tests.conftest import raw_state

TIM = [{"role": "user", "content": "I work at Stripe."}]
ANA = [{"role": "user", "content": "I live in Lisbon."}]


@pytest.fixture
def client(tmp_path):
    with HyMemoryClient(path=tmp_path / "s", lm="offline", embedder="hash") as c:
        yield c


def test_another_users_request_id_does_not_drop_this_users_write(client):
    first = client.add(TIM, user_id="tim", request_id="r-1")
    second = client.add(ANA, user_id="ana", request_id="r-1")
    assert first.success and second.success and not second.duplicate
    assert [m.text for m in client.get_all("ana")] == ["The user lives in Lisbon."]
    assert [op.text for op in second.ops] == ["The user lives in Lisbon."]
    assert [m.text for m in client.get_all("tim")] == ["The user works at Stripe."]


def test_repeating_a_request_with_the_same_payload_answers_the_first_result(client):
    first = client.add(TIM, user_id="tim", request_id="r-1")
    again = client.add([{"role": "user", "content": "I work at Stripe."}], user_id="tim", request_id="r-1")
    assert again.success and again.duplicate and again.ops == first.ops
    assert client.store.episode("tim") == 1


@pytest.mark.parametrize("second_write", [
    lambda c: c.add(ANA, user_id="tim", request_id="r-1"),  # other messages
    lambda c: c.add([{"role": "user", "name": "Tim", "content": "I work at Stripe."}], user_id="tim",
                    request_id="r-1"),  # same text, another speaker name
    lambda c: c.add_working(TIM, user_id="tim", request_id="r-1"),  # same messages, another path
    lambda c: c.add_extracted([{"text": "The user works at Stripe."}], user_id="tim", request_id="r-1"),
], ids=["messages", "name", "path-working", "path-extracted"])
def test_the_same_request_id_with_another_payload_is_refused_and_stores_nothing(client, second_write):
    client.add(TIM, user_id="tim", request_id="r-1")
    before = raw_state(client.path)
    result = second_write(client)
    assert not result.success and not result.duplicate
    assert result.error_code == "REQUEST_ID_REUSED" and result.request_id == "r-1"
    assert result.ops == [] and "r-1" in result.message
    assert raw_state(client.path) == before


def test_the_same_request_id_with_other_memories_is_refused(client):
    assert client.add_extracted([{"text": "The user likes tea."}], user_id="tim", request_id="seed").success
    before = raw_state(client.path)
    result = client.add_extracted([{"text": "The user likes coffee."}], user_id="tim", request_id="seed")
    assert (result.success, result.error_code) == (False, "REQUEST_ID_REUSED")
    assert raw_state(client.path) == before
    again = client.add_extracted([{"text": "The user likes tea."}], user_id="tim", request_id="seed")
    assert again.success and again.duplicate


def test_a_retry_after_store_failed_stores(client, monkeypatch):
    monkeypatch.setenv("HYMEM_FAILPOINT_RAISE", "store.before_commit")
    failed = client.add(TIM, user_id="tim", request_id="r-1")
    assert (failed.success, failed.error_code, failed.retry_safe) == (False, "STORE_FAILED", True)
    monkeypatch.delenv("HYMEM_FAILPOINT_RAISE")
    retry = client.add(TIM, user_id="tim", request_id="r-1")
    assert retry.success and not retry.duplicate
    assert [m.text for m in client.get_all("tim")] == ["The user works at Stripe."]


def test_six_users_sending_the_same_request_id_at_once_each_get_their_own_write(client, monkeypatch):
    import hymem.client as client_module

    users = ["u0", "u1", "u2", "u3", "u4", "u5"]
    cities = ["Berlin", "Paris", "Rome", "Oslo", "Lima", "Kyoto"]
    barrier = threading.Barrier(len(users))
    real = client_module.HyMemoryClient._commit

    def commit_together(self, *args, **kwargs):  # every write has passed its idempotency check
        barrier.wait(timeout=30)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(client_module.HyMemoryClient, "_commit", commit_together)
    results: dict[str, object] = {}

    def write(user: str, city: str) -> None:
        results[user] = client.add([{"role": "user", "content": f"I live in {city}."}], user_id=user,
                                   request_id="same-id")

    threads = [threading.Thread(target=write, args=pair) for pair in zip(users, cities, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for user, city in zip(users, cities, strict=True):
        r = results[user]
        assert r.success and not r.duplicate, (user, r)
        assert [m.text for m in client.get_all(user)] == [f"The user lives in {city}."]
        assert client.store.episode(user) == 1
    assert client.store.check_consistency() == []


def test_a_request_recorded_before_the_per_user_key_still_answers_as_a_duplicate(tmp_path):
    store_dir = tmp_path / "s"
    store_dir.mkdir()
    conn = sqlite3.connect(store_dir / DB_FILE, isolation_level=None)
    conn.execute("CREATE TABLE migrations (name TEXT PRIMARY KEY, applied_at REAL NOT NULL)")
    m001_initial(conn)
    conn.execute("INSERT INTO migrations VALUES ('m001_initial', ?)", (time.time(),))
    conn.execute("INSERT INTO requests VALUES ('old', 'tim', ?, ?)",
                 ('{"success": true, "request_id": "old", "message": "0 change(s)"}', time.time()))
    conn.close()
    Store(store_dir, dim=256).close()  # migrates
    with HyMemoryClient(path=store_dir, lm="offline", embedder="hash") as client:
        again = client.add(TIM, user_id="tim", request_id="old")
        assert again.success and again.duplicate and client.get_all("tim") == []
        other = client.add(TIM, user_id="ana", request_id="old")
        assert other.success and not other.duplicate
