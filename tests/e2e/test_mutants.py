"""The mutation check (`nox -s mutants`): every planted engine bug in tests/mutants/ must be caught.

CI runs the fast part: every mutant still applies to today's engine, and two of them, on one small case,
are caught by a run plus the gate (about a minute on an idle 2-core machine).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

MUTANTS = Path(__file__).parents[1] / "mutants"
_spec = importlib.util.spec_from_file_location("mutate", MUTANTS / "mutate.py")
mutate = importlib.util.module_from_spec(_spec)
sys.modules["mutate"] = mutate  # dataclasses look their module up while the class is built
_spec.loader.exec_module(mutate)


@pytest.mark.parametrize("mutant", mutate.load_mutants(), ids=lambda m: m.name)
def test_every_mutant_applies_to_todays_engine_exactly_once(mutant, tmp_path):
    root = tmp_path / "repo"
    for name in {p["file"].split("/")[0] for p in mutant.patches}:
        shutil.copytree(mutate.REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    mutate.apply(mutant, root)  # raises MutantError when a search text is missing or ambiguous
    for patch in mutant.patches:
        assert patch["replace"] in (root / patch["file"]).read_text(encoding="utf-8")


def test_a_mutant_whose_search_text_is_gone_fails_loudly(tmp_path):
    (tmp_path / "hymem").mkdir()
    (tmp_path / "hymem" / "x.py").write_text("print(1)\n")
    stale = mutate.Mutant("stale", "no longer applies", [{"file": "hymem/x.py", "search": "print(2)", "replace": ""}])
    with pytest.raises(mutate.MutantError, match="occurs 0 times"):
        mutate.apply(stale, tmp_path)


@pytest.mark.mutants
@pytest.mark.ci_heavy  # a run and a gate per planted bug (issue 35: run by `nox -s heavy`)
def test_planted_bugs_are_caught_by_a_run_and_the_gate(capsys):
    code = mutate.main(["--only", "tool-name-as-speaker", "--only", "request-id-written-twice",
                        "--cases", "en-012-tool-search-chef", "--faults", "none", "--embedder", "hash"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tool-name-as-speaker: CAUGHT" in out and "PROMPT_LABEL_WRONG" in out
    assert "request-id-written-twice: CAUGHT" in out and "DOUBLE_WRITE" in out
