"""Shared helpers: scripted replies in the adapter's format, and a raw read of a store's files."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Runs in tests match facts with the text matcher (no model load per run); the semantic matcher, the
# CLI's default, has its own tests (tests/scoring/test_matchers.py).
os.environ.setdefault("HYMEM_MATCHER", "text")

_CHECKOUT = Path(__file__).resolve().parent.parent
_CHECKOUT_KEY = pytest.StashKey[dict[str, str] | None]()


def _checkout_files() -> dict[str, str] | None:
    """Each file git tracks or would add in this checkout (ignored files aside), with a digest of its bytes; None
    outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(_CHECKOUT), "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], capture_output=True, timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    out = {}
    for name in filter(None, listed.decode("utf-8", "surrogateescape").split("\0")):
        path = _CHECKOUT / name
        out[name] = hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "absent"
    return out


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_CHECKOUT_KEY] = _checkout_files()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A test run never writes into the checkout: a test that did (a fuzzed `matcher fit` once refitted the committed
    matcher parameters, and CI's gate then scored with them) fails the run, naming the files."""
    before = session.config.stash.get(_CHECKOUT_KEY, None)
    after = _checkout_files() if before is not None else None
    if before is None or after is None:
        return
    changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = "the tests changed files of the checkout: " + ", ".join(changed[:20])
        if reporter is not None:
            reporter.write_sep("=", message, red=True, bold=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



def extract_reply(facts: list[tuple[str, str, str]] = (), profile: dict | None = None) -> str:
    """An extraction reply: facts as (text, subject, owner)."""
    return json.dumps({
        "facts": [{"text": t, "subject": s, "owner": o} for t, s, o in facts],
        "profile": profile or {},
    })


def working_reply(experiences: list[tuple[str, str, str]] = (), facts: list[tuple[str, str, str]] = ()) -> str:
    return json.dumps({
        "experiences": [{"text": t, "subject": s, "owner": o} for t, s, o in experiences],
        "facts": [{"text": t, "subject": s, "owner": o} for t, s, o in facts],
    })


def ops_reply(*ops: dict) -> str:
    return json.dumps({"ops": list(ops)})


def raw_state(path: Path) -> dict:
    """Every row of every table in the store's SQLite file, read directly (not through the engine)."""
    db = sqlite3.connect(f"file:{Path(path) / 'hymem.sqlite3'}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}
    finally:
        db.close()


_VOLATILE = {"id", "created_at", "updated_at", "request_id", "deleted_at", "superseded_by", "result"}


def canonical_state(path: Path) -> dict:
    """The store's logical content with ids, timestamps and request ids left out."""
    db = sqlite3.connect(f"file:{Path(path) / 'hymem.sqlite3'}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
                  if r[0] not in ("sqlite_sequence", "meta", "migrations")]
        out = {}
        for table in tables:
            rows = []
            for row in db.execute(f'SELECT * FROM "{table}"'):
                rec = {k: row[k] for k in row.keys() if k not in _VOLATILE}
                if "superseded_by" in row.keys():
                    rec["superseded"] = row["superseded_by"] is not None
                if "deleted_at" in row.keys():
                    rec["deleted"] = row["deleted_at"] is not None
                if table in ("traces", "chain_rounds") and "payload" in rec:
                    rec.pop("payload")
                rows.append(rec)
            out[table] = sorted(rows, key=repr)
        return out
    finally:
        db.close()


def store_state(**tables: list[dict]):
    """A store state of these tables' rows and no vectors, for checks fed by hand."""
    from evals.core.store_state import StoreState

    return StoreState(tables=dict(tables), faiss={})


def write_outcome(success: bool, **codes):
    """A system's write outcome with the documented codes, overridden by `codes`."""
    from evals.arms.base import WriteOutcome

    base = {"success": success, "error_code": None, "agent_error_code": None, "reconcile_error_code": None,
            "retry_safe": True}
    return WriteOutcome(success=success, request_id="r", codes={**base, **codes})


@pytest.fixture
def no_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A provider's calls retried as always (the same errors, the same attempts), without the back-off between them:
    for runs against an endpoint nobody listens on, where each unit waited 0.5 + 1 s to fail the same way."""
    import evals.arms.accounting as accounting

    real = accounting._retry_wait
    monkeypatch.setattr(accounting, "_retry_wait", lambda exc, attempt, cap=30.0:
                        None if real(exc, attempt, cap) is None else 0.0)


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture(scope="session")
def chat_en_six_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of chat_en's first six cases (offline model, hash embedder, no faults, text matcher), made once
    for the whole session: the tests that read such a run share it, and a test that writes into one copies it."""
    from evals.pipeline import run_eval
    from evals.run.runner import RunConfig

    out = tmp_path_factory.mktemp("chat_en_six") / "run"
    run_eval(RunConfig(datasets=[str(_CHECKOUT / "datasets" / "chat_en.jsonl")], embedder="hash", faults="none",
                       out=out, progress=False, matcher="text", limit=6))
    return out


# Two small chat cases (a named user's two facts in one write; an unnamed user's over two writes): what the CLI
# tests of secrets, overwrites and the redaction point run on.
TWO_CASES = [
    {"id": "a", "lang": "en", "user_id": "tim",
     "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
     "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}},
    {"id": "b", "lang": "en", "user_id": "ann",
     "turns": [[{"role": "user", "content": "I am a nurse."}], [{"role": "user", "content": "I like tea."}]],
     "expect": {"facts": [{"text": "The user is a nurse."}, {"text": "The user likes tea."}]}},
]
