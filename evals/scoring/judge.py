"""The LLM judge (`--matcher llm:MODEL_SPEC`): a DSPy signature decides, for one gold fact and all
the candidate memories of its case at once, which candidates state that fact.

It goes through the same plumbing as `--lm` (`evals.arms.providers`, `evals.arms.accounting`): keys from the
environment, retries with Retry-After, the response cache, and one `attempts.parquet` row per
attempt with site `judge`. Calls are batched: at most one per distinct gold text per case. The
subject is not the judge's question: who a sentence is about is decided in code
(`evals.core.subject_reading`, apart from the engine's rule), as for every matcher, so a fact filed under the wrong person is still matched
and counted as an attribution error. A failed or malformed judge call decides nothing: its pairs
count as "not the same", are `undecided`, and the failure is counted (`health`: in the run's manifest and
summary; the facts it touched carry the note `judge_error` in facts.parquet).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import dspy
import numpy as np
import pandas as pd

from evals.arms.accounting import AccountingLM, AttemptLog, ResponseCache, price_table
from evals.arms.providers import Provider, endpoint, resolve_providers
from evals.core.redact import redact_url
from evals.scoring.matcher import Matcher, text_similarity
from evals.scoring.usage import COLUMNS
from hymem.sites import _site


class JudgeFacts(dspy.Signature):
    """Decide, for each candidate memory, whether it states the same fact as the gold fact.

    Ignore who the sentence is about (the subject is checked separately) and ignore wording,
    word order, voice, abbreviations, number formats, casing and punctuation. The claim must
    survive: a change of polarity (likes / dislikes), modality (lives in / wants to live in /
    used to live in), time (morning / evening, Friday / Monday), any number, a named entity
    (Berlin / Paris), the relation (the user / the user's mother) or the direction of a role
    (teaches / learns, works at / interviewed at) makes it a different fact. Harmless extra
    description of something already named is still the same fact."""

    gold_fact: str = dspy.InputField(desc="the fact a careful memory engine should have stored")
    candidates: list[str] = dspy.InputField(desc="candidate memories, in order")
    same: list[bool] = dspy.OutputField(desc="one true/false per candidate, in the same order")


class JudgeError(ValueError):
    """A judge reply that cannot be used (wrong length, not booleans)."""


class JudgeMatcher(Matcher):
    """Same / not the same from an LLM, one call per gold fact; the assignment breaks ties between
    candidates the judge accepts by the text matcher's similarity."""

    threshold = 0.5

    def __init__(self, lm: dspy.BaseLM, name: str, log: Any = None, cache: Any = None, identity: str | None = None):
        self.spec = f"llm:{name}"
        self._identity = identity or name  # the model and endpoint the name resolved to
        self._lm = lm
        self._log = log
        self._cache = cache
        self._predict = dspy.Predict(JudgeFacts)
        self._decisions: dict[tuple[str, str], bool] = {}
        self._undecided: set[tuple[str, str]] = set()
        self.calls = 0
        self.errors = 0
        self.first_error: str | None = None

    @classmethod
    def from_spec(cls, model_spec: str, *, attempts_dir: Any = None, cache_file: Any = None,
                  providers_file: Any = None) -> JudgeMatcher:  # attempts_dir: kept for the factory's signature
        """The judge for a `--lm`-style spec (a DSPy model string, MODEL@URL, or a providers-file name)."""
        (config,) = resolve_providers([model_spec], providers_file)
        if not config.is_http:
            raise ValueError("the judge needs a real model (a DSPy model string or MODEL@URL); the offline and "
                             "oracle providers do not answer judge prompts")
        provider = Provider(config)
        log = AttemptLog(provider=f"judge:{config.name}", case_id="(matcher)")
        cache = ResponseCache(cache_file) if cache_file is not None else None
        lm = AccountingLM.wrap(provider.http_lm(), provider=provider, log=log, injector=None, cache=cache, retries=True,
                               prices=price_table())

        return cls(lm, config.name, log, cache,
                   identity=f"{config.model}@{redact_url(str(endpoint(config.model, config.api_base)))}")

    def fingerprint(self) -> str:
        """The model and endpoint the spec resolved to (not the spec: a providers-file name may point elsewhere
        tomorrow) and the judge's prompt."""
        from hashlib import sha256

        prompt = JudgeFacts.__doc__ or ""
        return f"llm:{self._identity}:{sha256(prompt.encode()).hexdigest()[:12]}"

    def _ask(self, gold: str, candidates: list[str]) -> list[bool]:
        token = _site.set("judge")
        try:
            with dspy.context(lm=self._lm, adapter=dspy.JSONAdapter()):
                result = self._predict(gold_fact=gold, candidates=candidates)
        finally:
            _site.reset(token)
        same = list(result.same)
        if len(same) != len(candidates) or not all(isinstance(x, bool) for x in same):
            raise JudgeError(f"expected {len(candidates)} booleans, got {json.dumps(same, default=str)[:200]}")
        return same

    def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        """One judge call per gold text, over every candidate not yet decided for it."""
        for g in dict.fromkeys(gold):
            todo = [p for p in dict.fromkeys(pred) if (g, p) not in self._decisions]
            if not todo:
                continue
            self.calls += 1
            try:
                same = self._ask(g, todo)
            except Exception as exc:  # noqa: BLE001 - a failed judge call decides nothing; counted, never a crash
                self.errors += 1
                self.first_error = self.first_error or f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
                self._undecided.update((g, p) for p in todo)
                same = [False] * len(todo)
                self._take_pending()  # a reply that could not be read is never cached: a rerun asks again
            else:
                if self._cache is not None:
                    self._cache.put_many(self._take_pending())
            self._decisions.update({(g, p): s for p, s in zip(todo, same, strict=True)})

    def prepare_pairs(self, pairs: Sequence[tuple[str, str]]) -> None:
        """One call per gold text over the predictions it is paired with, never every prediction of the file."""
        by_gold: dict[str, list[str]] = {}
        for g, p in pairs:
            by_gold.setdefault(g, []).append(p)
        for g, preds in by_gold.items():
            self.prepare([g], list(dict.fromkeys(preds)))

    def undecided(self, gold: str, pred: str) -> bool:
        return (gold, pred) in self._undecided

    def health(self) -> dict[str, Any]:
        """The judge's calls and failed calls (each failure left its pairs "not the same"), and what the attempts
        that reached the model spent (the run's tokens_total and cost_total count the engine's calls only)."""
        sent = [a for a in (self._log.rows if self._log else []) if not a.cache_hit]
        costs = [a.cost_usd for a in sent if a.cost_usd is not None]
        return {"judge_calls": self.calls, "judge_errors": self.errors, "judge_first_error": self.first_error,
                "judge_tokens": sum((a.prompt_tokens or 0) + (a.completion_tokens or 0) for a in sent),
                "judge_cost_usd": round(sum(costs), 6) if costs else None}

    def _take_pending(self) -> list[tuple[str, list]]:
        take = getattr(self._lm, "take_pending", None)
        return take() if take is not None else []

    def scores(self, gold: Sequence[str], pred: Sequence[str]) -> np.ndarray:
        self.prepare(gold, pred)
        out = np.zeros((len(gold), len(pred)))
        for i, g in enumerate(gold):
            for j, p in enumerate(pred):
                tie = 0.25 * text_similarity(g, p)
                out[i, j] = 0.75 + tie if self._decisions[(g, p)] else tie
        return out

    def attempts_frame(self) -> pd.DataFrame:
        """The judge's attempts, as `attempts.parquet` rows (site `judge`)."""
        rows = [{"dataset": "(matcher)", **a.model_dump()} for a in (self._log.rows if self._log else [])]
        return pd.DataFrame(rows, columns=COLUMNS).astype({"latency_s": "float64", "cache_hit": "bool"})

    def close(self) -> None:
        if self._cache is not None:
            self._cache.close()
            self._cache = None


__all__ = ["JudgeFacts", "JudgeMatcher"]
