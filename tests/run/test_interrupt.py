"""Ctrl-C during a run: exit 130, finished units kept, and --resume finishes the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    """In the child: Ctrl-C as a terminal delivers it, even when this suite runs in the background (nohup,
    `cmd &`), where SIGINT starts ignored and Python would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cases(n: int) -> str:
    lines = []
    for i in range(n):
        lines.append(json.dumps({"id": f"c{i}", "lang": "en", "user_id": f"u{i}",
                                 "turns": [[{"role": "user", "content": f"I live in City{i}."}],
                                           [{"role": "user", "content": f"I work at Company{i}."}]]}))
    return "\n".join(lines) + "\n"


@pytest.mark.ci_heavy  # two CLI processes and a default sweep; Ctrl-C in the default run: tests/run/test_run_verdict.py (run by `nox -s heavy`)
def test_sigint_exits_130_keeps_finished_units_and_resume_completes(tmp_path):
    dataset = tmp_path / "d.jsonl"
    dataset.write_text(_cases(4))  # each case is several units under the default sweep
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evals.cli.main", "run", "--dataset", str(dataset), "--embedder", "hash",
           "--concurrency", "1", "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=_default_sigint)
    units = out / "units.jsonl"
    deadline = time.monotonic() + 600  # a loaded machine can take minutes to finish the first unit
    while time.monotonic() < deadline and not (units.exists() and units.read_text().count("\n") >= 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "--resume" in err
    done = units.read_text().count("\n")
    assert done >= 1
    assert not (out / "summary.md").exists()  # no report from a partial run

    resumed = subprocess.run(cmd + ["--resume"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "verdict: valid" in resumed.stdout
    assert done < units.read_text().count("\n")  # the interrupted run had not finished them all
    cases = pd.read_parquet(out / "cases.parquet")
    assert sorted(cases["case_id"]) == sorted(f"c{i}" for i in range(4))
