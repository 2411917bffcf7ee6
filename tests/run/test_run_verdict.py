"""The verdict and the terminal: coverage lists only the pairs that apply to the provider's transport, a faulted
call never comes from the response cache, unreached pairs make the verdict unknown, an all-infra-error run
exits 1, and Ctrl-C leaves at once saying truthfully what was saved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from evals.arms.serve import start_server
from evals.cli.main import main
from evals.faults.plan import WIRE_KINDS

REPO = Path(__file__).resolve().parents[2]


def _default_sigint() -> None:
    """In the child: Ctrl-C as a terminal delivers it, even when this suite runs in the background (nohup,
    `cmd &`), where SIGINT starts ignored and Python would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
CASE = {"id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}}
WORKING = {"id": "w", "lang": "en", "user_id": "dev", "path": "working",
           "turns": [[{"role": "user", "content": "Fix the failing test."},
                      {"role": "assistant", "content": "Done: the test needed a fixed seed."}]]}


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(CASE) + "\n", encoding="utf-8")
    return path


def _run(*args: str) -> list[str]:
    return ["run", "--embedder", "hash", "--no-progress", *args]


def test_an_in_process_run_lists_no_wire_only_pair_and_a_wire_run_lists_them(dataset, tmp_path, capsys):
    assert main(_run("--dataset", str(dataset), "--out", str(tmp_path / "local"))) == 0
    assert "verdict: valid" in capsys.readouterr().out
    local = pd.read_parquet(tmp_path / "local" / "coverage.parquet")
    assert not set(local.kind) & {"http_500", "http_429", "drop_connection", "null_content", "non_json_body"}
    assert "lm.extract_working" not in set(local.site)  # no case takes the working path
    assert local.reached.all()
    assert "unreached" not in (tmp_path / "local" / "summary.md").read_text()


@pytest.mark.ci_heavy  # two default sweeps (run by `nox -s heavy`)
def test_a_sweep_with_a_warm_cache_still_faults_every_call_and_reaches_every_pair(dataset, tmp_path, capsys):
    with start_server() as server:  # both runs share tmp_path/.cache/responses.sqlite
        lm = f"openai/offline@{server.url}"
        # Warm the cache with every reply the sweep's fault-free writes will ask for.
        assert main(_run("--dataset", str(dataset), "--lm", lm, "--faults", "none", "--out", str(tmp_path / "warm"),
                         "--concurrency", "1")) == 0
        code = main(_run("--dataset", str(dataset), "--lm", lm, "--out", str(tmp_path / "sweep")))
    out = capsys.readouterr().out
    assert code == 0
    attempts = pd.read_parquet(tmp_path / "sweep" / "attempts.parquet")
    assert attempts[attempts.site != "embed"].cache_hit.any()  # the fault-free writes did use the cache
    faulted = attempts[attempts.injected.notna() & (attempts.site != "embed")]  # embed: in-process faults
    assert set(faulted.injected) == set(WIRE_KINDS) and not faulted.cache_hit.any()
    coverage = pd.read_parquet(tmp_path / "sweep" / "coverage.parquet")
    lm_pairs = coverage[coverage.site.str.startswith("lm.")]
    assert set(lm_pairs.kind) == set(WIRE_KINDS) and lm_pairs.reached.all(), lm_pairs[~lm_pairs.reached]
    assert coverage.reached.all()
    faults = pd.read_parquet(tmp_path / "sweep" / "faults.parquet")
    assert faults.fired.all()
    assert "verdict: valid" in out


def test_pairs_a_plan_left_unreached_make_the_verdict_unknown_and_are_named(tmp_path, capsys):
    path = tmp_path / "two.jsonl"
    path.write_text(json.dumps(CASE) + "\n" + json.dumps(WORKING) + "\n", encoding="utf-8")
    assert main(_run("--dataset", str(path), "--faults", "random:0.2", "--seed", "3",
                     "--out", str(tmp_path / "r"))) == 0
    out = capsys.readouterr().out
    coverage = pd.read_parquet(tmp_path / "r" / "coverage.parquet")
    unreached = coverage[~coverage.reached]
    assert len(unreached) and coverage.reached.any()
    assert "verdict: unknown" in out
    first = f"{unreached.iloc[0].site}×{unreached.iloc[0].kind}"
    assert first in out
    summary = (tmp_path / "r" / "summary.md").read_text()
    assert "verdict **unknown**" in summary and "never reached" in summary and first in summary
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["verdict"] == "unknown"


def test_run_prints_the_headline_table_infra_errors_and_what_the_verdict_means(dataset, tmp_path, capsys):
    assert main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(tmp_path / "r"))) == 0
    out = capsys.readouterr().out
    for needle in ("owner_accuracy", "fact_f1", "offline", "infra errors: 0 of 1 units", "verdict: unknown",
                   "no faulted unit ran", "unknown means:", "summary.md"):
        assert needle in out, needle


def test_a_run_where_every_unit_failed_with_an_infra_error_says_so_and_exits_1(dataset, tmp_path, capsys,
                                                                            no_retry_waits):
    code = main(_run("--dataset", str(dataset), "--lm", "openai/offline@http://127.0.0.1:9/v1", "--faults", "none",
                     "--out", str(tmp_path / "r")))
    printed = capsys.readouterr()
    assert code == 1
    assert "infra errors: 1 of 1 units" in printed.out
    assert "every one of the 1 units failed with an infra error" in printed.err


class _SlowHandler(BaseHTTPRequestHandler):
    """Answers nothing for a long time: a unit stays in flight."""

    started = threading.Event()

    def do_POST(self) -> None:  # noqa: N802
        type(self).started.set()
        time.sleep(20)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.ci_heavy  # a `hymem-eval run` subprocess, as tests/run/test_interrupt.py (run by `nox -s heavy`)
def test_ctrl_c_leaves_within_seconds_and_does_not_claim_unsaved_units(dataset, tmp_path):
    handler = type("Slow", (_SlowHandler,), {"started": threading.Event()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    try:
        cmd = [sys.executable, "-m", "evals.cli.main", "run", "--dataset", str(dataset), "--embedder", "hash",
               "--lm", f"openai/offline@{url}", "--faults", "none", "--out", str(tmp_path / "r"), "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)},
                                    preexec_fn=_default_sigint)
        assert handler.started.wait(120), "the run never reached the model"
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert proc.returncode == 130, err
    assert waited < 5, f"exit took {waited:.1f}s after Ctrl-C while a request hangs for 20s"
    assert "nothing was saved" in err and "finished units are saved" not in err
    assert "Traceback" not in err
