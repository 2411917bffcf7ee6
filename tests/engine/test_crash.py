"""kill -9 in the middle of a client write: reopening gives a consistent store, the write happened
entirely or not at all, and retrying it ends where a run that never crashed ends.

Each scenario runs in its own child process, killed by SIGKILL at a named failpoint of its second
write (add, add_working or add_extracted; the first write made a memory for it to SUPERSEDE). So that
dspy is imported once rather than once per child, a long-lived "zygote" process imports the engine and
forks one child per scenario; the test process then reopens the store and checks it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from hymem.client import HyMemoryClient
from hymem.store import DB_FILE
from hymem.testing import ScriptedLM
from tests.conftest import canonical_state, extract_reply, ops_reply, raw_state, working_reply

REPO = Path(__file__).resolve().parents[2]

ZYGOTE = r'''
"""Import the engine once, then fork one child per scenario read from stdin (one JSON object a line)."""
import json, os, signal, sqlite3, sys, traceback

from hymem.client import HyMemoryClient
from hymem.testing import ScriptedLM


def scenario(spec):
    client = HyMemoryClient(spec["store"], lm=ScriptedLM(spec["replies"]), embedder="hash")
    write = getattr(client, spec["method"])
    first = write(spec["first"], user_id="tim", request_id="w1")
    if not first.success:
        raise SystemExit(f"write 1 failed: {first}")
    source, copy = sqlite3.connect(os.path.join(spec["store"], "hymem.sqlite3")), sqlite3.connect(spec["snapshot"])
    source.backup(copy)  # the state after write 1, for the "not at all" check
    copy.close()
    source.close()
    os.environ["HYMEM_FAILPOINT"] = spec["failpoint"]  # armed for the second write (and the close) only
    second = write(spec["second"], user_id="tim", request_id="w2")
    print("write 2:", second.model_dump_json(), flush=True)
    client.close()
    print("closed", flush=True)


for line in sys.stdin:
    spec = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            signal.alarm(60)  # a hung child dies (returncode -14) instead of hanging the test run
            scenario(spec)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
'''


class Zygote:
    """A child process that has imported the engine and forks a grandchild per scenario."""

    def __init__(self, workdir: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HYMEM_FAILPOINT")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        self._stderr_path = workdir / "zygote.stderr"
        self._stderr = open(self._stderr_path, "w")  # closed in close()
        self._proc = subprocess.Popen([sys.executable, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True, env=env, cwd=workdir)

    def run(self, spec: dict) -> tuple[int, str]:
        """Run one scenario in a fresh child; its returncode (-9 when SIGKILLed) and its output."""
        self._proc.stdin.write(json.dumps(spec) + "\n")
        self._proc.stdin.flush()
        reply = self._proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"zygote died: {self._stderr_path.read_text()}")
        return json.loads(reply)["returncode"], Path(spec["log"]).read_text()

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=30)
        self._stderr.close()


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    z = Zygote(tmp_path_factory.mktemp("zygote"))
    yield z
    z.close()


# --- the writes -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Writes:
    """One write path: a first write that adds memory 1, and a second that SUPERSEDEs it and ADDs another."""

    method: str
    first: list
    first_replies: list[str]
    second: list
    second_replies: list[str]
    effects: dict[str, int]  # what the second write leaves behind (see _effects)
    live: list[str]  # live memory texts after the second write


SUPERSEDE_AND_ADD = ops_reply({"op": "SUPERSEDE", "fact": 0, "id": 1}, {"op": "ADD", "fact": 1})
BERLIN, STRIPE = "The user lives in Berlin.", "The user works at Stripe."
OLD_TIP, NEW_TIP = ("To fix import errors, add the package to PYTHONPATH.",
                    "To fix import errors, install the package in editable mode.")
PY311 = "The user's project uses Python 3.11."

WRITES = {
    "add": Writes(
        "add",
        [{"role": "user", "name": "Tim", "content": "I live in Paris."}],
        [extract_reply([("The user lives in Paris.", "user", "user")], {"location": "Paris"}),
         ops_reply({"op": "ADD", "fact": 0})],
        [{"role": "user", "name": "Tim", "content": "I moved to Berlin and I work at Stripe now."}],
        [extract_reply([(BERLIN, "user", "user"), (STRIPE, "user", "user")], {"location": "Berlin"}),
         SUPERSEDE_AND_ADD],
        {"requests": 1, "l1_raw": 1, "memories": 2, "traces": 1, "chain_rounds": 2, "superseded": 1, "episode": 2},
        [BERLIN, STRIPE]),
    "add_working": Writes(
        "add_working",
        [{"role": "user", "content": "The tests fail on import."}, {"role": "assistant", "content": OLD_TIP}],
        [working_reply([(OLD_TIP, "assistant", "agent")]), ops_reply({"op": "ADD", "fact": 0})],
        [{"role": "user", "content": "PYTHONPATH broke on Python 3.11."}, {"role": "assistant", "content": NEW_TIP}],
        [working_reply([(NEW_TIP, "assistant", "agent")], [(PY311, "user", "user")]), SUPERSEDE_AND_ADD],
        {"requests": 1, "l1_raw": 0, "memories": 2, "traces": 1, "chain_rounds": 2, "superseded": 1, "episode": 2},
        [NEW_TIP, PY311]),
    "add_extracted": Writes(
        "add_extracted",
        [{"text": "The user lives in Paris.", "owner": "user"}],
        [ops_reply({"op": "ADD", "fact": 0})],
        [{"text": BERLIN, "owner": "user"}, {"text": STRIPE, "owner": "user"}],
        [SUPERSEDE_AND_ADD],
        {"requests": 1, "l1_raw": 0, "memories": 2, "traces": 1, "chain_rounds": 1, "superseded": 1, "episode": 2},
        [BERLIN, STRIPE]),
}

# Every named failpoint, in the order a write reaches it, and whether the write has committed there.
POINTS = [
    ("client.after_extract", False),
    ("client.after_embed", False),
    ("client.after_reconcile", False),
    ("store.before_commit", False),
    ("store.after_commit", True),
    ("store.faiss_update", True),
    ("store.after_faiss", True),
    ("store.persist", True),  # not on a write's path (persist_every=100): the child dies persisting on close
]
NOTHING = {"requests": 0, "l1_raw": 0, "memories": 0, "traces": 0, "chain_rounds": 0, "superseded": 0, "episode": 1}


def _on_path(path: str, point: str) -> bool:
    return not (path == "add_extracted" and point == "client.after_extract")  # no extraction on that path


def _effects(store: Path, request_id: str) -> dict[str, int]:
    """The rows one request left in each table, the supersede marks it set, and the user's episode counter."""
    db = sqlite3.connect(f"file:{store / DB_FILE}?mode=ro", uri=True)
    try:
        out = {t: db.execute(f"SELECT count(*) FROM {t} WHERE request_id = ?", (request_id,)).fetchone()[0]
               for t in ("requests", "l1_raw", "memories", "traces", "chain_rounds")}
        out["superseded"] = db.execute(
            "SELECT count(*) FROM memories WHERE superseded_by IN (SELECT id FROM memories WHERE request_id = ?)",
            (request_id,)).fetchone()[0]
        out["episode"] = db.execute("SELECT counter FROM episodes WHERE user_id = 'tim'").fetchone()[0]
        return out
    finally:
        db.close()


def _write(client: HyMemoryClient, writes: Writes, payload: list, request_id: str):
    return getattr(client, writes.method)(payload, user_id="tim", request_id=request_id)


@pytest.fixture(scope="module")
def never_crashed(tmp_path_factory):
    """The canonical state a write path ends in when nothing crashes (computed once per path)."""
    states: dict[str, dict] = {}

    def state(path: str) -> dict:
        if path not in states:
            w, store = WRITES[path], tmp_path_factory.mktemp(f"control-{path}")
            with HyMemoryClient(store, lm=ScriptedLM(w.first_replies + w.second_replies), embedder="hash") as client:
                assert _write(client, w, w.first, "w1").success
                assert _write(client, w, w.second, "w2").success
            assert _effects(store, "w2") == w.effects
            states[path] = canonical_state(store)
        return states[path]

    return state


def _crash(zygote: Zygote, tmp_path: Path, writes: Writes, point: str) -> tuple[Path, Path, int, str]:
    store, snapshot = tmp_path / "store", tmp_path / "after-w1"
    snapshot.mkdir()
    returncode, log = zygote.run({
        "store": str(store), "snapshot": str(snapshot / DB_FILE), "log": str(tmp_path / "child.log"),
        "method": writes.method, "first": writes.first, "second": writes.second,
        "replies": writes.first_replies + writes.second_replies, "failpoint": point,
    })
    return store, snapshot, returncode, log


# --- the tests --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("point, committed", POINTS)
@pytest.mark.parametrize("path", list(WRITES))
def test_sigkill_at_a_failpoint_leaves_the_write_all_or_nothing_and_a_retry_matches_a_clean_run(
        tmp_path, zygote, never_crashed, path, point, committed):
    w = WRITES[path]
    store, snapshot, returncode, log = _crash(zygote, tmp_path, w, point)
    killed = _on_path(path, point)
    assert returncode == (-signal.SIGKILL if killed else 0), log
    assert ("closed" in log) == (not killed)
    committed = committed or not killed

    lm = ScriptedLM([] if committed else w.second_replies)
    with HyMemoryClient(store, lm=lm, embedder="hash") as client:
        assert client.store.check_consistency() == []
        assert (client.store.index_rebuild_reason is not None) == killed  # the persisted index was stale or torn
        if committed:  # entirely: every effect of write 2 is there, and a retry of its request_id is a duplicate
            assert _effects(store, "w2") == w.effects
            assert canonical_state(store) == never_crashed(path)
            retry = _write(client, w, w.second, "w2")
            assert retry.success and retry.duplicate
        else:  # not at all: exactly the state after write 1, and a retry under a new request_id runs it anew
            assert raw_state(store) == raw_state(snapshot)
            assert _effects(store, "w2") == NOTHING
            retry = _write(client, w, w.second, "w2-retry")
            assert retry.success and not retry.duplicate, retry.message
        assert [op.op for op in retry.ops] == ["SUPERSEDE", "ADD"]
        assert [m.text for m in client.get_all("tim")] == w.live
        assert client.search(w.live[1], "tim", k=1)[0].text == w.live[1]
        assert client.store.check_consistency() == []
        assert lm.remaining == 0
    assert canonical_state(store) == never_crashed(path)


def test_sigkill_while_persisting_the_index_on_close_rebuilds_it_on_reopen(tmp_path, zygote):
    w = WRITES["add"]
    store, _, returncode, log = _crash(zygote, tmp_path, w, "store.persist")
    assert returncode == -signal.SIGKILL, log
    assert '"success":true' in log and "closed" not in log  # write 2 returned; the close died
    with HyMemoryClient(store, lm=ScriptedLM([]), embedder="hash") as client:
        assert client.store.index_rebuild_reason.startswith("sidecar missing")  # the torn persist was noticed
        assert client.store.check_consistency() == []
        assert client.search("Where does the user live?", "tim", k=1)[0].text == BERLIN
        assert [m.text for m in client.get_all("tim")] == w.live
    with HyMemoryClient(store, lm=ScriptedLM([]), embedder="hash") as client:
        assert client.store.index_rebuild_reason is None  # the rebuilt index was persisted on open
        assert client.store.check_consistency() == []
