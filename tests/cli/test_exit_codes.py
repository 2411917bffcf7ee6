"""One exit-code rule for every subcommand (README, "Exit codes"): 0 measured, whatever the verdict; 1 ran but
measured nothing, or the gate found a regression; 2 bad input; 130 interrupted. "Measured nothing" includes an
LLM judge or a tuner whose every call failed: their 0.000 is not a measurement (issue 34)."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evals.cli.main import main

CASE = {"id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}}
DEV = {**CASE, "id": "b", "turns": [[{"role": "user", "content": "I am a teacher in Chicago."}]],
       "expect": {"facts": [{"text": "The user is a teacher."}]}}


class _Refusing(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every request (400: not retried), as a dead key does."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": "invalid request", "type": "invalid_request_error"}}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def dead_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "one.jsonl"
    path.write_text(json.dumps(CASE) + "\n", encoding="utf-8")
    return path


def _run(dataset: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "--dataset", str(dataset), "--embedder", "hash", "--faults", "none", "--no-progress",
            "--matcher", "text", "--out", str(out), *extra]


@pytest.fixture(scope="module")
def offline_run(dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "offline"
    assert main(_run(dataset, out)) == 0
    return out


@pytest.fixture(scope="module")
def dead_run(dataset, dead_url, tmp_path_factory) -> Path:
    """A run whose every unit failed with an infra error (its only provider refuses every call)."""
    out = tmp_path_factory.mktemp("runs") / "dead"
    assert main(_run(dataset, out, "--lm", f"openai/m@{dead_url}")) == 1
    return out


def test_run_with_a_dead_judge_measured_nothing(dataset, dead_url, tmp_path, capsys):
    code = main(_run(dataset, tmp_path / "r", "--matcher", f"llm:openai/judge@{dead_url}"))
    err = capsys.readouterr().err
    assert code == 1, err
    assert "the judge failed on every one of its" in err and "not measurements" in err
    assert "Traceback" not in err


def test_matcher_eval_with_a_dead_judge_measured_nothing(dead_url, tmp_path, capsys):
    pair = {"lang": "en", "category": "paraphrase", "gold": {"text": "The user likes tea.", "subject": "user"},
            "pred": {"text": "The user enjoys tea.", "subject": "user"}, "same": True}
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({**pair, "id": f"p{i}"}) + "\n" for i in range(3)), encoding="utf-8")
    code = main(["matcher", "eval", "--pairs", str(pairs), "--matcher", f"llm:openai/judge@{dead_url}",
                 "--out", str(tmp_path / "agreement")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "decided none of the 3 pairs" in err and "not a measurement" in err


def test_tune_whose_every_model_call_failed_measured_nothing(dataset, dead_url, tmp_path, capsys):
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps(DEV) + "\n", encoding="utf-8")
    code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", str(dataset),
                 "--dev", str(dev), "--lm", f"openai/m@{dead_url}", "--matcher", "text",
                 "--out", str(tmp_path / "tuned")])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "every dev prediction failed, before and after tuning" in err and "nothing was measured" in err


def test_tune_that_measured_exits_0(dataset, tmp_path, capsys):
    dev = tmp_path / "dev.jsonl"
    dev.write_text(json.dumps(DEV) + "\n", encoding="utf-8")
    code = main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", str(dataset),
                 "--dev", str(dev), "--lm", "offline", "--matcher", "text", "--out", str(tmp_path / "tuned")])
    assert code == 0, capsys.readouterr().err


def test_gate_of_two_runs_that_measured_nothing_is_not_a_pass(dead_run, tmp_path, capsys):
    current = tmp_path / "current"
    shutil.copytree(dead_run, current)
    code = main(["gate", "--baseline", str(dead_run), "--current", str(current)])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "every unit of the current run was an infra error" in out
    assert "every unit of the baseline run was an infra error" in out


def test_gate_against_a_baseline_that_measured_nothing_fails(offline_run, dead_run, dead_url, capsys):
    """A dead baseline is no reference: every rule would skip its n/a values and the gate would pass."""
    code = main(["gate", "--baseline", str(dead_run), "--current", str(offline_run),
                 "--pair", f"openai/m@{dead_url}=offline"])
    out, err = capsys.readouterr()
    assert code == 1, err
    assert "every unit of the baseline run was an infra error" in out


def test_gate_of_a_run_against_itself_says_so(offline_run, capsys):
    code = main(["gate", "--baseline", str(offline_run), "--current", str(offline_run)])
    err = capsys.readouterr().err
    assert code == 0
    assert "warning: the baseline and the current run are the same directory" in err


def test_gate_of_two_measured_runs_passes_without_a_warning(offline_run, tmp_path, capsys):
    current = tmp_path / "copy"
    shutil.copytree(offline_run, current)
    code = main(["gate", "--baseline", str(offline_run), "--current", str(current)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "warning" not in err
