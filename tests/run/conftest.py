"""What the journal tests share (tests/run/test_unit_journal.py, test_ray_journal.py): a long case to stop
mid-way and a short one, the run that was not stopped, and how their records are compared.

One uninterrupted run for the session: the Ray journal is checked against the local executor's run too, since Ray
and local give the same record (tests/run/test_ray_executor.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evals.bench.long_case import long_case
from evals.record import read_units, unit_journals

REPO = Path(__file__).resolve().parents[2]
LONG_TURNS = 200  # a few hundred one-message turns: seconds of replay with the hash embedder
KILL_AFTER = 12  # writes saved in the journal before the signal
# Wall-clock fields (timings, a memory's timestamps), and whether an embedding was found in the embedder's shared
# cache: the two cases share texts, and which unit embeds one first depends on thread timing (BENCHMARKS.md).
UNSTABLE = {"seconds", "latency_s", "created_at", "updated_at", "cache_hit"}


def default_sigint() -> None:
    """In the child: Ctrl-C as a terminal delivers it, even when this suite runs in the background."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def untimed(value: Any) -> Any:
    """A record's JSON without the fields two replays of a case may differ in (UNSTABLE)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in UNSTABLE}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def untimed_units(run_dir: Path) -> dict[str, Any]:
    return {r.case_id: untimed(r.model_dump(mode="json")) for r in read_units(run_dir)}


def run_cmd(dataset: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "evals.cli.main", "run", "--dataset", str(dataset), "--faults", "none",
            "--embedder", "hash", "--matcher", "text", "--out", str(out), "--no-progress"]


def journal_writes(out: Path) -> int:
    journals = [p for p in unit_journals(out) if p.name.startswith("offline_long_")]
    return journals[0].read_bytes().count(b"\n") - 1 if journals else 0  # less the head line


@pytest.fixture(scope="session")
def long_dataset(tmp_path_factory) -> Path:
    """A long case to stop mid-way (`long`, LONG_TURNS turns), and a short one."""
    path = tmp_path_factory.mktemp("journal") / "long.jsonl"
    cases = [long_case(LONG_TURNS, "long"), long_case(3, "short")]
    path.write_text("".join(c.model_dump_json(exclude_none=True) + "\n" for c in cases), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def uninterrupted(long_dataset, tmp_path_factory) -> Path:
    """`long_dataset` run to its end by the local executor: the record a stopped and resumed run must end with."""
    out = tmp_path_factory.mktemp("journal") / "whole"
    done = subprocess.run(run_cmd(long_dataset, out), cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return out
