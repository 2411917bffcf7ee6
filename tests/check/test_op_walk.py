"""The applied-op checks, the op walk, the stale same-id index and the size limits (issue 37), through a case's replay.

Each planted bug below is one the offline model never exposes: the checks must name it, and a correct engine
must show nothing.
"""

from __future__ import annotations

import hymem.client as client_module
import hymem.store._index as index_module
from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.record import AnomalyKind, CaseRun
from evals.run.replay import CaseReplayer, UnitModels
from hymem import HashEmbedder
from hymem.offline import offline_lm
from hymem.store import WriteTx

CASE = Case.model_validate({
    "id": "tim", "lang": "en", "user_id": "tim", "tags": [],
    "memories": [{"text": "The user lives in Paris.", "subject": "user", "owner": "user"}],
    "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at IBM."}]],
})


def replay(case: Case = CASE, faults: str = "none") -> CaseRun:
    run = CaseReplayer(case, "planted", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse(faults),
                       seed=0).run()
    assert run.status == "ok", run.error
    return run


def found(run: CaseRun, kind: AnomalyKind) -> list[tuple[str, str]]:
    """(check or fault kind, witness) of every finding and faulted-write anomaly of `kind`."""
    return ([(f.check, f.witness) for f in run.findings if f.kind == kind]
            + [(f.kind, a.witness) for f in run.faults for a in f.anomalies if a.kind == kind])


def test_a_correct_engine_shows_nothing_in_the_walk_the_limits_or_the_applied_ops():
    run = replay(faults="sweep")
    assert run.findings == [] and [a for f in run.faults for a in f.anomalies] == []
    kinds = {f.kind for f in run.faults if f.kind.startswith("same_subject")}
    assert kinds == {"same_subject_update", "same_subject_supersede"}


def test_applied_op_wrong_when_an_update_keeps_the_old_owner(monkeypatch):
    real = WriteTx.update_memory

    def keeps_owner(self, memory_id, text, subject, owner, vector, request_id):  # the bug: the owner is not written
        (old,) = self._conn().execute("SELECT owner FROM memories WHERE id = ?", (memory_id,)).fetchone()
        real(self, memory_id, text, subject, old, vector, request_id)

    monkeypatch.setattr(WriteTx, "update_memory", keeps_owner)
    hits = found(replay(), AnomalyKind.APPLIED_OP_WRONG)
    assert [check for check, _ in hits] == ["walk"]
    assert "UPDATE" in hits[0][1] and "the row holds owner='agent', the op owner='user'" in hits[0][1]


def test_applied_op_wrong_when_a_supersede_stores_kind_fact(monkeypatch):
    real = WriteTx.add_memory

    def as_fact(self, user_id, text, subject, owner, kind, vector, request_id):  # the bug on the superseding row
        return real(self, user_id, text, subject, owner, "fact" if "(superseded)" in text else kind, vector,
                    request_id)

    monkeypatch.setattr(WriteTx, "add_memory", as_fact)
    hits = found(replay(), AnomalyKind.APPLIED_OP_WRONG)
    assert hits and all(check == "walk" for check, _ in hits)
    assert any("SUPERSEDE" in w and "kind='fact'" in w and "kind='experience'" in w for _, w in hits)


def test_applied_op_wrong_when_an_update_keeps_the_old_vector(monkeypatch):
    real = WriteTx.update_memory

    def old_vector(self, memory_id, text, subject, owner, vector, request_id):  # the bug: the row keeps its vector
        (old,) = self._conn().execute("SELECT vector FROM memories WHERE id = ?", (memory_id,)).fetchone()
        real(self, memory_id, text, subject, owner, vector, request_id)
        self._conn().execute("UPDATE memories SET vector = ? WHERE id = ?", (old, memory_id))

    monkeypatch.setattr(WriteTx, "update_memory", old_vector)
    hits = found(replay(), AnomalyKind.APPLIED_OP_WRONG)
    assert [check for check, w in hits if "the stored vector is the old text's" in w] == ["walk"]


class _Matches:
    """A checksum equal to every other: the planted bug's vector check that always passes."""

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__


def test_reopen_diverged_when_a_stale_index_of_the_same_ids_is_served(monkeypatch):
    import json

    import hymem.store._store as store_module

    real = index_module.load_index

    def ids_only(directory, conn, dim, generation):  # the bug: the file's generation and vectors go unchecked
        try:
            generation = int(json.loads((directory / index_module.SIDECAR_FILE).read_text())["generation"])
        except (OSError, ValueError, KeyError):
            pass
        return real(directory, conn, dim, generation)

    monkeypatch.setattr(index_module, "checksum_of", lambda pairs: _Matches())
    monkeypatch.setattr(store_module, "load_index", ids_only)
    hits = found(replay(), AnomalyKind.REOPEN_DIVERGED)
    assert [check for check, w in hits if "an index file from before an in-place UPDATE" in w] == ["reopen"]


def test_size_limit_wrong_when_a_message_of_exactly_the_limit_is_refused(monkeypatch):
    import hymem.messages as messages_module

    real = messages_module.normalize_messages

    def off_by_one(messages, *, max_message_chars=None, max_write_chars=None):
        return real(messages, max_message_chars=None if max_message_chars is None else max_message_chars - 1,
                    max_write_chars=max_write_chars)

    monkeypatch.setattr(client_module, "normalize_messages", off_by_one)
    hits = found(replay(), AnomalyKind.SIZE_LIMIT_WRONG)
    assert hits and all(check == "limits" for check, _ in hits)
    assert any("a chat write of exactly max_message_chars=32000 (1 messages) was refused" in w for _, w in hits)


def test_size_limit_wrong_when_a_write_over_the_limit_reaches_the_model(monkeypatch):
    real = client_module.HyMemoryClient._memories

    def late_check(self, memories):  # the bug: the write limit counted after reconcile, i.e. not at all up front
        limit, self.max_write_chars = self.max_write_chars, None
        try:
            return real(self, memories)
        finally:
            self.max_write_chars = limit

    monkeypatch.setattr(client_module.HyMemoryClient, "_memories", late_check)
    hits = found(replay(), AnomalyKind.SIZE_LIMIT_WRONG)
    assert any("an extracted write one character over max_write_chars=128000" in w and "was not refused" in w
               for _, w in hits)
