"""Input errors answer before anything heavy is imported: a bad flag, a missing or malformed dataset file, a bad
fault plan or a missing run directory exits 2 with one line, and neither dspy, pandas, scipy nor the model's
runtime was imported (their import is what took an error 10-20 s on a loaded machine; BENCHMARKS.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("dspy", "pandas", "scipy", "faiss", "litellm", "tokenizers", "torch", "evals.run.runner")


def _answer(tmp_path: Path, *argv: str) -> tuple[int, str, list[str]]:
    """Run the CLI in a fresh interpreter; return its exit code, stderr and the heavy modules it imported."""
    code = ("import sys, json\nfrom evals.cli.main import main\ntry:\n    rc = main(sys.argv[1:])\n"
            "except SystemExit as exc:\n    rc = exc.code\n"
            f"print(json.dumps([rc, [m for m in {HEAVY!r} if m in sys.modules]]))")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    rc, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    return rc, done.stderr, heavy


@pytest.mark.parametrize("argv, message", [
    (["run", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
    (["run", "--dataset", "missing.jsonl"], "missing.jsonl: no such file or directory"),
    (["run", "--dataset", "bad.jsonl"], "bad.jsonl:1: lang: Field required"),
    (["run", "--faults", "sweep:slow"], "use none, sweep, sweep:fast or random:RATE"),
    (["gate", "--baseline", "nowhere", "--current", "nowhere"], "nowhere: no such run directory"),
    (["run", "--embedder", "bogus"], "unknown embedder 'bogus'"),
    (["run", "--matcher", "bogus"], "unknown spec 'bogus'"),
    (["run", "--matcher", "llm:"], "unknown spec 'llm:'"),
    (["run", "--program", "/missing"], "/missing: no program.json here"),
    (["run", "--dataset", "deep.jsonl"], "deep.jsonl:1: record: nested deeper than 64 levels"),
    (["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", "bad.jsonl", "--out", "t"],
     "bad.jsonl:1: lang: Field required"),
    (["matcher", "eval", "--matcher", "llm:", "--out", "m"], "unknown spec 'llm:'"),
    (["compare", "nowhere", "--matcher", "bogus"], "unknown spec 'bogus'"),
])
def test_an_input_error_answers_before_the_heavy_imports(tmp_path, argv, message):
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "x", "turns": 3}) + "\n", encoding="utf-8")
    (tmp_path / "deep.jsonl").write_text('{"id": "a", "meta": ' + "[" * 5000 + "]" * 5000 + "}\n", encoding="utf-8")
    rc, stderr, heavy = _answer(tmp_path, *argv)
    assert rc == 2
    assert message in stderr and "Traceback" not in stderr
    assert heavy == []


def test_the_clis_matcher_help_is_the_matchers_own():
    from evals.cli.early_checks import MATCHER_SPECS_HELP
    from evals.scoring.choose_matcher import SPECS_HELP

    assert MATCHER_SPECS_HELP == SPECS_HELP


def test_every_commands_help_renders():
    """`--help` of every command and subcommand prints (a bare `%` in a help string made `matcher --help` a
    traceback)."""
    import argparse

    from evals.cli.main import build_parser

    def walk(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return [parser, *(p for s in subs for child in s.choices.values() for p in walk(child))]

    parsers = walk(build_parser())
    assert len(parsers) > 10
    for parser in parsers:
        assert parser.format_help()
