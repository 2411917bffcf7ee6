"""A long unit shows its progress from inside (issue 35): each control write reported, the bar told."""

from __future__ import annotations

import evals.run.runner as runner
from evals.cases.dataset import Case
from evals.faults.plan import FaultPlan
from evals.run.replay import CaseReplayer
from hymem import HashEmbedder
from hymem.offline import offline_lm


def _case(turns: int) -> Case:
    return Case.model_validate({
        "id": "long", "lang": "en", "user_id": "ana", "tags": [], "memories": [],
        "turns": [[{"role": "user", "name": "Ana", "content": f"I like tea number {i}."}] for i in range(turns)],
        "expect": {"facts": [{"text": "The user likes tea.", "subject": "user", "owner": "user"}]}})


def test_the_replayer_reports_each_control_write_as_it_finishes():
    seen: list[tuple[int, int]] = []
    run = CaseReplayer(_case(3), "long", "offline", lambda c: offline_lm(), HashEmbedder(), FaultPlan.parse("none"),
                       seed=0, on_write=lambda done, total: seen.append((done, total))).run()
    assert run.status == "ok", run.error
    assert seen == [(1, 3), (2, 3), (3, 3)]


class _Bar:
    def __init__(self) -> None:
        self.postfix: list[str] = []

    def set_postfix_str(self, text: str) -> None:
        self.postfix.append(text)


def test_the_cases_bar_shows_a_long_units_writes_and_not_a_finished_one(monkeypatch):
    monkeypatch.setattr(runner, "LONG_UNIT_SECONDS", 0.0)
    bar = _Bar()
    show = runner._unit_progress(bar, "long", enabled=True)
    assert show is not None
    show(5, 10)
    show(10, 10)  # the unit is done: the bar's own count says so
    assert len(bar.postfix) == 1 and bar.postfix[0].startswith("long: write 5/10 (")
    assert runner._unit_progress(bar, "long", enabled=False) is None
