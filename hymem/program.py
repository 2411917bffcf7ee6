"""The engine's DSPy program: every predictor the write chain calls, in one module.

Holding them in one `dspy.Module` lets an optimiser tune them and
`save`/`load` swap in a tuned version without touching the engine.
"""

from __future__ import annotations

import dspy

from hymem.chain import jsonable
from hymem.signatures import ExtractFacts, ExtractFactsZh, ExtractWorking, ReconcileFacts


class MemoryProgram(dspy.Module):
    """Extractors (English, Chinese, working path) and the reconciler."""

    def __init__(self) -> None:
        super().__init__()
        self.extract_en = dspy.Predict(ExtractFacts)
        self.extract_zh = dspy.Predict(ExtractFactsZh)
        self.extract_working = dspy.Predict(ExtractWorking)
        self.reconcile = dspy.Predict(ReconcileFacts)

    def extractor(self, lang: str) -> dspy.Predict:
        return self.extract_zh if lang == "zh" else self.extract_en

    def prompt_fingerprint(self) -> str:
        """A hash of every instruction and demo, so a run manifest changes when prompts change."""
        import hashlib
        import json

        parts = []
        for name, predictor in self.named_predictors():
            parts.append({
                "name": name,
                "instructions": predictor.signature.instructions,
                "fields": list(predictor.signature.fields),
                # demos hold pydantic models in memory and dicts once loaded: fingerprint both the same way
                "demos": [jsonable(dict(d)) if hasattr(d, "items") else str(d) for d in predictor.demos],
            })
        blob = json.dumps(parts, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]
