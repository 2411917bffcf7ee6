"""`hymem-eval matcher sample`: pairs to label drawn from a finished run, in the labelled-pairs form, that
`matcher eval --pairs` refuses until each is labelled and then measures, matched and rejected apart."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evals.cli.main import main
from evals.scoring.pairs import Pair

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
# Cases of the bundled suites where the offline model misses a gold fact and words a memory its own way (a rejected
# pair to draw), and cases it gets right (matched pairs): a fifth of the suites, enough of both kinds for every draw.
CASES = {"chat_en": ["en-001", "en-002", "en-003", "en-050-", "en-057-", "en-061-"],
         "chat_zh": ["zh-001", "zh-002", "zh-032-", "zh-036-", "zh-040-", "zh-044-"],
         "working": ["work-001-", "work-002-", "work-003-", "work-004-", "work-005-", "work-007-"]}


@pytest.fixture(scope="module")
def noisy_run(tmp_path_factory) -> Path:
    """The offline model on those cases: facts matched, and facts it misses beside memories it words its own way."""
    tmp = tmp_path_factory.mktemp("sample")
    args = []
    for suite, prefixes in CASES.items():
        lines = [line for line in (DATASETS / f"{suite}.jsonl").read_text(encoding="utf-8").splitlines()
                 if line.strip() and json.loads(line)["id"].startswith(tuple(prefixes))]
        assert len(lines) == len(prefixes)
        (tmp / f"{suite}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        args += ["--dataset", str(tmp / f"{suite}.jsonl")]
    out = tmp / "run"
    assert main(["run", *args, "--embedder", "hash", "--faults", "none", "--matcher", "text", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_sampled_pairs_come_from_the_run_in_the_pairs_form_and_are_reproducible(noisy_run, tmp_path, capsys):
    first, again, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    assert main(["matcher", "sample", str(noisy_run), "--out", str(first), "--n", "25", "--matcher", "text"]) == 0
    assert "Label each" in capsys.readouterr().out
    assert main(["matcher", "sample", str(noisy_run), "--out", str(again), "--n", "25", "--matcher", "text"]) == 0
    assert first.read_text(encoding="utf-8") == again.read_text(encoding="utf-8")
    rows = _lines(first)
    assert 0 < len(rows) <= 25 and len({r["id"] for r in rows}) == len(rows)
    assert {r["category"] for r in rows} == {"matched", "rejected"}
    facts = pd.read_parquet(noisy_run / "facts.parquet")
    stored = facts[facts["stage"] == "stored"]
    for r in rows:
        assert r["same"] is None
        Pair.model_validate({**r, "same": True})  # exactly the labelled form once labelled
        assert r["gold"]["text"] in set(stored["gold_text"].dropna())
        assert r["pred"]["text"] in set(stored["pred_text"].dropna())
        if r["category"] == "matched":  # the memory the run matched to this gold fact
            hit = stored[(stored["gold_text"] == r["gold"]["text"]) & (stored["pred_text"] == r["pred"]["text"])]
            assert not hit.empty and hit["matched"].all()
        else:  # a gold fact the run left unmatched, and an unmatched memory
            assert stored[(stored["gold_text"] == r["gold"]["text"]) & stored["pred_text"].isna()].shape[0] > 0
            assert stored[(stored["pred_text"] == r["pred"]["text"]) & stored["gold_text"].isna()].shape[0] > 0
    assert main(["matcher", "sample", str(noisy_run), "--out", str(other), "--n", "5", "--seed", "9",
                 "--matcher", "text"]) == 0
    assert len(_lines(other)) == 5


def test_unlabelled_pairs_are_refused_and_labelled_ones_are_measured_by_category(noisy_run, tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    assert main(["matcher", "sample", str(noisy_run), "--out", str(path), "--n", "40", "--matcher", "text"]) == 0
    rows = _lines(path)
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(path), "--out", str(tmp_path / "e")]) == 2
    assert f"{path}:1: same: not labelled yet" in capsys.readouterr().err
    for r in rows:  # a labeller who says "same" exactly when the two texts are the same sentence
        r["same"] = r["gold"]["text"] == r["pred"]["text"] and r["gold"]["subject"] == r["pred"]["subject"]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(path), "--out", str(tmp_path / "e")]) == 0
    agreement = pd.read_parquet(tmp_path / "e" / "agreement.parquet")
    cats = set(agreement[(agreement["metric"] == "agreement") & (agreement["lang"] == "all")]["category"])
    assert {"matched", "rejected", "all"} <= cats


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n: must be at least 1"),
    (["--stage", "final"], "--stage: 'final' is not in"),
    (["--provider", "gpt-9"], "--provider: 'gpt-9' is not in"),
])
def test_bad_options_exit_2_with_what_is_wrong(noisy_run, tmp_path, capsys, args, message):
    assert main(["matcher", "sample", str(noisy_run), "--out", str(tmp_path / "x.jsonl"), "--matcher", "text",
                 *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_an_out_that_cannot_be_written_exits_2(noisy_run, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    assert main(["matcher", "sample", str(noisy_run), "--out", str(tmp_path / "file" / "x.jsonl"), "--matcher",
                 "text"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "cannot write" in err and "Traceback" not in err


def test_a_directory_that_is_not_a_run_exits_2(tmp_path, capsys):
    assert main(["matcher", "sample", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "facts.parquet: not found" in capsys.readouterr().err


def test_a_rejected_pair_never_crosses_a_case_epoch_or_provider():
    """The closest unmatched memory is looked for only in the gold fact's own case, epoch and provider."""
    from evals.scoring.pair_sample import candidates

    def row(provider, case, epoch, gold=None, pred=None, matched=False):
        return {"provider": provider, "dataset": "d", "case_id": case, "stage": "stored", "epoch": epoch,
                "gold_text": gold, "gold_subject": "user" if gold else None, "pred_text": pred,
                "pred_subject": None, "matched": matched, "matcher": "text"}

    facts = pd.DataFrame([
        row("a", "c1", 0, gold="The user lives in Oslo."),
        row("a", "c1", 0, pred="The user moved to Oslo in May."),
        row("a", "c2", 0, pred="The user lives in Oslo."),  # same words, another case
        row("a", "c1", 1, pred="The user lives in Oslo."),  # same case, another epoch
        row("b", "c1", 0, pred="The user lives in Oslo."),  # same case, another provider
        row("a", "c1", 0, gold="John is a nurse.", pred="John is a nurse.", matched=True),
    ])

    def word_overlap(gold, pred):
        return np.array([[len(set(g.split()) & set(p.split())) for p in pred] for g in gold], dtype=float)

    found = {(c.category, c.gold_text, c.pred_text, c.pred_subject) for c in candidates(facts, word_overlap)}
    assert found == {("rejected", "The user lives in Oslo.", "The user moved to Oslo in May.", "user"),
                     ("matched", "John is a nurse.", "John is a nurse.", "John")}


def test_a_sample_holds_matched_and_rejected_pairs_half_and_half(noisy_run, tmp_path):
    """A run that matches most gold facts still yields its misses to label: the draw is split between the kinds."""
    out = tmp_path / "s.jsonl"
    assert main(["matcher", "sample", str(noisy_run), "--out", str(out), "--n", "10", "--matcher", "text"]) == 0
    kinds = [r["category"] for r in _lines(out)]
    assert kinds.count("matched") == 5 and kinds.count("rejected") == 5
