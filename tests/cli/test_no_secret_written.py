"""No key reaches a file or the terminal, whichever subcommand writes it: every key the run can see (the LM's,
the embedder's, the judge's, a providers file's, the credentials inside an endpoint URL) is planted, a real
server on 127.0.0.1 echoes what it was sent in its 401/500 bodies, and every file every subcommand wrote is
searched for each of them (Parquet cells read back, not only the compressed bytes)."""

from __future__ import annotations

import base64
import json
import threading
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evals.arms.serve import JSONHandler, start_server
from evals.cli.main import main
from hymem.sites import SITE_HEADER
from tests.conftest import TWO_CASES

LM_KEY = "xq-lm-SECRET-7f3a9c"  # OPENAI_API_KEY: the LM's, the embedder's and the judge's; not shaped like sk-…
FILE_KEY = "pf-local-SECRET-ab12cd"  # named only by a providers file's api_key_env (no key-like variable name)
URL_USER, URL_PASS = "leakuser", "URLPASS-9x8y7z"  # http://user:password@host/v1
QUERY_KEY = "QUERYSECRET-4q4q4q"  # http://host/v1?key=…
BASIC = base64.b64encode(f"{URL_USER}:{URL_PASS}".encode()).decode()  # the Basic header a client makes of the URL
SECRETS = (LM_KEY, FILE_KEY, URL_PASS, QUERY_KEY, BASIC)

CASES = TWO_CASES
PAIRS = [{"id": f"p{i}", "lang": "en", "category": "c", "gold": {"text": g, "subject": "user"},
          "pred": {"text": p, "subject": "user"}, "same": g == p}
         for i, (g, p) in enumerate([("The user lives in Berlin.", "The user lives in Berlin."),
                                     ("The user lives in Berlin.", "The user lives in Paris.")])]


def _echo_server(offline_url: str):
    """/failall/...: every request refused with 401; /flaky/...: the offline server's replies, but every third
    chat call and every third embedding call after the first (the embedder's dimension probe) get a 500. Each
    error body echoes the Authorization header and the request line, as careless providers do."""
    counts = {"chat": 0, "embed": 0}
    lock = threading.Lock()

    class Handler(JSONHandler):  # evals.arms.serve's JSON replies (send_bytes)
        def do_POST(self) -> None:  # noqa: N802 (the base class's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            route = "embed" if "/embeddings" in self.path else "chat"
            with lock:
                counts[route] += 1
                n = counts[route]
            if "/flaky/" in self.path and not (n % 3 == 0 and not (route == "embed" and n == 1)):
                upstream = offline_url.rsplit("/v1", 1)[0] + self.path[self.path.index("/flaky/") + 6:].split("?")[0]
                headers = {"Content-Type": "application/json"}
                if self.headers.get(SITE_HEADER):
                    headers[SITE_HEADER] = self.headers[SITE_HEADER]
                request = urllib.request.Request(upstream, data=body, headers=headers)
                try:
                    with urllib.request.urlopen(request, timeout=30) as reply:
                        self._send(reply.status, reply.read())
                except urllib.error.HTTPError as exc:
                    self._send(exc.code, exc.read())
                return
            auth = self.headers.get("Authorization") or ""
            message = (f"Incorrect API key provided: {auth.split(' ', 1)[-1]} (header {auth!r}); request "
                       f"{self.command} {self.path}")
            self._send(401 if "/failall/" in self.path else 500,
                       json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                             "code": "invalid_api_key"}}).encode())

        def _send(self, status: int, data: bytes) -> None:
            self.send_bytes(status, data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, counts


def _texts(path: Path) -> list[bytes]:
    """What a file holds, as bytes to search: its raw bytes, and a Parquet file's cells as text."""
    data = [path.read_bytes()]
    if path.suffix == ".parquet":
        data.append(repr(pq.read_table(path).to_pylist()).encode())
    return data


def _leaks(root: Path, inputs: set[Path]) -> list[tuple[str, str]]:
    """(file, secret) for every secret in a file's content or in its path (a directory named after a spec)."""
    return [(str(p.relative_to(root)), s) for p in sorted(root.rglob("*")) if p.is_file() and p not in inputs
            for s in SECRETS for data in [str(p.relative_to(root)).encode(), *_texts(p)] if s.encode() in data]


def _inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The dataset, the dev split and the labelled pairs the subcommands read."""
    dataset, dev, pairs = tmp_path / "d.jsonl", tmp_path / "dev.jsonl", tmp_path / "pairs.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    dev.write_text(json.dumps(CASES[1]) + "\n", encoding="utf-8")
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS), encoding="utf-8")
    return dataset, dev, pairs


@pytest.mark.slow
def test_no_planted_key_reaches_any_file_or_the_terminal_of_any_subcommand(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", LM_KEY)
    monkeypatch.setenv("HYMEM_LEAKTEST_CRED", FILE_KEY)
    monkeypatch.chdir(tmp_path)
    dataset, dev, pairs = _inputs(tmp_path)
    with start_server() as offline:
        httpd, counts = _echo_server(offline.url)
        try:
            port = httpd.server_address[1]
            flaky = f"http://127.0.0.1:{port}/flaky/v1"
            flaky_with_password = f"http://{URL_USER}:{URL_PASS}@127.0.0.1:{port}/flaky/v1"
            failing = f"http://127.0.0.1:{port}/failall/v1"
            judge = f"llm:openai/judge@{failing}?key={QUERY_KEY}"
            providers = tmp_path / "providers.toml"
            providers.write_text(f'[[provider]]\nname = "filed"\nmodel = "openai/offline"\n'
                                 f'api_base = "http://{URL_USER}:{URL_PASS}@127.0.0.1:{port}/failall/v1"\n'
                                 'api_key_env = "HYMEM_LEAKTEST_CRED"\n', encoding="utf-8")
            inputs = {dataset, dev, pairs, providers}
            common = ["--dataset", str(dataset), "--faults", "none", "--no-progress"]
            codes = {
                # the LM, and the embedder behind a URL with credentials, failing now and then; a judge that fails
                "run a": main(["run", *common, "--lm", f"openai/offline@{flaky}",
                               "--embedder", f"openai/hash@{flaky_with_password}",
                               "--matcher", judge, "--out", str(tmp_path / "a")]),
                # a providers-file provider (its endpoint with credentials) whose every call is refused
                "run b": main(["run", *common, "--providers", str(providers), "--lm", "filed", "--embedder", "hash",
                               "--out", str(tmp_path / "b")]),
                # an embedder whose dimension probe is refused: the run stops at once, saying why
                "run c": main(["run", *common, "--embedder", f"openai/hash@{failing}", "--out", str(tmp_path / "c")]),
                "show": main(["show", str(tmp_path / "a")]),
                "compare": main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp")]),
                "gate": main(["gate", "--baseline", str(tmp_path / "a"), "--current", str(tmp_path / "b"),
                              "--allow-different-inputs", "--junit", str(tmp_path / "g" / "gate.xml"),
                              "--summary", str(tmp_path / "g" / "gate.md")]),
                "matcher eval": main(["matcher", "eval", "--matcher", judge, "--pairs", str(pairs),
                                      "--out", str(tmp_path / "m")]),
                "tune": main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", str(dataset),
                              "--dev", str(dev), "--lm", f"openai/offline@{failing}",
                              "--matcher", "text", "--out", str(tmp_path / "t")]),
            }
        finally:
            httpd.shutdown()
            httpd.server_close()
    printed = capsys.readouterr()
    assert counts["chat"] > 3 and counts["embed"] > 3, counts  # the providers were called, and failed
    assert codes["run c"] == 2 and "dimension probe" in printed.err
    assert all(code in (0, 1) for name, code in codes.items() if name != "run c"), codes
    # the errors were recorded (with the echoed text) where they always are: the harness kept them, redacted
    assert "[REDACTED]" in (tmp_path / "a" / "units.jsonl").read_text(encoding="utf-8")
    assert "[REDACTED]" in (tmp_path / "t" / "tune_manifest.json").read_text(encoding="utf-8")
    errors = pq.read_table(tmp_path / "m" / "attempts.parquet").column("error").to_pylist()
    assert any(e and "Incorrect API key provided" in e for e in errors)
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p not in inputs]
    assert {"tune_manifest.json", "attempts.parquet", "cases.parquet", "summary.md", "manifest.json", "gate.md",
            "compare.md", "units.jsonl", "responses.sqlite"} <= {p.name for p in written}
    assert list((tmp_path / "b" / "rescored").iterdir())  # the gate re-scored b with a's judge: a path from a spec
    assert _leaks(tmp_path, inputs) == []
    terminal = printed.out + printed.err
    assert [s for s in SECRETS if s in terminal] == []


def test_tune_and_matcher_eval_keep_the_echoed_errors_without_the_key(tmp_path, monkeypatch, capsys):
    """The two writers that wrote keys verbatim (tune_manifest.json's error samples, matcher eval's
    attempts.parquet), with a key shaped like nothing (only configuration says it is one) and `Bearer sk-…`."""
    monkeypatch.setenv("OPENAI_API_KEY", LM_KEY)
    dataset, dev, pairs = _inputs(tmp_path)
    httpd, counts = _echo_server("http://127.0.0.1:9/v1")  # /failall/ only: never forwarded
    try:
        failing = f"http://127.0.0.1:{httpd.server_address[1]}/failall/v1"
        main(["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", str(dataset), "--dev", str(dev),
              "--lm", f"openai/offline@{failing}", "--matcher", "text", "--out", str(tmp_path / "t")])
        monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + LM_KEY)  # sent as `Bearer sk-proj-…`
        main(["matcher", "eval", "--matcher", f"llm:openai/judge@{failing}?key={QUERY_KEY}", "--pairs", str(pairs),
              "--out", str(tmp_path / "m")])
    finally:
        httpd.shutdown()
        httpd.server_close()
    printed = capsys.readouterr()
    assert counts["chat"] > 0
    manifest = (tmp_path / "t" / "tune_manifest.json").read_text(encoding="utf-8")
    assert "Incorrect API key provided: [REDACTED]" in manifest
    errors = [e for e in pq.read_table(tmp_path / "m" / "attempts.parquet").column("error").to_pylist() if e]
    assert errors and all("Incorrect API key provided: [REDACTED]" in e for e in errors)
    assert _leaks(tmp_path, {dataset, dev, pairs}) == []
    assert [s for s in SECRETS if s in printed.out + printed.err] == []


def test_url_credentials_are_redacted_by_shape_and_ordinary_paths_are_not_taken_for_keys():
    from evals.core.redact import redact_text, redact_url, register_environment

    assert redact_url("openai/m@http://bob:pw@127.0.0.1:8/v1?key=abc&x=1") == \
        "openai/m@http://[REDACTED]@127.0.0.1:8/v1?key=[REDACTED]&x=1"
    register_environment({"SSH_KEY_DIR": "/home/someone/keys", "TOKENIZERS_PARALLELISM": "false",
                          "SOME_SERVICE_TOKEN": "tok-9f8e7d6c5b4a", "MY_BASE_URL": "http://u:hunter2-long@h/v1"})
    assert redact_text("/home/someone/keys false tok-9f8e7d6c5b4a hunter2-long") == \
        "/home/someone/keys false [REDACTED] [REDACTED]"


# Writers that are not the redaction point, each with why it may write directly. Anything else that writes a file
# must go through evals.core.redact (write_text, write_parquet) or evals.record (which redacts).
DIRECT_WRITERS = {
    "evals/core/redact.py": "the redaction point itself",
    "evals/record/_rundir.py": "redacts every manifest, unit line and table before writing it",
    "evals/record/_journal.py": "redacts every journal line (a unit's finished writes) as _rundir does a unit line",
    "evals/arms/proxy.py": "redacts each fault record before appending it",
    "evals/report/plots.py": "PNG images of tables already redacted",
    "evals/run/runner.py": "an empty probe file proving --out is writable",
    "evals/bench/engine.py": "a developer benchmark's own synthetic data and timings",
    "evals/bench/identity.py": "a developer benchmark's timings, to stdout",
    "evals/bench/overhead.py": "a developer benchmark's timings",
    "evals/bench/e5_threads.py": "a developer benchmark's own sample texts, to a temporary directory its subprocesses read",
    "evals/bench/same_records.py": "a developer tool's table of the bundled labelled pairs' decisions (no key reaches it)",
    "evals/record/catalogue.py": "refreshes the README's metric table (a developer tool)",
    "evals/report/view.py": "every value is redacted before it is rendered (redacting the page as text would break the "
                     "JSON inside it); the planted-key test greps report.html too",
    "evals/arms/local_server.py": "the local llama.cpp server's own log, which no key reaches (it is called without one)",
}


def test_every_file_writer_goes_through_the_redaction_point():
    import re

    root = Path(__file__).resolve().parents[2]
    writes = re.compile(r"""\.write_text\(|\.write_bytes\(|\.to_parquet\(|pq\.write_table\(|json\.dump\(|\.savefig\("""
                        r"""|\.to_csv\(|\.to_json\(|open\([^)]*["'](?:w|a|wb|ab|x)["']""")
    direct = {str(p.relative_to(root)) for p in (root / "evals").rglob("*.py")
              if any(writes.search(line) and not line.lstrip().startswith("#")
                     for line in p.read_text(encoding="utf-8").splitlines())}
    assert direct <= set(DIRECT_WRITERS), sorted(direct - set(DIRECT_WRITERS))
