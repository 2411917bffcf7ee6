"""Pairs to label from a finished run: how far the matcher can be trusted on this provider's own phrasing.

The bundled pairs were written by hand in imitation of extractors' styles; a real model's memories can fall
outside them. `hymem-eval matcher sample RUN --out FILE` draws (gold fact, predicted memory) pairs from the
run's `facts.parquet` in the labelled-pairs form with `"same": null`; a person sets each to true or false,
and `hymem-eval matcher eval --pairs FILE` measures the matcher on them.

Two kinds of pair, named in `category` so `matcher eval` reports them apart:
- `matched`: a gold fact and the memory the matcher assigned to it (agreement here is the matches' precision);
- `rejected`: a gold fact left unmatched and the unmatched memory of the same case the matcher scored
  closest to it (agreement here says how often a rejection was right: the misses).
Pairs are drawn uniformly, without replacement, from the distinct candidates (seeded, so reproducible).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evals.core.redact import write_text
from evals.core.subject_reading import read_subject
from evals.scoring.checks import is_chinese
from evals.scoring.choose_matcher import local_spec, make_matcher

_COLUMNS = ("provider", "dataset", "case_id", "stage", "gold_text", "gold_subject", "pred_text", "pred_subject",
            "matched", "matcher", "epoch")


class SampleError(ValueError):
    """A run whose facts cannot be sampled (exit 2); the message names the file and what is wrong."""


@dataclass(frozen=True)
class Candidate:
    category: str  # matched | rejected
    gold_text: str
    gold_subject: str
    pred_text: str
    pred_subject: str
    where: str  # provider/dataset/case, for the id


def _subject(value: object, text: str) -> str:
    """The row's subject, or (a system that records none, as mem0) the one the sentence names; no subject is
    the user's, as the engine files it."""
    if isinstance(value, str) and value.strip():
        return value
    return read_subject(text) or "user"


def candidates(facts, scores: Callable[[list[str], list[str]], np.ndarray]) -> list[Candidate]:
    """Matched pairs, and for each unmatched gold fact the closest unmatched memory of its case and epoch.

    `facts`: the rows of one stage; `scores(gold, pred)` the matcher's [len(gold), len(pred)] scores."""
    out: list[Candidate] = []
    for key, rows in facts.groupby(["provider", "dataset", "case_id", "epoch"], sort=True, dropna=False):
        where = "/".join(str(k) for k in key[:3])
        has_gold, has_pred = rows["gold_text"].notna(), rows["pred_text"].notna()
        for r in rows[has_gold & has_pred & rows["matched"].fillna(False).astype(bool)].itertuples():
            out.append(Candidate("matched", r.gold_text, _subject(r.gold_subject, r.gold_text), r.pred_text,
                                 _subject(r.pred_subject, r.pred_text), where))
        lone_gold, lone_pred = rows[has_gold & ~has_pred], rows[~has_gold & has_pred]
        if lone_gold.empty or lone_pred.empty:
            continue
        gold, pred = lone_gold["gold_text"].tolist(), lone_pred["pred_text"].tolist()
        best = np.asarray(scores(gold, pred)).argmax(axis=1)
        for g, j in zip(lone_gold.itertuples(), best, strict=True):
            p = lone_pred.iloc[int(j)]
            out.append(Candidate("rejected", g.gold_text, _subject(g.gold_subject, g.gold_text), p["pred_text"],
                                 _subject(p["pred_subject"], p["pred_text"]), where))
    distinct: dict[tuple[str, str, str, str], Candidate] = {}
    for c in out:
        distinct.setdefault((c.gold_text, c.gold_subject, c.pred_text, c.pred_subject), c)
    return list(distinct.values())


def read_facts(run_dir: Path, stage: str, provider: str | None):
    """The run's fact rows of one stage (and provider)."""
    import pandas as pd

    path = Path(run_dir) / "facts.parquet"
    if not path.is_file():
        raise SampleError(f"{path}: not found (is {run_dir} a finished run's directory?)")
    try:
        facts = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise SampleError(f"{path}: cannot read: {exc}") from exc
    missing = [c for c in _COLUMNS if c not in facts.columns]
    if missing:
        raise SampleError(f"{path}: missing columns {', '.join(missing)}")
    stages = sorted(facts["stage"].dropna().unique())
    if stage not in stages:
        raise SampleError(f"--stage: {stage!r} is not in {path} (it has {', '.join(stages) or 'no rows'})")
    facts = facts[facts["stage"] == stage]
    if provider is not None:
        providers = sorted(facts["provider"].dropna().unique())
        if provider not in providers:
            raise SampleError(f"--provider: {provider!r} is not in {path} (it has {', '.join(providers)})")
        facts = facts[facts["provider"] == provider]
    return facts


def sample_pairs(run_dir: Path, out: Path, *, n: int = 200, seed: int = 0, stage: str = "stored",
                 provider: str | None = None, matcher: str | None = None) -> str:
    """Write up to n pairs to label into `out`; returns the report printed to the user."""
    if n < 1:
        raise SampleError(f"--n: must be at least 1, got {n}")
    facts = read_facts(run_dir, stage, provider)
    spec = matcher or _run_matcher(facts)
    judge = make_matcher(spec)

    def scores(gold: list[str], pred: list[str]) -> np.ndarray:
        judge.prepare(gold, pred)
        return judge.scores(gold, pred)

    pool = candidates(facts, scores)
    if not pool:
        raise SampleError(f"{Path(run_dir) / 'facts.parquet'}: no gold fact with a predicted memory to pair at "
                          f"stage {stage!r}")
    chosen = _stratified(pool, n, seed)
    run_id = Path(run_dir).resolve().name
    lines = []
    for i in chosen:
        c = pool[i]
        digest = hashlib.sha256("\x1f".join((c.where, c.gold_text, c.gold_subject, c.pred_text,
                                              c.pred_subject)).encode()).hexdigest()[:12]
        lang = "zh" if is_chinese(c.gold_text + c.pred_text) else "en"
        lines.append(json.dumps({"id": f"{run_id}-{digest}", "lang": lang, "category": c.category,
                                 "gold": {"text": c.gold_text, "subject": c.gold_subject},
                                 "pred": {"text": c.pred_text, "subject": c.pred_subject}, "same": None},
                                ensure_ascii=False))
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, "\n".join(lines) + "\n")  # evals.core.redact: redacted, whole-or-not
    except OSError as exc:
        raise SampleError(f"--out {out}: cannot write: {exc.strerror or exc}") from exc
    kinds = {k: sum(pool[i].category == k for i in chosen) for k in ("matched", "rejected")}
    return (f"{len(chosen)} pairs of {len(pool)} distinct candidates ({kinds['matched']} matched, "
            f"{kinds['rejected']} rejected; stage {stage}, matcher {spec}) written to {out}\n"
            f"Label each: set \"same\" to true when the memory states the gold fact about the same subject, else false "
            f"(the rules: datasets/matcher/README.md). Then: hymem-eval matcher eval --pairs {out} --out DIR\n")


def _stratified(pool: list[Candidate], n: int, seed: int) -> list[int]:
    """Up to n indices into `pool`, half matched and half rejected where both have enough (the rest from the other
    kind): `matcher eval` reports the two apart, and a uniform draw from a run that matches most gold facts can
    hold no rejected pair at all, so the matcher's misses would go unmeasured."""
    rng = np.random.default_rng(seed)
    kinds = {k: [i for i, c in enumerate(pool) if c.category == k] for k in ("matched", "rejected")}
    want = min(n, len(pool))
    rejected = min(len(kinds["rejected"]), max(want // 2, want - len(kinds["matched"])))
    take = {"rejected": rejected, "matched": want - rejected}
    chosen = [int(i) for k, size in take.items() if size
              for i in rng.choice(kinds[k], size=size, replace=False)]
    return sorted(chosen)


def _run_matcher(facts) -> str | None:
    """The run's own matcher when it is a local one; an LLM judge is not called again to pick candidates."""
    specs = sorted(facts["matcher"].dropna().unique())
    return specs[0] if len(specs) == 1 and local_spec(specs[0]) else None


__all__ = ["Candidate", "SampleError", "candidates", "read_facts", "sample_pairs"]
