"""The regression gate on real runs: the baseline passes against itself, planted attribution errors fail."""

from __future__ import annotations

from pathlib import Path
from xml.etree import ElementTree

import pytest

from evals.cli import main
from evals.runner import RunConfig, run_eval

DATASET = "datasets/chat_en.jsonl"


def _run(out: Path) -> Path:
    return run_eval(RunConfig(datasets=[DATASET], embedder="hash", faults="random:0.05", seed=1, out=out,
                              progress=False)).run_dir


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("gate") / "baseline")


def test_the_baseline_passes_its_own_gate(baseline, tmp_path):
    current = _run(tmp_path / "current")
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 0
    cases = ElementTree.parse(current / "gate.xml").getroot().iter("testcase")
    assert all(case.find("failure") is None for case in cases)


def test_planted_attribution_errors_fail_the_gate(baseline, tmp_path, monkeypatch, capsys):
    """A bug that files every named person's fact under the user."""
    import hymem.client as client_module

    real = client_module._fact_from_model

    def everything_is_the_users(fact, kind="fact"):
        new = real(fact, kind)
        if new.subject not in ("user", "assistant"):
            new.subject = "user"
        return new

    monkeypatch.setattr(client_module, "_fact_from_model", everything_is_the_users)
    current = _run(tmp_path / "current")
    capsys.readouterr()
    assert main(["gate", "--baseline", str(baseline), "--current", str(current)]) == 1
    report = (current / "gate.md").read_text()
    assert "subject_accuracy" in report and "third_party_to_user_rate" in report
    failed = {case.get("name") for case in ElementTree.parse(current / "gate.xml").getroot().iter("testcase")
              if case.find("failure") is not None}
    assert any("subject_accuracy" in name for name in failed)
    assert not any("rollback_correct_rate" in name for name in failed)  # writes are still all-or-nothing
