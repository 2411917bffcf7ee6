"""A long unit's finished writes are saved while it runs (issue 35): a real `hymem-eval run` killed mid-unit
(SIGKILL, or Ctrl-C) leaves them readable in RUN/journal/, `show` names the unit INCOMPLETE with its writes
done of its writes in all, and `--resume` ends with the record an uninterrupted run gives."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pandas as pd
import pytest

from evals.cli.main import main
from evals.record import (
    JOURNAL_DIR,
    Codes,
    JournalHead,
    JournalWriter,
    WriteRecord,
    read_journal,
    read_units,
    unit_journals,
)
from evals.report.compare import show
from evals.report.view_data import load, verdict_and_reasons
from tests.report.test_compare import RUN_B, write_run
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


# three runs of a 200-turn case in subprocesses: kill -9 in CI's heavy session (`nox -s heavy`), Ctrl-C in `slow`
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGKILL, marks=pytest.mark.ci_heavy),
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
                         ids=["kill-9", "ctrl-c"])
def test_a_unit_stopped_mid_way_leaves_its_finished_writes_and_resume_gives_the_whole_record(
        long_dataset, uninterrupted, tmp_path, sig):
    out = tmp_path / "run"
    proc = subprocess.Popen(run_cmd(long_dataset, out), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=default_sigint)
    deadline = time.monotonic() + 600  # a loaded machine can take minutes to start
    while time.monotonic() < deadline and proc.poll() is None and journal_writes(out) < KILL_AFTER:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]  # still inside the long unit
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == (130 if sig == signal.SIGINT else -signal.SIGKILL), err
    if sig == signal.SIGINT:  # the message names the journals (the short unit may still be running too)
        said = re.search(rf"; (\d+) finished writes of (\d+) unfinished units are in {re.escape(str(out / JOURNAL_DIR))}",
                         err)
        assert said is not None and int(said.group(1)) >= KILL_AFTER, err
        assert int(said.group(2)) in (1, 2), err  # the long unit, and the short one if it was still writing

    # the journal: the unit, its size, and every finished write as the uninterrupted run recorded it
    (path,) = [p for p in unit_journals(out) if p.name.startswith("offline_long_")]
    journal = read_journal(path)
    assert (journal.head.provider, journal.head.case_id, journal.head.epoch) == ("offline", "long", 0)
    assert journal.head.writes_total == LONG_TURNS
    assert KILL_AFTER <= journal.done < LONG_TURNS
    whole = untimed_units(uninterrupted)["long"]
    assert [untimed(w.write.model_dump(mode="json")) for w in journal.writes] == whole["writes"][:journal.done]
    attempts = [untimed(a.model_dump(mode="json")) for w in journal.writes for a in w.attempts]
    assert attempts and attempts == whole["attempts"][:len(attempts)]
    assert [f for w in journal.writes for f in w.findings] == []  # a clean engine: no finding on these writes
    assert "long" not in {r.case_id for r in read_units(out)}  # never counted as finished

    shown = show(out)
    assert "UNFINISHED" in shown
    assert f"long · epoch 0: INCOMPLETE, {journal.done} of {LONG_TURNS} writes saved in {JOURNAL_DIR}/" in shown
    assert f"{len(read_units(out))} of 2 units finished and saved" in shown
    assert main(["show", str(out)]) == 1  # no table yet: listed, but nothing measured

    resumed = subprocess.run(run_cmd(long_dataset, out) + ["--resume"], cwd=REPO, capture_output=True, text=True,
                             timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    assert not (out / JOURNAL_DIR).exists()  # every unit saved: no journal left
    assert untimed_units(out) == untimed_units(uninterrupted)
    for table in ("facts", "anomalies", "cases"):
        mine, theirs = pd.read_parquet(out / f"{table}.parquet"), pd.read_parquet(uninterrupted / f"{table}.parquet")
        keep = [c for c in mine.columns if c not in UNSTABLE]
        pd.testing.assert_frame_equal(mine[keep].sort_values(list(keep[:3])).reset_index(drop=True),
                                      theirs[keep].sort_values(list(keep[:3])).reset_index(drop=True))


@pytest.mark.ci_heavy  # reads the uninterrupted fixture's 200-turn run (run by `nox -s heavy`)
def test_a_finished_run_keeps_no_journal(uninterrupted):
    assert not (uninterrupted / JOURNAL_DIR).exists()
    assert "INCOMPLETE" not in show(uninterrupted)


def test_a_journal_cut_inside_a_line_reads_back_its_whole_lines(tmp_path):
    head = JournalHead(provider="p/x:1", case_id="c 1", epoch=2, dataset="d", writes_total=5)
    journal = JournalWriter(tmp_path, head)
    for i in range(3):
        journal.write_done(WriteRecord(index=i, path="chat", request_id=f"r{i}", success=True, codes=Codes(success=True)), [], [])
    journal.close()
    with journal.path.open("a", encoding="utf-8") as f:
        f.write('{"write": {"index": 3, "pa')  # the write in flight when the process died
    read = read_journal(journal.path)
    assert read.torn and read.done == 3 and [w.write.index for w in read.writes] == [0, 1, 2]
    assert read.head.case_id == "c 1" and read.head.writes_total == 5
    again = JournalWriter(tmp_path, head)  # the unit replayed from its start: its journal starts afresh
    again.close()
    assert read_journal(again.path).done == 0 and again.path == journal.path


def test_a_run_stopped_while_writing_its_tables_names_its_half_done_units_in_show_and_view(tmp_path):
    """A run with (partial) tables and a journal left: `show` and the page's reasons both name the unit."""
    killed = write_run(tmp_path / "killed", RUN_B, finished=None, verdict=None)
    journal = JournalWriter(killed, JournalHead(provider="p", case_id="c9", epoch=0, dataset="d1", writes_total=7))
    for i in range(2):
        journal.write_done(WriteRecord(index=i, path="chat", request_id=f"r{i}", success=True,
                                       codes=Codes(success=True)), [], [])
    journal.close()
    line = "p · c9 · epoch 0: INCOMPLETE, 2 of 7 writes saved in journal/"
    assert show(killed).startswith("run killed: UNFINISHED") and line in show(killed)
    verdict, reasons = verdict_and_reasons(load(killed))
    assert verdict == "unfinished" and any(r.startswith(line) for r in reasons)


def test_a_line_made_in_another_process_is_redacted_again_with_this_ones_secrets(tmp_path):
    """A Ray worker redacts its lines with the secrets it knows; the driver appends them redacted with its own (its
    environment's keys, the run's endpoint URLs), as every other file of the run is."""
    import secrets

    from evals.core.redact import register_secret
    from evals.record import Attempt, JournalLines

    driver_only = "zq-" + secrets.token_hex(12)  # a key the worker never saw
    write = WriteRecord(index=0, path="chat", request_id="r0", success=True, codes=Codes(success=True))
    said = Attempt(provider="p", model="m", case_id="c", site="lm.extract", status="AuthenticationError",
                   error=f'401: key {driver_only} refused; "api_key=sk-abcdefgh" \\ {{"x": 1}}')
    lines = JournalLines()
    clean, leaky = lines.write_done(write, [], []), lines.write_done(write, [], [said])
    assert driver_only in leaky and "sk-abcdefgh" not in leaky  # the worker's redaction: the shapes only
    register_secret(driver_only)
    journal = JournalWriter(tmp_path, JournalHead(provider="p", case_id="c", epoch=0, dataset="d", writes_total=2))
    journal.append_line(clean)
    journal.append_line(leaky)
    journal.close()
    text = journal.path.read_text(encoding="utf-8")
    assert driver_only not in text and text.splitlines()[1] + "\n" == clean  # a clean line is kept as it came
    read = read_journal(journal.path)
    assert read.done == 2 and not read.torn
    assert read.writes[1].attempts[0].error == '401: key [REDACTED] refused; "api_key=[REDACTED]" \\ {"x": 1}'


@pytest.mark.parametrize("mark", ['"', "\\", "\n", "\t", "é", "\u2028", "\U0001f511"],
                         ids=["quote", "backslash", "newline", "tab", "non-ascii", "line-separator", "beyond-bmp"])
@pytest.mark.parametrize("ascii_only", [False, True], ids=["as-made", "ensure-ascii"])
def test_a_driver_secret_is_found_in_a_line_however_json_escapes_it(tmp_path, mark, ascii_only):
    """A key holding a character JSON escapes is in the line only escaped (`\\"`, `\\\\`, `\\n`, `\\u2028`, or with
    `ensure_ascii` `\\u00e9`, a surrogate pair): the driver still finds it, and redacts it."""
    import json
    import secrets

    from evals.core.redact import register_secret
    from evals.record import Attempt, JournalLines

    key = f"k{mark}y-" + secrets.token_hex(8)
    write = WriteRecord(index=0, path="chat", request_id="r0", success=True, codes=Codes(success=True))
    said = Attempt(provider="p", model="m", case_id="c", site="lm.extract", status="AuthenticationError",
                   error=f"401: key {key} refused")
    line = JournalLines().write_done(write, [], [said])
    if ascii_only:  # as a writer with json.dumps' default would make it
        line = json.dumps(json.loads(line)) + "\n"
    escaped = ascii_only or mark in '"\\\n\t\u2028'  # pydantic leaves other non-ASCII raw, as the journal does
    assert (key in line) != escaped and key in json.loads(line)["attempts"][0]["error"]
    register_secret(key)
    journal = JournalWriter(tmp_path, JournalHead(provider="p", case_id="c", epoch=0, dataset="d", writes_total=1))
    journal.append_line(line)
    journal.close()
    (saved,) = read_journal(journal.path).writes
    assert saved.attempts[0].error == "401: key [REDACTED] refused"
