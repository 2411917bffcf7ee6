"""The gold a unit was scored against, as the record keeps it: what the scorers read from a case, and no more.

Why in the record: a run's scores must be reproducible from its own directory. Re-scoring with another matcher
(`evals.report.rescore`) or rewriting the report reads `units.jsonl` and the manifest only, never the dataset
files, which may have moved or changed since. One copy per unit (a CaseRun), never per faulted run: a sweep has
many faulted runs of each write, and they are all scored against the same gold. Built from a `Case` by
`evals.cases.gold.case_gold` (this stage sits below the cases and cannot name them).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GoldStatement(BaseModel):
    """An expected fact or a seeded memory: its text, and the subject and owner it must be filed under."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    subject: str  # "user", "assistant" or a person's name
    owner: str  # user | agent
    kind: str = "fact"  # fact | experience


class GoldUpdate(BaseModel):
    """A seeded memory (`old`) that an expected fact (`new`) of the same subject must supersede."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    old: str
    new: str


class FlaggedLabels(BaseModel):
    """How many of the case's corpus labels its adapter flagged (`meta.flagged`; curated suites have none)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    flagged: int = 0  # for any reason
    misattributed: int = 0  # the evidence turn was spoken by the other person
    left_out: int = 0  # dropped from this run's gold by `--gold clean`


class CaseGold(BaseModel):
    """Everything `evals.scoring` and the report read from a case: the case's `expect`, its seeded memories (a
    proposed fact restating one is no extra; an update's old text), how many turns it had (whether a merge was
    possible at all) and its flagged corpus labels. Absent keys mean what they mean in a case: not scored."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    facts: list[GoldStatement] | None = None  # live memories the turns should leave; None = not scored
    seeds: list[GoldStatement] = Field(default_factory=list)  # memories seeded before the turns
    turns: int = 1  # add / add_working calls the case made after its seeds
    profile: dict[str, str | None] = Field(default_factory=dict)  # L0 field -> expected value (None: stays empty)
    profile_excludes: list[str] = Field(default_factory=list)  # substrings no L0 field may contain
    separate: list[tuple[str, str]] = Field(default_factory=list)  # pairs that must stay two live memories
    updates: list[GoldUpdate] = Field(default_factory=list)
    absent: list[str] = Field(default_factory=list)  # statements that must not be live memories afterwards
    no_memory: bool = False  # the turns hold nothing to remember
    flagged_labels: FlaggedLabels = Field(default_factory=FlaggedLabels)


__all__ = ["CaseGold", "FlaggedLabels", "GoldStatement", "GoldUpdate"]
