"""No subcommand overwrites a file it did not create unless told to with --force: an existing output file is
refused in one line, exit 2, before any work, and left as it was; --force overwrites it. A file where a directory
goes (or the reverse) is refused even with --force, without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evals.cli.main import main
from tests.conftest import TWO_CASES

CASES = TWO_CASES
PAIRS = [{"id": f"p{i}", "lang": "en", "category": "c", "gold": {"text": g, "subject": "user"},
          "pred": {"text": p, "subject": "user"}, "same": g == p}
         for i, (g, p) in enumerate([("The user lives in Berlin.", "The user lives in Berlin."),
                                     ("The user lives in Berlin.", "The user lives in Paris."),
                                     ("The user likes tea.", "The user likes tea."),
                                     ("The user is a nurse.", "The user is a doctor.")])]
MINE = "my labelled pairs: 3,242 lines of work\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    dataset = root / "d.jsonl"
    dataset.write_text("".join(json.dumps(c) + "\n" for c in CASES), encoding="utf-8")
    pairs = root / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS), encoding="utf-8")
    out = {"dataset": dataset, "pairs": pairs}
    for name, lm in (("a", "offline"), ("b", "oracle")):
        out[name] = root / name
        assert main(["run", "--dataset", str(dataset), "--lm", lm, "--embedder", "hash", "--faults", "none",
                     "--matcher", "text", "--out", str(out[name]), "--no-progress"]) == 0
    return out


def _commands(runs: dict[str, Path], target: Path) -> dict[str, tuple[list[str], Path]]:
    """Each command with an output path, and the file an earlier one (or the user) left there."""
    return {
        "matcher sample": (["matcher", "sample", str(runs["a"]), "--out", str(target / "pairs.jsonl"), "--n", "3",
                            "--matcher", "text"], target / "pairs.jsonl"),
        "matcher eval": (["matcher", "eval", "--matcher", "text", "--pairs", str(runs["pairs"]), "--out", str(target)],
                         target / "agreement.parquet"),
        "matcher fit": (["matcher", "fit", "--pairs", str(runs["pairs"]), "--out", str(target / "params.json")],
                        target / "params.json"),
        "compare": (["compare", str(runs["a"]), str(runs["b"]), "--out", str(target)], target / "compare.md"),
        "datasets audit": (["datasets", "audit", str(runs["dataset"]), "--out", str(target)], target / "audit.json"),
        "gate --junit": (["gate", "--baseline", str(runs["a"]), "--current", str(runs["b"]),
                          "--junit", str(target / "junit.xml"), "--summary", str(target / "gate.md")],
                         target / "junit.xml"),
        "gate --summary": (["gate", "--baseline", str(runs["a"]), "--current", str(runs["b"]),
                            "--junit", str(target / "junit.xml"), "--summary", str(target / "gate.md")],
                           target / "gate.md"),
        "tune": (["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", str(runs["dataset"]),
                  "--out", str(target)], target / "train.jsonl"),
    }


COMMANDS = ["matcher sample", "matcher eval", "matcher fit", "compare", "datasets audit", "gate --junit",
            "gate --summary", "tune"]


@pytest.mark.parametrize("command", COMMANDS)
def test_an_existing_output_file_is_refused_and_kept_unless_force(runs, tmp_path, capsys, command):
    argv, existing = _commands(runs, tmp_path / "out")[command]
    existing.parent.mkdir(parents=True, exist_ok=True)
    existing.write_text(MINE, encoding="utf-8")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "already" in err and "--force" in err and len(err.strip().splitlines()) == 1, err
    assert existing.read_text(encoding="utf-8") == MINE  # nothing lost
    if command in ("matcher fit", "tune"):  # slow to run through; the refusal is what they share with the rest
        return
    assert main([*argv, "--force"]) in (0, 1)  # 1: a gate that found a regression; the files are written either way
    assert existing.read_text(encoding="utf-8", errors="replace") != MINE


@pytest.mark.parametrize("command", ["matcher eval", "compare", "datasets audit", "tune"])
def test_a_file_where_an_output_directory_goes_is_refused_even_with_force(runs, tmp_path, capsys, command):
    argv, _ = _commands(runs, tmp_path / "a-file")[command]
    (tmp_path / "a-file").write_text(MINE, encoding="utf-8")
    assert main([*argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert "a file of that name is in the way" in err and "Traceback" not in err
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == MINE


def test_the_defaults_inside_a_run_directory_are_the_run_s_own_and_rewritten(runs, capsys):
    """gate.md/gate.xml in CURRENT and compare.* in the last run are derived from the run's records: a second
    gate or compare rewrites them (no --force), as CI does on every push."""
    for _ in range(2):
        assert main(["gate", "--baseline", str(runs["a"]), "--current", str(runs["b"])]) in (0, 1)
        assert main(["compare", str(runs["a"]), str(runs["b"])]) == 0
    assert (runs["b"] / "gate.md").is_file() and (runs["b"] / "compare.md").is_file()
