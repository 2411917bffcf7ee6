"""Encode finished units' texts while the rest of the run replays (issue 35).

Why: a run used to replay every unit, then score them all; the sentence model's encoding of the texts, most of
scoring's cost, waited for the last unit. Units finish one by one, so a background thread hands each finished unit's
texts to the matcher's `prepare_ahead` (the semantic matcher: each text prepared, its predicate encoded with e5),
and the scoring after the replay finds them done. Only what does not depend on order is done ahead: the report is
scored afterwards, in report order, as before, and its rows are the same bit for bit (`SemanticMatcher.prepare_ahead`).
A matcher without `prepare_ahead` (text, the LLM judge) gets no thread. A failure ahead is left to scoring, which
does the same work again and raises where it always did.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

from evals.record import CaseRun
from evals.scoring.attribution import prepare_case


class _Texts:
    """Collects what `prepare_case` hands a matcher."""

    def __init__(self) -> None:
        self.gold: list[str] = []
        self.pred: list[str] = []

    def prepare(self, gold: Sequence[str], pred: Sequence[str]) -> None:
        self.gold, self.pred = list(gold), list(pred)


class EncodeAhead:
    """`submit(unit)` as each unit finishes; `close()` once the replay is over (waits for what was submitted)."""

    def __init__(self, matcher: Any):
        self._ahead = getattr(matcher, "prepare_ahead", None)
        self._queue: queue.SimpleQueue[CaseRun | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.prepared = 0  # units whose texts were prepared ahead (read by tests and benches)
        self.failed = 0
        if self._ahead is not None:
            self._thread = threading.Thread(target=self._work, name="hymem-encode-ahead", daemon=True)
            self._thread.start()

    def submit(self, run: CaseRun) -> None:
        if self._thread is not None and run.gold is not None and run.status != "infra_error":
            self._queue.put(run)

    def close(self, cancel: bool = False) -> None:
        """Wait for the units submitted; `cancel` (the run failed or was interrupted): only for the one in hand."""
        if self._thread is not None:
            if cancel:
                self._stop.set()
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _work(self) -> None:
        while (run := self._queue.get()) is not None and not self._stop.is_set():
            texts = _Texts()
            try:
                prepare_case(run.gold, run, texts)  # type: ignore[arg-type]  # submit keeps only runs with gold
                self._ahead(texts.gold, texts.pred)  # type: ignore[misc]
                self.prepared += 1
            except Exception:  # noqa: BLE001 — scoring does this again and reports it
                self.failed += 1


__all__ = ["EncodeAhead"]
