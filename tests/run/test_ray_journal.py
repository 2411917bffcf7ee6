"""A Ray unit's finished writes are saved while it runs, as a local unit's are (issue 35): a real
`hymem-eval run --executor ray` killed mid-unit (SIGKILL, or Ctrl-C) leaves them in RUN/journal/, `show` names the
unit INCOMPLETE, and `--resume` ends with the record an uninterrupted run gives. A task Ray retries (its worker
killed mid-unit) starts its journal afresh.

The uninterrupted run is the local journal tests' (the local executor, tests/run/conftest.py): Ray and local give the same record
(tests/run/test_ray_executor.py), so the Ray journal is checked against the same writes and attempts.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from evals.cli.main import main
from evals.record import JOURNAL_DIR, read_journal, read_units, unit_journals
from evals.report.compare import show
from tests.run.conftest import (
    KILL_AFTER,
    LONG_TURNS,
    REPO,
    UNSTABLE,
    default_sigint,
    journal_writes,
    run_cmd,
    untimed,
    untimed_units,
)

pytest.importorskip("ray")


def _ray_cmd(dataset: Path, out: Path) -> list[str]:
    return run_cmd(dataset, out) + ["--executor", "ray", "--workers", "2"]


def _reap(pgid: int) -> None:
    """The Ray processes a SIGKILLed driver leaves behind (its dashboard and runtime-env agents outlive it): the
    child ran in its own process group, so only what it started is stopped."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=pytest.mark.ci_heavy),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)], ids=["kill-9", "ctrl-c"])
def test_a_ray_unit_stopped_mid_way_leaves_its_finished_writes_and_resume_gives_the_whole_record(
        long_dataset, uninterrupted, tmp_path, sig):
    out = tmp_path / "run"
    proc = subprocess.Popen(_ray_cmd(long_dataset, out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=default_sigint,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 600  # a loaded machine can take minutes to start Ray
        while time.monotonic() < deadline and proc.poll() is None and journal_writes(out) < KILL_AFTER:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1]  # still inside the long unit
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        _reap(proc.pid)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err
    if sig == signal.SIGINT:  # the message names the journals the driver appended
        said = re.search(rf"; (\d+) finished writes of (\d+) unfinished units are in {re.escape(str(out / JOURNAL_DIR))}",
                         err)
        assert said is not None and int(said.group(1)) >= KILL_AFTER, err

    # the journal, in the run directory the driver owns: the unit, its size, every finished write as recorded
    (path,) = [p for p in unit_journals(out) if p.name.startswith("offline_long_")]
    journal = read_journal(path)
    assert (journal.head.provider, journal.head.case_id, journal.head.epoch) == ("offline", "long", 0)
    assert journal.head.writes_total == LONG_TURNS and journal.head.dataset == "long"
    assert KILL_AFTER <= journal.done < LONG_TURNS and not journal.torn
    whole = untimed_units(uninterrupted)["long"]
    assert [untimed(w.write.model_dump(mode="json")) for w in journal.writes] == whole["writes"][:journal.done]
    attempts = [untimed(a.model_dump(mode="json")) for w in journal.writes for a in w.attempts]
    assert attempts and attempts == whole["attempts"][:len(attempts)]
    assert "long" not in {r.case_id for r in read_units(out)}  # never counted as finished

    shown = show(out)
    assert "UNFINISHED" in shown
    assert f"long · epoch 0: INCOMPLETE, {journal.done} of {LONG_TURNS} writes saved in {JOURNAL_DIR}/" in shown
    assert main(["show", str(out)]) == 1

    resumed = subprocess.Popen(_ray_cmd(long_dataset, out) + ["--resume"], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _, err = resumed.communicate(timeout=900)
    finally:
        _reap(resumed.pid)
    assert resumed.returncode == 0, err
    assert not (out / JOURNAL_DIR).exists()  # every unit saved: no journal left
    assert untimed_units(out) == untimed_units(uninterrupted)
    for table in ("facts", "anomalies", "cases"):
        mine, theirs = pd.read_parquet(out / f"{table}.parquet"), pd.read_parquet(uninterrupted / f"{table}.parquet")
        keep = [c for c in mine.columns if c not in UNSTABLE]
        pd.testing.assert_frame_equal(mine[keep].sort_values(list(keep[:3])).reset_index(drop=True),
                                      theirs[keep].sort_values(list(keep[:3])).reset_index(drop=True))


def _unit_workers() -> list[int]:
    """The Ray workers (descendants of this process) running a unit now: Ray titles them `ray::run_unit`."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    mine = []
    for pid in parents:
        try:
            title = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        ancestor = parents.get(pid)
        while ancestor not in (None, 0, 1, os.getpid()):
            ancestor = parents.get(ancestor)
        if title.startswith(b"ray::run_unit") and ancestor == os.getpid():
            mine.append(pid)
    return mine


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_a_unit_whose_worker_dies_mid_way_is_retried_with_a_fresh_journal(long_dataset, uninterrupted, tmp_path):
    """The driver's progress callback sees the unit's writes arrive; past KILL_AFTER it kills the worker. Ray retries
    the task on a new worker, whose head restarts the journal: it ends with each write once, not the dead
    attempt's writes and then the retry's."""
    from evals.arms.providers import parse_lm_spec
    from evals.cases.dataset import load_cases
    from evals.run.executors import UnitTask
    from evals.run.executors.ray_executor import run_ray

    (case,) = [c for c in load_cases([str(long_dataset)]) if c.id == "long"]
    task = UnitTask(case=case, dataset="long", label="offline", system="hymem", provider=parse_lm_spec("offline"),
                    embedder="hash", plan="none", seed=0)
    seen: list[int] = []
    killed: list[int] = []

    def progress(unit: UnitTask):
        assert unit.case.id == "long"

        def show(done: int, total: int) -> None:
            assert total == LONG_TURNS
            seen.append(done)
            if done >= KILL_AFTER and not killed:
                workers = _unit_workers()
                assert len(workers) == 1, workers
                os.kill(workers[0], signal.SIGKILL)
                killed.append(done)
        return show

    (run,) = run_ray([task], workers=1, address=None, limits={"offline": 1}, cases=[case], run_token="t",
                     run_dir=tmp_path, progress=progress)
    assert killed and run.status == "ok", run.error
    restart = next(i for i in range(1, len(seen)) if seen[i] <= seen[i - 1])  # the retry's first writes arrived
    first, retry = seen[:restart], seen[restart:]  # the writes saved after each batch of lines, in each attempt
    assert first == sorted(set(first)) and retry == sorted(set(retry)) and retry[-1] == LONG_TURNS

    (path,) = unit_journals(tmp_path)  # closed, not removed: removing it is the runner's, once the record is saved
    journal = read_journal(path)
    assert journal.done == LONG_TURNS and journal.head.case_id == "long"
    written = [untimed(w.write.model_dump(mode="json")) for w in journal.writes]
    assert written == untimed(run.model_dump(mode="json"))["writes"] == untimed_units(uninterrupted)["long"]["writes"]


def _strings(value: Any) -> list[str]:
    """Every string inside a decoded JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_a_driver_secret_that_json_escapes_is_redacted_from_a_ray_units_journal(tmp_path):
    """A key the driver registered and the worker never saw: the worker's journal lines hold it as JSON writes it (a
    quote as `\\"`, a backslash as `\\\\`, a newline as `\\n`, U+2028 as `\\u2028`), and the driver's journal holds it
    nowhere, in any form."""
    from evals.arms.providers import parse_lm_spec
    from evals.cases.dataset import Case
    from evals.core.redact import register_secret
    from evals.run.executors import UnitTask
    from evals.run.executors.ray_executor import run_ray

    token = secrets.token_hex(6)
    keys = [f'quo"te-{token}', f"back\\slash-{token}", f"new\nline-{token}", f"näive-{token}", f"sep\u2028ara-{token}"]
    case = Case.model_validate({
        "id": "keys", "lang": "en", "user_id": "ana", "tags": [], "memories": [],
        "turns": [[{"role": "user", "name": "Ana", "content": f"My key is {key} today."}] for key in keys],
        "expect": {"facts": [{"text": "The user has a key.", "subject": "user", "owner": "user"}]}})
    for key in keys:
        register_secret(key)  # in this process (the driver) only
    task = UnitTask(case=case, dataset="keys", label="offline", system="hymem", provider=parse_lm_spec("offline"),
                    embedder="hash", plan="none", seed=0)

    (run,) = run_ray([task], workers=1, address=None, limits={"offline": 1}, cases=[case], run_token="t",
                     run_dir=tmp_path)
    assert run.status == "ok", run.error
    sent = [m["content"] for w in run.writes for m in w.payload]
    assert sent == [f"My key is {key} today." for key in keys]  # the worker's record: no key of it redacted

    (path,) = unit_journals(tmp_path)
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) == 1 + len(keys)  # the head and each write, one line each
    saved = [s for line in lines for s in _strings(json.loads(line))]
    assert not [key for key in keys if key in text or any(key in s for s in saved)]
    journal = read_journal(path)
    assert journal.done == len(keys) and not journal.torn
    assert [m["content"] for w in journal.writes for m in w.write.payload] == ["My key is [REDACTED] today."] * len(keys)
