"""Eval cases: the JSONL format, its pydantic models and a strict, all-or-nothing loader.

A case seeds memories, replays one or more `add` calls and states what a careful engine should leave
behind. Every bad line of every file is reported as `file:line: field: problem` before a run starts,
because a half-loaded suite gives scores that look real but are not.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from evals.core import json_limits
from evals.core.subject_reading import canonical as canonical_subject
from evals.core.subject_reading import read_subject as subject_of
from evals.core.subject_reading import same_person as same_subject
from hymem.messages import MessageValidationError, normalize_messages
from hymem.models import Kind, Owner
from hymem.validation import DEFAULT_MAX_MESSAGE_CHARS, DEFAULT_MAX_WRITE_CHARS, MAX_ID_CHARS

Lang = Literal["en", "zh"]
ProfileField = Literal["name", "age", "gender", "occupation", "location"]

def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be blank")
    return value


def _subject(value: str) -> str:
    """'user', 'assistant' or a name; catches 'User' / '用户' so one subject is never spelled two ways."""
    if not value.strip() or value != value.strip():
        raise ValueError("must be 'user', 'assistant' or a person's name, without surrounding spaces")
    canonical = canonical_subject(value)
    if canonical in ("user", "assistant") and canonical != value:
        raise ValueError(f"write {canonical!r}, not {value!r}")
    if value.lower() in {"system", "tool"}:
        raise ValueError(f"{value!r} is not a speaker; use 'user', 'assistant' or a person's name")
    return value


def _message(value: dict[str, Any]) -> dict[str, Any]:
    """Only the shape the harness relies on; the engine validates messages in depth."""
    role = value.get("role")
    if not isinstance(role, str) or not role.strip():
        raise ValueError("a message needs a non-empty string 'role'")
    return value


Text = Annotated[str, AfterValidator(_non_blank)]
Subject = Annotated[str, AfterValidator(_subject)]
Message = Annotated[dict[str, Any], AfterValidator(_message)]
Turn = Annotated[list[Message], Field(min_length=1)]
CaseId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]


def derive_subject(text: str) -> str | None:
    """"user" or "assistant" when the gold text names one of them (the harness's reading, `evals.core.subject_reading`); None
    otherwise: a person's name is never guessed for gold, it must be written out."""
    named = subject_of(text)
    return named if named in ("user", "assistant") else None


class _Statement(BaseModel):
    """A memory-shaped sentence; subject and owner may be left out when the text implies them."""

    model_config = ConfigDict(extra="forbid")

    text: Text  # one self-contained sentence naming its subject
    subject: Subject  # "user", "assistant" or a person's name; derived from the text when omitted
    owner: Owner  # "agent" only for what the AI produced; derived from the subject when omitted
    kind: Kind = "fact"  # "experience" for lessons learned on the working path

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "subject" not in data and isinstance(data.get("text"), str):
            derived = derive_subject(data["text"])
            if derived is not None:
                data["subject"] = derived
        if "owner" not in data:
            data["owner"] = "agent" if data.get("subject") == "assistant" else "user"
        return data


class SeedMemory(_Statement):
    """Written with the engine's `add_extracted` before the case's turns."""


class ExpectedFact(_Statement):
    """A live memory the case's turns should leave behind."""


class Update(BaseModel):
    """A seeded memory that a same-subject change must supersede."""

    model_config = ConfigDict(extra="forbid")

    old: Text  # text of a seeded memory that must no longer be live
    new: Text  # text of an expected fact that replaces it


class Expect(BaseModel):
    """The gold; every key is optional and an absent key is simply not scored."""

    model_config = ConfigDict(extra="forbid")

    facts: list[ExpectedFact] | None = None  # live memories the turns should leave; None = not scored
    # L0 fields expected to hold these values; null: the field must stay empty ({"name": null}: an unnamed
    # user's profile has no name, whoever else in the conversation was named)
    profile: dict[ProfileField, Text | None] = Field(default_factory=dict)
    profile_excludes: list[Text] = Field(default_factory=list)  # substrings no L0 field may contain
    separate: list[tuple[Text, Text]] = Field(default_factory=list)  # pairs that must stay two live memories
    updates: list[Update] = Field(default_factory=list)  # seeded memories superseded by a new fact
    absent: list[Text] = Field(default_factory=list)  # statements that must not be live memories afterwards
    no_memory: bool = False  # the turns hold nothing to remember: the write stores nothing


class Case(BaseModel):
    """One eval case: seed, replay, compare."""

    model_config = ConfigDict(extra="forbid")

    id: CaseId  # unique within its file
    lang: Lang  # language of the conversation: "en" or "zh"
    user_id: Annotated[str, Field(max_length=MAX_ID_CHARS), AfterValidator(_non_blank)]  # the engine user the
    # case writes as; longer than the engine's limit, every write of the case would be refused
    tags: list[Text] = Field(default_factory=list)  # what the case exercises (see datasets/README.md)
    memories: list[SeedMemory] = Field(default_factory=list)  # seeded before the turns
    turns: Annotated[list[Turn], Field(min_length=1)]  # each element is one add / add_working call
    path: Literal["chat", "working"] = "chat"  # "working" sends turns to add_working
    expect: Expect = Field(default_factory=Expect)  # the gold
    meta: dict[str, Any] = Field(default_factory=dict)  # free-form, for adapters (e.g. the original sample id)
    source: str | None = None  # file the case was read from (set by the loader)
    line: int | None = None  # 1-based line in that file (set by the loader)


class DatasetError(ValueError):
    """Every problem found while loading, one `file:line: field: problem` string each."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def gold_problems(case: Case) -> list[str]:
    """Contradictions inside one case's gold, as `field: problem` strings (empty when consistent)."""
    problems: list[str] = []
    expect = case.expect
    facts = expect.facts or []
    seeds = {m.text: m for m in case.memories}
    fact_by_text = {f.text: f for f in facts}

    for field, items in (("memories", case.memories), ("expect.facts", facts)):
        seen: set[str] = set()
        for i, item in enumerate(items):
            where = f"{field}[{i}]"
            if item.text in seen:
                problems.append(f"{where}.text: duplicate text {item.text!r}")
            seen.add(item.text)
            if item.owner == "agent" and item.subject != "assistant":
                problems.append(f"{where}.owner: 'agent' is only for subject 'assistant', not {item.subject!r}")
            if item.subject == "assistant" and item.owner != "agent":
                problems.append(f"{where}.owner: subject 'assistant' needs owner 'agent'")
            if item.kind == "experience" and item.subject != "assistant":
                problems.append(f"{where}.kind: an experience is the assistant's (subject 'assistant')")
            if item.kind == "experience" and case.path != "working":
                problems.append(f"{where}.kind: experiences come only from path 'working'")

    for i, upd in enumerate(expect.updates):
        where = f"expect.updates[{i}]"
        if upd.old not in seeds:
            problems.append(f"{where}.old: {upd.old!r} is not a seeded memory")
        if upd.new not in fact_by_text:
            problems.append(f"{where}.new: {upd.new!r} is not in expect.facts")
        if upd.old == upd.new:
            problems.append(f"{where}: old and new are the same text")
        elif upd.old in seeds and upd.new in fact_by_text and not same_subject(seeds[upd.old].subject,
                                                                              fact_by_text[upd.new].subject):
            problems.append(f"{where}: old and new have different subjects; a change never crosses subjects")

    superseded = {u.old for u in expect.updates}
    for i, pair in enumerate(expect.separate):
        if pair[0] == pair[1]:
            problems.append(f"expect.separate[{i}]: the two texts are the same")
        for j, text in enumerate(pair):
            if text not in fact_by_text and text not in seeds:
                problems.append(f"expect.separate[{i}][{j}]: {text!r} is neither in expect.facts nor a seeded memory")
            elif text in superseded:
                problems.append(f"expect.separate[{i}][{j}]: {text!r} is superseded by expect.updates")

    for i, text in enumerate(expect.absent):
        if text in fact_by_text:
            problems.append(f"expect.absent[{i}]: {text!r} is also in expect.facts")

    if expect.no_memory and facts:
        problems.append("expect.facts: must be empty when expect.no_memory is true")
    if expect.no_memory and expect.updates:
        problems.append("expect.updates: must be empty when expect.no_memory is true")

    for i, banned in enumerate(expect.profile_excludes):
        for key, value in expect.profile.items():
            if value is not None and banned.lower() in value.lower():
                problems.append(f"expect.profile_excludes[{i}]: {banned!r} contradicts expect.profile.{key}")
    return problems


def message_problems(case: Case) -> list[str]:
    """Messages the engine would refuse, as `turns[i][j].field: problem` strings.

    Checked with the engine's own normaliser (`hymem.messages.normalize_messages`, which `add` and
    `add_working` call), so a suite never runs writes that fail on input and reports them as infra errors.
    """
    problems = []
    for i, turn in enumerate(case.turns):
        try:  # the shape, with the engine's normaliser; the sizes below, by the harness's own count
            normalized = normalize_messages(turn)
        except MessageValidationError as exc:
            where = f"turns[{i}]" if exc.index is None else f"turns[{i}][{exc.index}]"
            problems.append(f"{where}{'.' + exc.field if exc.field else ''}: {exc.problem}")
            continue
        # Against the limits the runner's engine writes with (its defaults), compared here and not by the engine's
        # own check: a case at the limit (exactly max_message_chars) must load even when that check is off by one,
        # so the engine's refusal shows in the run instead of hiding the case.
        if len(normalized) == len(turn):  # one message each (the usual case): read the sizes off in one pass
            sizes = [len(m.content) for m in normalized]
        else:  # a message normalised into several (content blocks): attribute each size to its input message
            sizes, before = [], 0
            for j in range(len(turn)):
                upto = sum(len(m.content) for m in normalize_messages(turn[:j + 1]))
                sizes.append(upto - before)
                before = upto
        for j, size in enumerate(sizes):
            if size > DEFAULT_MAX_MESSAGE_CHARS:
                problems.append(f"turns[{i}][{j}].content: {size} characters, over max_message_chars "
                                f"({DEFAULT_MAX_MESSAGE_CHARS})")
        if sum(sizes) > DEFAULT_MAX_WRITE_CHARS:
            problems.append(f"turns[{i}]: {sum(sizes)} characters, over max_write_chars ({DEFAULT_MAX_WRITE_CHARS})")
    return problems


def _surrogates(value: Any, where: str = "") -> str | None:
    """The field path of the first string holding a lone UTF-16 surrogate (JSON `\\ud800`), which no
    UTF-8 file or SQLite store can hold; None when there is none."""
    if isinstance(value, str):
        return where or "case" if any("\ud800" <= ch <= "\udfff" for ch in value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _surrogates(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def _field(loc: tuple[int | str, ...]) -> str:
    """('expect', 'facts', 1, 'owner') -> 'expect.facts[1].owner'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":  # pydantic's marker for an invalid dict key
            out += part
        else:
            out += f".{part}" if out else part
    return out or "case"


def _message_of(err: Any) -> str:
    msg = str(err["msg"])
    return msg.removeprefix("Value error, ")


def _read_file(path: Path) -> Iterator[Case | str]:
    """Cases and error strings in line order; blank lines are skipped."""
    first_line: dict[str, int] = {}
    with path.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            where = f"{path}:{lineno}"
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield f"{where}: invalid UTF-8: {exc.reason} at byte {exc.start}"
                continue
            if not text.strip():
                continue
            try:
                obj = json_limits.loads(text)
            except json.JSONDecodeError as exc:
                yield f"{where}: invalid JSON: {exc.msg} (column {exc.colno})"
                continue
            except json_limits.TooDeep as exc:
                yield f"{where}: {exc}"
                continue
            if not isinstance(obj, dict):
                yield f"{where}: case: expected a JSON object, got {type(obj).__name__}"
                continue
            surrogate = _surrogates(obj)
            if surrogate is not None:
                yield f"{where}: {surrogate}: a lone UTF-16 surrogate escape (e.g. \\ud800) is not text"
                continue
            errors: list[str] = []
            case_id = obj.get("id")
            if isinstance(case_id, str):
                if case_id in first_line:
                    errors.append(f"{where}: id: duplicate id {case_id!r} (first on line {first_line[case_id]})")
                else:
                    first_line[case_id] = lineno
            try:  # strict: "false" is not a bool, 1 is not a string (JSON's own types only)
                case = Case.model_validate_json(text, strict=True).model_copy(update={"source": str(path),
                                                                                      "line": lineno})
            except ValidationError as exc:
                errors.extend(f"{where}: {_field(err['loc'])}: {_message_of(err)}" for err in exc.errors())
            else:
                errors.extend(f"{where}: {problem}" for problem in message_problems(case) + gold_problems(case))
            if errors:
                yield from errors
            else:
                yield case


def _files(spec: str | Path) -> tuple[list[Path], list[str]]:
    if not str(spec).strip():  # Path("") is the current directory: every *.jsonl there would load
        return [], ["'': an empty path is not a dataset (give a .jsonl file or a directory of them)"]
    path = Path(spec)
    if path.is_dir():
        found = sorted(p for p in path.glob("*.jsonl") if p.is_file())
        return found, ([] if found else [f"{path}: no *.jsonl files in this directory"])
    if path.is_file():
        return [path], []
    return [], [f"{path}: no such file or directory"]


def load_cases(specs: Iterable[str | Path]) -> list[Case]:
    """All cases of the given .jsonl files and directories (their *.jsonl, sorted), or one DatasetError."""
    specs = list(specs)
    errors: list[str] = []
    files: list[Path] = []
    seen: set[Path] = set()
    for spec in specs:
        found, problems = _files(spec)
        errors.extend(problems)
        for path in found:
            if path.resolve() not in seen:
                seen.add(path.resolve())
                files.append(path)
    cases: list[Case] = []
    for path in files:
        for item in _read_file(path):
            if isinstance(item, Case):
                cases.append(item)
            else:
                errors.append(item)
    if errors:
        raise DatasetError(errors)
    if not cases:
        raise DatasetError([f"no cases in {', '.join(str(s) for s in specs) or '(no dataset given)'}"])
    return cases


def iter_cases(path: str | Path) -> Iterator[Case]:
    """Stream the cases of one .jsonl file (or a directory's, sorted); stops at the first bad line."""
    files, problems = _files(path)
    if problems:
        raise DatasetError(problems)
    for file in files:
        for item in _read_file(file):
            if not isinstance(item, Case):
                raise DatasetError([item])
            yield item


def bundled_dataset_dir() -> Path:
    """The repository's curated suites (datasets/ next to the evals package)."""
    path = Path(__file__).resolve().parents[2] / "datasets"
    if not path.is_dir():
        raise FileNotFoundError(f"bundled datasets folder is missing: {path}")
    return path


def canonical_json(case: Case) -> str:
    """The case as stable JSON: sorted keys, defaults filled in, where it was read from left out."""
    data = case.model_dump(mode="json", exclude={"source", "line"})
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def dataset_hash(cases: Iterable[Case]) -> str:
    """sha256 (hex) over the cases' canonical JSON, in order, for run manifests."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(canonical_json(case).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def case_hash(case: Case) -> str:
    """sha256 (hex, 16) of one case's canonical JSON: whether two runs saw the same case."""
    return hashlib.sha256(canonical_json(case).encode("utf-8")).hexdigest()[:16]


__all__ = [
    "Case",
    "DatasetError",
    "Expect",
    "ExpectedFact",
    "SeedMemory",
    "Update",
    "bundled_dataset_dir",
    "canonical_json",
    "case_hash",
    "dataset_hash",
    "derive_subject",
    "gold_problems",
    "iter_cases",
    "load_cases",
    "message_problems",
]
