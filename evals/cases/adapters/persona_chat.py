"""Synthetic-Persona-Chat (`Synthetic-Persona-Chat_{test,valid}.csv`) as eval cases: one case per conversation.

Speakers: "User 1" is the current user (`role=user`), "User 2" a named human (`role=assistant`
with a name). The corpus has no names, only placeholders ("Hi, I'm [User 2's name]"), so each
speaker gets the name their persona states ("My name is lucy.") or else one from a fixed pool,
chosen by row number so that it is the same on every run and clashes with nothing in the
conversation; the placeholders are filled with these names. Turn prefixes are normalised
("* * User 1: * *"), continuation lines join the turn before, and stage directions ("(The next
day)", "[Later]", "* * *") are dropped. A conversation longer than 30 messages becomes several writes.

Gold: every persona line, rewritten from the first person: User 1's as "The user …" (subject
"user"), User 2's with their name ("Sam has a turtle named timothy.", subject "Sam"). A name line
gives the expected profile name (User 1) or the speaker's name (User 2), not a fact.

The persona lists are conversation-level and many lines are never voiced (the README warns; about
57% of test lines share no content word with the conversation). Flags, from a word-overlap heuristic:
`not_voiced` (neither speaker says the line's content words) and `voiced_only_by_other_speaker`
(only the other speaker does: either the generator gave the line to the wrong speaker, "U1: I'm a
hair stylist" for User 2's persona, or the other speaker asks about it); and `owner_not_named`, a
line in no first person ("Poker is fun."), whose gold sentence names nobody. `--gold clean` drops all three.
"""

from __future__ import annotations

import csv
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from evals.cases.adapters._common import (
    Gold,
    Item,
    Label,
    Skipped,
    build_case,
    chunk_messages,
    content_units,
    coverage,
    first_person_en,
    resolve_files,
    utf8_errors,
)
from evals.cases.dataset import DatasetError

DATASET = "persona_chat"
CLEAN_DROPS = frozenset({"not_voiced", "voiced_only_by_other_speaker", "owner_not_named"})
VOICED = 0.5  # share of a persona line's content words a speaker must say
COLUMNS = ("user 1 personas", "user 2 personas", "Best Generated Conversation")
NAME_POOL = ("Alex", "Sam", "Jordan", "Taylor", "Morgan", "Casey", "Riley", "Jamie", "Avery", "Quinn", "Robin",
             "Drew", "Parker", "Reese", "Rowan", "Emery", "Hayden", "Kendall", "Logan", "Sage")
_TURN = re.compile(r"^[\s*]*User\s*([12])\s*[:：][\s*]*(.*)$", re.I)
_STAGE = re.compile(r"^\s*(?:[\[(][^\])]*[\])]|[*\s]+|[^:]{1,40}:)\s*$")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|im|my|me|mine|myself)\b", re.I)
_PLACEHOLDER = re.compile(r"\[\s*user\s*([12])\s*(?:['’]s)?\s*name\s*\]", re.I)
_NAME_LINE = re.compile(r"^\W*(?:(?:hey|hi|hello)(?: there)?\W+)?my name is\s+([A-Za-z]+)\b\W*(?:and\s+)?(.*)$", re.I)


def iter_items(path: str, *, gold: Gold = "all", spec: str | None = None) -> Iterator[Item]:
    """Cases (or skips) of every row of every CSV under PATH, reading one row at a time."""
    source = spec or f"{DATASET}:{path}"
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    for file in resolve_files(path, ("*.csv",), "Synthetic-Persona-Chat"):
        split = file.stem.rsplit("_", 1)[-1].lower() or "spc"
        with file.open("r", encoding="utf-8-sig", newline="") as fh, utf8_errors(file):
            reader = csv.DictReader(fh)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise DatasetError([f"{file}: missing CSV column(s): {', '.join(missing)}"])
            for row_number, row in enumerate(reader, 1):
                yield _conversation(row, f"{split}-{row_number:04d}", row_number, file, source, gold)


def _conversation(row: dict[str, str], case_id: str, row_number: int, file: Path, source: str, gold: Gold) -> Item:
    personas = {k: [p.strip() for p in (row.get(f"user {k} personas") or "").splitlines() if p.strip()]
                for k in ("1", "2")}
    text = row.get("Best Generated Conversation") or ""
    names: dict[str, str] = {}
    lines: dict[str, list[str]] = {"1": [], "2": []}
    for k in ("1", "2"):
        for line in personas[k]:
            m = _NAME_LINE.match(line)
            if m and k not in names:
                names[k] = m.group(1).capitalize()
            rest = m.group(2).strip() if m else line
            if rest:
                lines[k].append(rest)
    taken = (text + " " + " ".join(personas["1"] + personas["2"])).lower()
    for k in ("1", "2"):
        if k not in names:
            names[k] = _pool_name(row_number + int(k), taken, set(names.values()))
    turns, dropped = _turns(_PLACEHOLDER.sub(lambda m: names[m.group(1)], text))
    if not turns:
        return Skipped(id=case_id, reason="no 'User 1:' / 'User 2:' turns")
    said = {k: content_units(" ".join(t for who, t in turns if who == k), "en") for k in ("1", "2")}
    labels = []
    for k, other in (("1", "2"), ("2", "1")):
        for line in lines[k]:
            units = content_units(line, "en")
            reasons = [] if _FIRST_PERSON.search(line) else ["owner_not_named"]
            if coverage(units, said[k]) < VOICED:
                reasons.append("voiced_only_by_other_speaker" if coverage(units, said[other]) >= VOICED
                               else "not_voiced")
            labels.append(Label(text=first_person_en(line, None if k == "1" else names["2"]),
                                subject="user" if k == "1" else names["2"], original=line,
                                evidence=f"user {k} personas", reasons=reasons))
    messages = [{"role": "user" if who == "1" else "assistant", "name": names[who], "content": t} for who, t in turns]
    writes = chunk_messages(messages)
    tags = ["persona-chat", "user-named", "named-human", "silver-gold"] + (["multi-turn"] if len(writes) > 1 else [])
    meta = {"file": file.name, "row": row_number, "names": {"user": names["1"], "other": names["2"]}}
    if dropped:
        meta["dropped_lines"] = dropped
    return build_case(dataset=DATASET, source=source, case_id=case_id, lang="en",
                      user_id=f"spc-{case_id}-{names['1'].lower()}", turns=writes, labels=labels, gold=gold,
                      clean_drops=CLEAN_DROPS, tags=tags, meta=meta, profile={"name": names["1"]})


def _turns(text: str) -> tuple[list[tuple[str, str]], int]:
    """(speaker "1"|"2", text) turns; continuation lines join the turn before, stage directions go."""
    turns: list[tuple[str, str]] = []
    dropped = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _TURN.match(line)
        if m:
            turns.append((m.group(1), m.group(2).strip()))
        elif turns and not _STAGE.match(line):
            who, said = turns[-1]
            turns[-1] = (who, f"{said}\n{line.strip()}".strip())
        else:
            dropped += 1
    return [(who, t) for who, t in turns if t], dropped


def _pool_name(seed: int, taken: str, used: set[str]) -> str:
    for i in range(len(NAME_POOL)):
        name = NAME_POOL[(seed * 7 + i) % len(NAME_POOL)]
        if name not in used and not re.search(rf"\b{name.lower()}\b", taken):
            return name
    return f"Person{seed}"
