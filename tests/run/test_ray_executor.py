"""`--executor ray`: the same tables as the local executor, units streamed to units.jsonl, failures kept.

CI starts a local Ray instance with 2 CPUs here (`--workers 2`); the tests skip without the `ray` extra.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]
WORKING_CASES = sum(1 for line in (REPO / "datasets/working.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())


def _default_sigint() -> None:
    """In the child: Ctrl-C as a terminal delivers it, even when this suite runs in the background (nohup,
    `cmd &`), where SIGINT starts ignored and Python would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
class _KillsItsWorker:
    """Unpickling it ends the process: a worker lost while it holds the task, every time it is retried."""

    def __reduce__(self):
        return (os._exit, (3,))


# Columns that differ between any two runs: wall-clock times, and whether a call was answered from a cache
# shared by concurrent units (which of two cases that embed the same text gets there first is scheduling).
TIMING = {"seconds", "latency_s", "cache_hit"}


def _run(out: Path, *extra: str, dataset: str = "datasets/working.jsonl", faults: str = "sweep") -> int:
    return main(["run", "--dataset", str(REPO / dataset), "--embedder", "hash", "--faults", faults,
                 "--out", str(out), "--no-progress", *extra])


def _table(path: Path) -> pd.DataFrame:
    frame = pd.read_parquet(path)
    if path.name == "metrics.parquet":  # latency percentiles are timings too; tokens include the racing writes'
        frame = frame[~frame["metric"].str.startswith("latency") & (frame["metric"] != "tokens_total")]
    if path.name == "attempts.parquet":  # the concurrency check's writes race by design: which lands first decides
        racing = frame["unit"] == "concurrency"  # the memories the others' reconcile prompts list, so their length
        frame.loc[racing, ["prompt_tokens", "completion_tokens"]] = float("nan")
    frame = frame.drop(columns=[c for c in frame.columns if c in TIMING])
    if frame.empty:
        return frame.reset_index(drop=True)
    order = frame.apply(lambda row: "|".join(map(repr, row)), axis=1).sort_values(kind="stable").index  # any order
    return frame.loc[order].reset_index(drop=True)


@pytest.fixture(scope="module")
def local_and_ray(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("executors")
    assert _run(base / "local") == 0
    assert _run(base / "ray", "--executor", "ray", "--workers", "2") == 0
    return base / "local", base / "ray"


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_ray_and_local_executors_write_the_same_tables(local_and_ray: tuple[Path, Path]) -> None:
    local, ray = local_and_ray
    names = sorted(p.name for p in local.glob("*.parquet"))
    assert names == sorted(p.name for p in ray.glob("*.parquet")) and "faults.parquet" in names
    for name in names:
        pd.testing.assert_frame_equal(_table(local / name), _table(ray / name), check_dtype=False, obj=name)
    assert json.loads((ray / "manifest.json").read_text())["verdict"] == "valid"


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_the_driver_alone_appends_every_unit_once(local_and_ray: tuple[Path, Path]) -> None:
    _, ray = local_and_ray
    records = [json.loads(line) for line in (ray / "units.jsonl").read_text().splitlines()]
    ids = [(r["provider"], r["case_id"]) for r in records]
    assert len(ids) == len(set(ids)) == WORKING_CASES and all(r["status"] == "ok" for r in records)


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_a_ray_run_resumes_with_the_local_executor(local_and_ray: tuple[Path, Path], tmp_path: Path) -> None:
    """units.jsonl is the same record whoever wrote it: drop units, and a local --resume redoes only those."""
    _, ray = local_and_ray
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text((ray / "manifest.json").read_text())
    kept = (ray / "units.jsonl").read_text().splitlines()[:10]
    (run / "units.jsonl").write_text("\n".join(kept) + "\n")
    assert _run(run, "--resume") == 0
    assert len((run / "units.jsonl").read_text().splitlines()) == WORKING_CASES
    pd.testing.assert_frame_equal(_table(run / "faults.parquet"), _table(ray / "faults.parquet"), check_dtype=False)


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_a_unit_whose_worker_keeps_dying_is_an_infra_error_with_the_reason(tmp_path: Path) -> None:
    """A task lost with its worker is retried; when every retry dies too, the unit is reported, not missing."""
    import ray

    from evals.arms.providers import parse_lm_spec
    from evals.cases.dataset import load_cases
    from evals.run.executors import UnitTask
    from evals.run.executors.ray_executor import run_ray

    cases = load_cases([str(REPO / "datasets/working.jsonl")])[:2]
    tasks = [UnitTask(case=c, dataset="working", label="offline", system="hymem", provider=parse_lm_spec("offline"),
                      embedder="hash", plan="none", seed=0) for c in cases]
    tasks[1].program = _KillsItsWorker()
    runs = list(run_ray(tasks, workers=2, address=None, limits={"offline": 1}, cases=cases, run_token="t",
                        max_retries=1))
    assert not ray.is_initialized()  # the run started Ray, so it shut it down
    by_case = {r.case_id: r for r in runs}
    assert set(by_case) == {c.id for c in cases}
    assert by_case[cases[0].id].status == "ok"
    dead = by_case[cases[1].id]
    assert dead.status == "infra_error" and dead.error.startswith("ray: ") and "died" in dead.error.lower()


def test_ray_options_are_refused_without_the_ray_executor(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _run(tmp_path / "x", "--workers", "2", faults="none") == 2
    assert "--executor ray" in capsys.readouterr().err


@pytest.mark.ci_heavy  # starts a local Ray instance (run by `nox -s heavy`)
def test_ctrl_c_stops_the_tasks_and_leaves_a_resumable_run(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "evals.cli.main", "run", "--dataset", str(REPO / "datasets/working.jsonl"),
           "--embedder", "hash", "--out", str(run), "--no-progress", "--executor", "ray", "--workers", "2"]
    child = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_sigint)
    units = run / "units.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (units.exists() and units.read_text().count("\n") >= 2):
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    saved = units.read_text().splitlines()
    assert 2 <= len(saved) < WORKING_CASES
    assert _run(run, "--resume") == 0
    records = [json.loads(line) for line in units.read_text().splitlines() if line.strip()]
    assert sorted(r["case_id"] for r in records) == sorted({r["case_id"] for r in records})
    assert len(records) == WORKING_CASES


@pytest.mark.slow
def test_ray_and_local_executors_agree_on_every_bundled_suite(tmp_path: Path) -> None:
    """The issue's full check: the bundled suites with the default sweep, both executors."""
    assert main(["run", "--embedder", "hash", "--out", str(tmp_path / "local"), "--no-progress"]) == 0
    assert main(["run", "--embedder", "hash", "--out", str(tmp_path / "ray"), "--no-progress",
                 "--executor", "ray", "--workers", "2"]) == 0
    for path in sorted((tmp_path / "local").glob("*.parquet")):
        pd.testing.assert_frame_equal(_table(path), _table(tmp_path / "ray" / path.name), check_dtype=False,
                                      obj=path.name)


@pytest.mark.parametrize(("address", "says"), [
    ("garbage", "use HOST:PORT"),
    ("http://head:6379", "use HOST:PORT"),
    ("", "--ray-address is empty"),
    ("127.0.0.1:{closed}", "cannot reach 127.0.0.1:"),
    ("ray://127.0.0.1:{closed}", "cannot reach 127.0.0.1:"),
])
def test_a_bad_or_unreachable_ray_address_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                                 address: str, says: str) -> None:
    """Before: a traceback (garbage), minutes of Ray retrying (HOST:PORT) or an 'I/O failure' after 40 s
    (ray://), each after the run directory was made; an empty one (an unset "$HEAD") ran locally instead."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    code = _run(tmp_path / "run", "--executor", "ray", "--ray-address", address.format(closed=closed), faults="none")
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.ci_heavy  # starts a local Ray instance, 13-19 s on 2 cores (run by `nox -s heavy`)
def test_without_an_address_the_run_starts_its_own_ray_whatever_ray_address_says(monkeypatch) -> None:
    """README: with no --ray-address a local Ray instance starts. Before, Ray followed RAY_ADDRESS (or an
    earlier `ray start`) and died with a traceback on a bad one, or refused num_cpus on a good one."""
    import ray

    from evals.arms.providers import parse_lm_spec
    from evals.cases.dataset import load_cases
    from evals.run.executors import UnitTask
    from evals.run.executors.ray_executor import run_ray

    monkeypatch.setenv("RAY_ADDRESS", "garbage")  # before: ValueError: Invalid address format
    case = load_cases([str(REPO / "datasets/working.jsonl")])[0]
    task = UnitTask(case=case, dataset="working", label="offline", system="hymem", provider=parse_lm_spec("offline"),
                    embedder="hash", plan="none", seed=0)
    runs = list(run_ray([task], workers=1, address=None, limits={"offline": 1}, cases=[case], run_token="t"))
    assert [r.status for r in runs] == ["ok"] and not ray.is_initialized()


@pytest.mark.slow
def test_an_address_that_is_not_a_ray_head_is_one_line_after_one_try(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    """A port that listens but is not a GCS (a dashboard, the client port without ray://): Ray retried it for
    about 13 minutes; now one connect attempt (about 40 s), then one line, exit 2."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        code = _run(tmp_path / "run", "--executor", "ray", "--ray-address", address, faults="none")
    err = capsys.readouterr().err
    assert code == 2 and f"--ray-address {address}: Ray did not start or join" in err and "Traceback" not in err


def test_a_local_ray_that_cannot_start_is_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                              monkeypatch) -> None:
    """The machine's fault, not the input's: exit 1 as an I/O failure is, naming Ray, with no traceback."""
    (tmp_path / "a-file").touch()
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "a-file"))  # Ray's session directory cannot be made
    assert _run(tmp_path / "run", "--executor", "ray", "--workers", "1", faults="none") == 1
    err = capsys.readouterr().err
    assert "a local Ray instance: Ray did not start" in err and "Traceback" not in err
