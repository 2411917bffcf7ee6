"""Identity check for speed work on the write path: everything a fixed set of writes makes observable, as JSON.

Run it on two trees and compare the outputs byte for byte (`cmp`); a speed change must leave them equal:

    cd BEFORE && PYTHONPATH=$PWD python -m evals.bench.identity > /tmp/before.json
    cd AFTER && PYTHONPATH=$PWD python -m evals.bench.identity > /tmp/after.json
    cmp /tmp/before.json /tmp/after.json

What it records (wall times and timestamps left out):
- every request the model received: the lm15 `Request` of an in-process engine (offline model, and a scripted
  one replaying broken JSON, empty bodies, provider errors, unknown op ids, a fenced reply...), and the raw
  HTTP body of every POST the offline server (`evals.arms.serve`) received from the engine over a real socket;
- every `WriteResult` (ops, proposed facts and ops, error codes, retry_safe, messages), duplicates, a reused
  request id, a store fault before COMMIT;
- the LM's history entries (messages, usage, outputs) and the size of DSPy's trace;
- every row of every table of each store (under `synchronous=FULL` and `NORMAL`), vectors as hex, and the
  meta rows (generation, vectors checksum); the profile, a search, and the store's consistency check.
"""

# lazy imports: each benchmark imports only what it measures, inside the function that measures it.
from __future__ import annotations

import json
import logging
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any


def _store_rows(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path / "hymem.sqlite3")
    state: dict[str, Any] = {}
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
        if table == "migrations":
            continue
        columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        kept = [c for c in columns if c not in ("created_at", "updated_at", "deleted_at", "applied_at")]
        rows = conn.execute(f"SELECT {', '.join(kept)} FROM {table} ORDER BY rowid").fetchall()
        state[table] = [[v.hex() if isinstance(v, bytes) else v for v in row] for row in rows]
        if "deleted_at" in columns:
            state[f"{table}.deleted"] = [r[0] is not None for r in
                                         conn.execute(f"SELECT deleted_at FROM {table} ORDER BY rowid")]
    conn.close()
    for row in state.get("chain_rounds", []):
        payload = json.loads(row[-1])
        payload.pop("seconds", None)  # a wall time
        row[-1] = payload
    return state


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def _in_process(tmp: Path, out: dict[str, Any]) -> None:
    import dspy
    from dspy._vendor.lm15.serde import request_to_dict

    import hymem.failpoints as failpoints
    from evals.bench.engine import synthetic_case
    from hymem.client import HyMemoryClient
    from hymem.offline import offline_lm
    from hymem.testing import ScriptedLM

    class Capture:
        def __init__(self, inner: Any):
            self.inner = inner

        def complete(self, request: Any) -> Any:
            out["requests"].append(request_to_dict(request))
            return self.inner.complete(request)

    def store_fault(name: str) -> None:
        if name == "store.before_commit":
            raise RuntimeError("planted store fault")

    base = offline_lm()
    lm = dspy.LM(base.model, engine=Capture(base.engine), cache=False, num_retries=0)
    for sync in ("FULL", "NORMAL"):
        client = HyMemoryClient(path=tmp / sync, lm=lm, embedder="hash", synchronous=sync)
        turns = synthetic_case(40).turns
        results = [client.add(t, user_id="tim", request_id=f"w{i}") for i, t in enumerate(turns)]
        results.append(client.add(turns[3], user_id="tim", request_id="w3"))  # a duplicate
        results.append(client.add(turns[4], user_id="tim", request_id="w3"))  # a reused request id
        results.append(client.add([
            {"role": "user", "name": "Tim", "content": "I'm a nurse in Berlin. My friend Jack is a chef."},
            {"role": "assistant", "name": "John", "content": "I am a pilot and I live in Oslo."},
            {"role": "assistant", "content": "You could try the new cafe."}], user_id="tim", request_id="multi"))
        results.append(client.add([{"role": "user", "content": "我住在北京，我是一名老师。"}], user_id="li",
                                  request_id="zh"))
        results.append(client.add_working([
            {"role": "user", "content": "Fix the failing test."},
            {"role": "assistant", "content": "The test failed because the path was wrong; I fixed it with pathlib."},
            {"role": "tool", "name": "pytest", "content": "1 passed"}], user_id="tim", request_id="work"))
        results.append(client.add_extracted([{"text": "The user likes tea.", "owner": "user"},
                                             {"text": "The user lives in Paris.", "owner": "user"}],
                                            user_id="tim", request_id="ext"))
        token = failpoints.set_hook(store_fault)
        try:
            results.append(client.add([{"role": "user", "content": "I live in Lima."}], user_id="tim",
                                      request_id="fault"))
        finally:
            failpoints.reset_hook(token)
        out["results"] += [r.model_dump() for r in results]
        out["history"].append([(h["messages"], h["usage"], h["model"], h["outputs"]) for h in lm.history])
        lm.history.clear()
        out["profiles"].append(client.profile("tim"))
        out["searches"].append([m.model_dump(exclude={"created_at", "updated_at"})
                                for m in client.search("Where does the user live?", "tim")])
        out["consistency"].append(client.store.check_consistency())
        client.close()
        out["stores"].append(_store_rows(tmp / sync))

    fact = '{"text": "The user is a nurse.", "subject": "user", "owner": "user"}'
    scripted = ScriptedLM([
        "not json", ScriptedLM.EMPTY_BODY, None, ScriptedLM.server_error(), ScriptedLM.timeout(),
        '{"facts": [{"text": "The user is a nurse.", "subject": "user", "owner": "nobody"}], "profile": {}}',
        '{"facts": [' + fact + '], "profile": {}}', '{"ops": [{"op": "UPDATE", "fact": 0, "id": 999}]}',
        '{"facts": [' + fact + '], "profile": {"name": "Tim"}}', '```json\n{"ops": [{"op": "ADD", "fact": 0}]}\n```',
        '{"facts": [' + fact + ']}', "[1, 2]", '{"facts": [], "profile": {}, "extra": 1}'])
    client = HyMemoryClient(path=tmp / "scripted", lm=scripted, embedder="hash")
    for i in range(10):
        try:
            out["results"].append(client.add([{"role": "user", "content": f"I am a nurse ({i})."}], user_id="u",
                                              request_id=f"s{i}").model_dump())
        except AssertionError as exc:  # the script ran out: a test bug, raised as such
            out["results"].append(repr(exc))
    out["requests"] += [request_to_dict(r) for r in scripted._script.requests]
    out["history"].append([(h["messages"], h["usage"], h["outputs"]) for h in scripted.history])
    client.close()
    out["stores"].append(_store_rows(tmp / "scripted"))
    out["trace_size"] = len(dspy.settings.trace or [])


def _over_http(tmp: Path, out: dict[str, Any]) -> None:
    import dspy

    import evals.arms.serve as serve
    from evals.bench.engine import synthetic_case
    from hymem.client import HyMemoryClient

    original = serve.parse_json_body

    def recording(raw: bytes, *args: Any, **kwargs: Any) -> Any:
        out["http_bodies"].append(raw.decode("utf-8"))
        return original(raw, *args, **kwargs)

    serve.parse_json_body = recording  # the handler looks it up per request
    try:
        with serve.start_server(0, 0.0) as server:
            lm = dspy.LM("openai/offline", api_base=server.url, api_key="x", cache=False, num_retries=0)
            client = HyMemoryClient(path=tmp / "http", lm=lm, embedder="hash")
            for i, turn in enumerate(synthetic_case(20).turns):
                out["results"].append(client.add(turn, user_id="tim", request_id=f"h{i}").model_dump())
            out["results"].append(client.add([{"role": "user", "content": "我住在北京。"}], user_id="li",
                                              request_id="hzh").model_dump())
            out["history"].append([(h["messages"], h["usage"], h["outputs"], h["model"]) for h in lm.history])
            client.close()
            out["stores"].append(_store_rows(tmp / "http"))
    finally:
        serve.parse_json_body = original


def main() -> int:
    logging.getLogger("hymem.store").setLevel(logging.CRITICAL)
    out: dict[str, Any] = {"requests": [], "http_bodies": [], "results": [], "history": [], "stores": [],
                           "profiles": [], "searches": [], "consistency": []}
    with tempfile.TemporaryDirectory() as tmp:
        _in_process(Path(tmp), out)
        _over_http(Path(tmp), out)
    json.dump(_scrub(out), sys.stdout, sort_keys=True, ensure_ascii=False, default=str, indent=0)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
