"""How far a matcher can be trusted: its agreement with hand-labelled pairs, with bootstrap CIs.

`hymem-eval matcher eval` writes `agreement.parquet` (one row per split × lang × category × metric);
every run's manifest carries the default pairs file's held-out agreement of the run's matcher (its
"card"), cached by the matcher's fingerprint so an expensive matcher (an LLM judge) is measured once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evals.core.redact import write_text
from evals.core.stats import bootstrap_ci
from evals.scoring.matcher import Matcher
from evals.scoring.pairs import BUNDLED_PAIRS, Pair, PairsError, load_pairs, pairs_hash

AGREEMENT_COLUMNS = ["matcher", "split", "lang", "category", "metric", "value", "ci_low", "ci_high", "n"]
METRICS = ("agreement", "precision", "recall")  # precision and recall of "same"
GROUPS = {"group:same": True, "group:different": False}  # paraphrase-like vs near-miss pairs, by label


def decide(matcher: Matcher, pairs: list[Pair]) -> np.ndarray:
    """The matcher's same/not-same decision for every pair, all pairs prepared in one batch. A pair the matcher
    could not decide (a failed judge call) counts as disagreeing with its label: agreement is never inflated by a
    failure, and `undecided` says how many there were."""
    if not pairs:
        return np.zeros(0, dtype=bool)
    matcher.prepare_pairs([(p.gold.text, p.pred.text) for p in pairs])
    said = np.array([matcher.same_fact(p.gold.text, p.gold.subject, p.pred.text, p.pred.subject) for p in pairs],
                    dtype=bool)
    failed = undecided(matcher, pairs)
    return np.where(failed, ~np.array([p.same for p in pairs], dtype=bool), said)


def undecided(matcher: Matcher, pairs: list[Pair]) -> np.ndarray:
    """The pairs the matcher could not decide (their texts prepared already); a pair whose subjects differ is
    decided by that alone."""
    return np.array([matcher.undecided(p.gold.text, p.pred.text)
                     and matcher.subjects_agree(p.gold.text, p.gold.subject, p.pred.text, p.pred.subject)
                     for p in pairs], dtype=bool)


def _rows(spec: str, split: str, lang: str, category: str, said: np.ndarray, truth: np.ndarray, seed: int
          ) -> list[dict[str, Any]]:
    agree = (said == truth).astype(float)
    units = {"agreement": (agree, np.ones_like(agree)),
             "precision": ((said & truth).astype(float), said.astype(float)),
             "recall": ((said & truth).astype(float), truth.astype(float))}
    rows = []
    for metric in METRICS:
        num, den = units[metric]
        if den.sum() == 0:
            continue
        value, low, high = bootstrap_ci(num, den, seed=seed)
        rows.append({"matcher": spec, "split": split, "lang": lang, "category": category, "metric": metric,
                     "value": value, "ci_low": low, "ci_high": high, "n": int(den.sum())})
    return rows


def agreement_frame(spec: str, split: str, pairs: list[Pair], said: np.ndarray, seed: int = 0) -> pd.DataFrame:
    """Rows per (lang, category) with totals under lang="all" / category="all", and the two label
    groups (`group:same`: paraphrases, `group:different`: near-misses)."""
    truth = np.array([p.same for p in pairs], dtype=bool)
    langs = np.array([p.lang for p in pairs])
    cats = np.array([p.category for p in pairs])
    rows: list[dict[str, Any]] = []
    for lang in ["all", *sorted(set(langs))]:
        in_lang = np.ones(len(pairs), bool) if lang == "all" else langs == lang
        groups = {"all": in_lang, **{g: in_lang & (truth == v) for g, v in GROUPS.items()},
                  **{c: in_lang & (cats == c) for c in sorted(set(cats))}}
        for category, mask in groups.items():
            if mask.any():
                rows += _rows(spec, split, lang, category, said[mask], truth[mask], seed)
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def format_agreement(frame: pd.DataFrame, pairs_per_second: float | None = None) -> str:
    """The totals and groups per language, then per category: what `matcher eval` prints."""
    def line(r: Any) -> str:
        return f"{r.value:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] n={r.n}"

    out = []
    agree = frame[frame.metric == "agreement"]
    for r in agree[agree.category.isin(["all", *GROUPS])].itertuples():
        extra = ""
        if r.category == "all":
            sub = frame[(frame.lang == r.lang) & (frame.category == "all")].set_index("metric")["value"]
            extra = f"  precision {sub.get('precision', float('nan')):.3f} recall {sub.get('recall', float('nan')):.3f}"
        out.append(f"{r.matcher} {r.split} lang={r.lang} {r.category}: agreement {line(r)}{extra}")
    out.append("per category (lang=all):")
    for r in agree[(agree.lang == "all") & ~agree.category.isin(["all", *GROUPS])].itertuples():
        out.append(f"  {r.category:<22} {line(r)}")
    if pairs_per_second is not None:
        out.append(f"throughput: {pairs_per_second:.1f} pairs/s")
    return "\n".join(out) + "\n"


def evaluate(matcher: Matcher, pairs: list[Pair], split: str, seed: int = 0) -> tuple[pd.DataFrame, float]:
    """(agreement frame, pairs per second)."""
    started = time.perf_counter()
    said = decide(matcher, pairs)
    seconds = time.perf_counter() - started
    return agreement_frame(matcher.spec, split, pairs, said, seed), len(pairs) / max(seconds, 1e-9)


# ------------------------------------------------------------------ the card in every run's manifest

def _cache_key(matcher: Matcher, digest: str) -> str:
    return f"{matcher.fingerprint()}|{digest}"


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def card_of(frame: pd.DataFrame) -> dict[str, Any]:
    """The totals of an agreement frame: agreement with its CI, n, agreement per language and per
    label group (paraphrases vs near-misses)."""
    agree = frame[frame.metric == "agreement"]
    r = agree[(agree.lang == "all") & (agree.category == "all")].iloc[0]
    per_lang = {x.lang: round(float(x.value), 6) for x in agree[agree.category == "all"].itertuples()}
    groups = {x.category: round(float(x.value), 6) for x in agree[(agree.lang == "all")
                                                                    & agree.category.isin(list(GROUPS))].itertuples()}
    return {"heldout_agreement": round(float(r.value), 6), "ci_low": round(float(r.ci_low), 6),
            "ci_high": round(float(r.ci_high), 6), "n": int(r.n), "per_lang": per_lang, "groups": groups}


def remember(frame: pd.DataFrame, matcher: Matcher, pairs: list[Pair], cache_file: Path) -> None:
    """Store the held-out totals of the bundled pairs for `matcher_card`."""
    if frame.empty:
        return
    cache = _read_cache(cache_file)
    cache[_cache_key(matcher, pairs_hash(pairs))] = card_of(frame)
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    write_text(cache_file, json.dumps(cache, indent=1, sort_keys=True))  # evals.core.redact: redacted, whole-or-not


def matcher_card(matcher: Matcher, cache_file: Path | None, *, measure: bool = True) -> dict[str, Any]:
    """The matcher, and its agreement on the bundled pairs' held-out split with a 95% CI: from the
    cache, else measured now when `measure` (cheap matchers); None when never measured."""
    card: dict[str, Any] = {"spec": matcher.spec, "fingerprint": matcher.fingerprint(),
                            "pairs": str(BUNDLED_PAIRS.name), "split": "heldout", "heldout_agreement": None}
    try:
        pairs = load_pairs(BUNDLED_PAIRS, "heldout")
    except PairsError:
        return card
    digest = pairs_hash(pairs)
    key = _cache_key(matcher, digest)
    stored = getattr(matcher, "stored_card", lambda: None)()
    hit = stored if stored and stored.get("pairs_hash") == digest else None
    if hit is None and cache_file is not None:
        hit = _read_cache(cache_file).get(key)
    if hit is None and measure:
        frame, _ = evaluate(matcher, pairs, "heldout")
        if cache_file is not None:
            remember(frame, matcher, pairs, cache_file)
            hit = _read_cache(cache_file).get(key)
        if hit is None:
            hit = card_of(frame)
    return {**card, **(hit or {})}


def judge_failures(card: dict[str, Any] | None) -> str:
    """A bold sentence when the run's LLM judge failed on some calls, else ''."""
    if not card or not card.get("judge_errors"):
        return ""
    return (f"**The judge failed on {card['judge_errors']} of {card.get('judge_calls', '?')} calls (first: "
            f"{card.get('judge_first_error')}): the facts those calls were to decide count as not matched (note "
            f"`judge_error` in facts.parquet), so fact recall and precision are understated.**")


def card_line(card: dict[str, Any] | None) -> str:
    """One line for summary.md; a matcher with no measured agreement is flagged in bold, and so are an LLM
    judge's failed calls."""
    line = " ".join(part for part in (_card_line(card), judge_spend(card), judge_failures(card)) if part)
    return line


def judge_spend(card: dict[str, Any] | None) -> str:
    """What an LLM judge spent, which the run's tokens_total and cost_total leave out; '' for other matchers."""
    if not card or card.get("judge_calls") is None:
        return ""
    cost = card.get("judge_cost_usd")
    price = f"${cost:.4f}" if cost is not None else "cost unknown"
    return (f"The judge made {card['judge_calls']} calls ({card.get('judge_tokens', 0)} tokens, {price}; not in "
            "tokens_total or cost_total, its attempts are in attempts.parquet with site `judge`).")


def _card_line(card: dict[str, Any] | None) -> str:
    if not card:
        return "**The fact matcher is not recorded: the attribution figures have no measured agreement.**"
    spec = card.get("spec") or card.get("kind", "?")  # runs before held-out cards named a class
    if card.get("heldout_agreement") is None:
        return (f"**Facts are matched by `{spec}`, which has no measured agreement with labelled pairs: "
                f"treat the attribution figures as unverified** (measure it with `hymem-eval matcher eval "
                f"--matcher {spec}`).")
    langs = ", ".join(f"{k} {v:.1%}" for k, v in (card.get("per_lang") or {}).items() if k != "all")
    groups = card.get("groups") or {}
    detail = f" By language: {langs}." if langs else ""
    if groups:
        detail += (f" Paraphrases (same) {groups.get('group:same', float('nan')):.1%}, near-misses (different) "
                   f"{groups.get('group:different', float('nan')):.1%}.")
    return (f"Facts are matched by `{card['spec']}`, which agrees with {card['heldout_agreement']:.1%} "
            f"[95% CI {card['ci_low']:.1%}, {card['ci_high']:.1%}] of {card['n']} held-out labelled pairs "
            f"({card['pairs']}).{detail}")


__all__ = ["AGREEMENT_COLUMNS", "agreement_frame", "card_line", "card_of", "decide", "evaluate", "format_agreement",
           "judge_failures", "judge_spend", "matcher_card", "remember", "undecided"]
