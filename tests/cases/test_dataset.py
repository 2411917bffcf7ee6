"""The case format, its loader and the bundled curated suites."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evals.cases.dataset import (
    Case,
    DatasetError,
    bundled_dataset_dir,
    dataset_hash,
    gold_problems,
    iter_cases,
    load_cases,
)

REQUIRED_CHAT_TAGS = {
    "user-named", "user-unnamed", "named-human", "ai-suggestion", "adopt", "tool-message", "openai-parts",
    "anthropic-blocks", "separate", "update", "no-cross-update", "negation", "third-party", "l0-trap",
    "no-memory", "multi-line", "fake-label", "other-script", "multi-turn",
}  # fmt: skip
CJK = re.compile(r"[\u4e00-\u9fff]")
LABEL_LINE = re.compile(r"^\[[^\]\n]+\]:", re.MULTILINE)


def _good(case_id: str = "c1", **changes: object) -> dict:
    case = {
        "id": case_id,
        "lang": "en",
        "user_id": "tim",
        "tags": ["update"],
        "memories": [{"text": "The user lives in Paris.", "owner": "user"}],
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin."}]],
        "expect": {
            "facts": [{"text": "The user lives in Berlin.", "subject": "user", "owner": "user"}],
            "updates": [{"old": "The user lives in Paris.", "new": "The user lives in Berlin."}],
        },
    }
    case.update(changes)
    return case


def _write(path: Path, *lines: object) -> Path:
    text = "".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def _errors(*specs: Path) -> list[str]:
    with pytest.raises(DatasetError) as info:
        load_cases([str(s) for s in specs])
    return info.value.errors


# --- the bundled suites -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled() -> list[Case]:
    return load_cases([str(bundled_dataset_dir())])


def _suite(cases: list[Case], name: str) -> list[Case]:
    return [c for c in cases if Path(c.source or "").name == name]


def _contents(case: Case) -> list[str]:
    """Every text a case's messages carry, from strings and from text blocks."""
    out: list[str] = []
    for turn in case.turns:
        for msg in turn:
            content = msg.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return out


def _speakers(case: Case, role: str) -> set[str]:
    return {m["name"] for turn in case.turns for m in turn if m["role"] == role and m.get("name")}


def test_bundled_dataset_dir_is_the_repo_datasets_folder() -> None:
    path = bundled_dataset_dir()
    assert path == Path(__file__).resolve().parents[2] / "datasets"
    assert {p.name for p in path.glob("*.jsonl")} >= {"chat_en.jsonl", "chat_zh.jsonl", "working.jsonl"}


def test_bundled_suites_meet_minimum_counts(bundled: list[Case]) -> None:
    en, zh, working = (_suite(bundled, n) for n in ("chat_en.jsonl", "chat_zh.jsonl", "working.jsonl"))
    assert len(en) >= 62 and all(c.lang == "en" and c.path == "chat" for c in en)
    assert len(zh) >= 62 and all(c.lang == "zh" and c.path == "chat" for c in zh)
    assert len(working) >= 22 and all(c.path == "working" for c in working)
    assert sum(c.expect.no_memory for c in working) >= 4


def test_bundled_gold_is_internally_consistent(bundled: list[Case]) -> None:
    for case in bundled:
        assert gold_problems(case) == [], case.id
        facts = case.expect.facts
        assert facts is not None, case.id
        texts = {f.text for f in facts}
        seeds = {m.text for m in case.memories}
        for upd in case.expect.updates:
            assert upd.new in texts and upd.old in seeds, case.id
        for pair in case.expect.separate:
            assert all(t in texts or t in seeds for t in pair), case.id
        for item in [*case.memories, *facts]:
            assert (item.owner == "agent") == (item.subject == "assistant"), (case.id, item.text)
        if case.expect.no_memory:
            assert facts == [] and not case.expect.updates, case.id


def test_bundled_gold_follows_the_text_conventions(bundled: list[Case]) -> None:
    for case in bundled:
        for item in [*case.memories, *(case.expect.facts or [])]:
            where = (case.id, item.text)
            assert item.text.endswith((".", "。")), where
            if item.kind == "experience":
                assert case.path == "working" and item.subject == "assistant", where
            elif item.subject == "user":
                assert item.text.startswith(("The user", "用户")), where
            elif item.subject == "assistant":
                assert item.text.startswith(("The assistant", "助手")), where
            else:
                assert item.subject in item.text, where
            if case.lang == "zh":
                assert CJK.search(item.text), where
            else:
                assert not CJK.search(item.text.replace(item.subject, "")), where


def test_bundled_tags_match_what_each_case_contains(bundled: list[Case]) -> None:
    checks = {
        "user-named": lambda c: bool(_speakers(c, "user")),
        "user-unnamed": lambda c: not _speakers(c, "user"),
        "named-human": lambda c: bool(_speakers(c, "assistant")),
        "ai-suggestion": lambda c: any(f.subject == "assistant" and f.kind == "fact" for f in c.expect.facts),
        "adopt": lambda c: (
            any(f.subject == "assistant" for f in c.expect.facts) and any(f.subject == "user" for f in c.expect.facts)
        ),
        "tool-message": lambda c: any(
            m["role"] == "tool"
            or any(isinstance(b, dict) and b.get("type") in {"tool_use", "tool_result"} for b in m.get("content") or [])
            for t in c.turns
            for m in t
        ),
        "openai-parts": lambda c: any(isinstance(m.get("content"), list) for t in c.turns for m in t),
        "anthropic-blocks": lambda c: any(isinstance(m.get("content"), list) for t in c.turns for m in t),
        "separate": lambda c: bool(c.expect.separate),
        "update": lambda c: bool(c.expect.updates or c.expect.absent),
        "no-cross-update": lambda c: bool(c.memories and c.expect.separate),
        "l0-trap": lambda c: bool(c.expect.profile_excludes),
        "no-memory": lambda c: c.expect.no_memory and c.expect.facts == [],
        "multi-line": lambda c: any(len(text.splitlines()) > 1 for text in _contents(c)),
        "fake-label": lambda c: any(LABEL_LINE.match(line) for text in _contents(c) for line in text.splitlines()),
        "nameless-profile": lambda c: (
            "name" in c.expect.profile and c.expect.profile["name"] is None
            and not _speakers(c, "user") and bool(_speakers(c, "assistant"))
        ),
        "multi-turn": lambda c: len(c.turns) >= 2,
        "third-party": lambda c: any(
            f.subject not in {"user", "assistant"} | _speakers(c, "assistant") for f in c.expect.facts
        ),
        "other-script": lambda c: any(
            (CJK.search(n) is None) if c.lang == "zh" else not n.isascii()
            for n in _speakers(c, "user") | _speakers(c, "assistant") | {f.subject for f in c.expect.facts}
            if n not in {"user", "assistant"}
        ),
        "working": lambda c: c.path == "working",
        "experience": lambda c: any(f.kind == "experience" for f in c.expect.facts),
        "system-message": lambda c: any(m["role"] in ("system", "developer") for t in c.turns for m in t),
    }
    for case in bundled:
        assert case.tags, case.id
        for tag in case.tags:
            if tag in checks:
                assert checks[tag](case), (case.id, tag)
        assert ("working" in case.tags) == (case.path == "working"), case.id


@pytest.mark.parametrize("suite", ["chat_en.jsonl", "chat_zh.jsonl"])
def test_each_chat_suite_covers_every_required_tag(bundled: list[Case], suite: str) -> None:
    used = {tag for case in _suite(bundled, suite) for tag in case.tags}
    assert REQUIRED_CHAT_TAGS <= used, sorted(REQUIRED_CHAT_TAGS - used)


def test_every_tag_used_is_documented_in_the_readme(bundled: list[Case]) -> None:
    readme = (bundled_dataset_dir() / "README.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", readme, re.MULTILINE))
    used = {tag for case in bundled for tag in case.tags}
    assert used <= documented, sorted(used - documented)


# --- loading and its errors ---------------------------------------------------------------------


def test_a_valid_case_loads_with_source_line_and_defaults(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", "", _good())
    [case] = load_cases([str(path)])
    assert (case.source, case.line) == (str(path), 2)
    assert case.path == "chat" and case.meta == {} and case.expect.no_memory is False
    assert case.memories[0].subject == "user"  # derived from "The user ..."
    assert case.expect.facts[0].kind == "fact"


def test_seed_subject_and_owner_are_derived_from_the_text(tmp_path: Path) -> None:
    memories = [{"text": "用户住在北京。"}, {"text": "The assistant suggested tea."}, {"text": "Ana lives in Rome."}]
    path = _write(tmp_path / "x.jsonl", _good(memories=memories, expect={}))
    assert _errors(path) == [f"{path}:1: memories[2].subject: Field required"]
    _write(path, _good(memories=memories[:2], expect={}))
    [case] = load_cases([str(path)])
    assert [(m.subject, m.owner) for m in case.memories] == [("user", "user"), ("assistant", "agent")]


def test_invalid_json_is_reported_with_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", _good("a"), '{"id": "b", "lang": ')
    [error] = _errors(path)
    assert error.startswith(f"{path}:2: invalid JSON: ")


def test_a_line_that_is_not_an_object_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", "[1, 2]")
    assert _errors(path) == [f"{path}:1: case: expected a JSON object, got list"]


def test_missing_id_is_reported(tmp_path: Path) -> None:
    case = _good()
    del case["id"]
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [f"{path}:1: id: Field required"]


def test_wrong_owner_is_reported_with_its_field_path(tmp_path: Path) -> None:
    case = _good()
    case["expect"]["facts"].append({"text": "John is a nurse.", "subject": "John", "owner": "john"})
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [f"{path}:1: expect.facts[1].owner: Input should be 'user' or 'agent'"]


def test_unknown_field_is_reported(tmp_path: Path) -> None:
    case = _good()
    case["expect"]["fact"] = []
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [f"{path}:1: expect.fact: Extra inputs are not permitted"]


def test_duplicate_id_in_one_file_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", _good("a"), _good("b"), _good("a"))
    assert _errors(path) == [f"{path}:3: id: duplicate id 'a' (first on line 1)"]


def test_the_same_id_in_two_files_is_allowed(tmp_path: Path) -> None:
    one, two = _write(tmp_path / "one.jsonl", _good("a")), _write(tmp_path / "two.jsonl", _good("a"))
    assert [c.source for c in load_cases([str(one), str(two)])] == [str(one), str(two)]


def test_empty_turns_are_reported(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "x.jsonl",
        _good("a", turns=[]),
        _good("b", turns=[[]]),
        _good("c", turns=[[{"role": "user", "content": "hi"}, {"content": "no role"}]]),
    )
    errors = _errors(path)
    assert errors[0].startswith(f"{path}:1: turns: List should have at least 1 item")
    assert errors[1].startswith(f"{path}:2: turns[0]: List should have at least 1 item")
    assert errors[2] == f"{path}:3: turns[0][1]: a message needs a non-empty string 'role'"


def test_inconsistent_gold_is_reported(tmp_path: Path) -> None:
    case = _good()
    case["expect"]["updates"] = [{"old": "The user lives in Rome.", "new": "The user lives in Oslo."}]
    case["expect"]["facts"].append({"text": "The assistant likes tea.", "subject": "assistant", "owner": "user"})
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [
        f"{path}:1: expect.facts[1].owner: subject 'assistant' needs owner 'agent'",
        f"{path}:1: expect.updates[0].old: 'The user lives in Rome.' is not a seeded memory",
        f"{path}:1: expect.updates[0].new: 'The user lives in Oslo.' is not in expect.facts",
    ]


def test_an_update_is_checked_for_the_same_person_not_the_same_spelling(tmp_path: Path) -> None:
    """"The user's mom" moving is an update of "the user's mother"; the user's mother is not the user."""
    case = _good(memories=[{"text": "The user's mom lives in Leeds.", "subject": "The user's mom", "owner": "user"}])
    case["expect"] = {"facts": [{"text": "The user's mother lives in York.", "subject": "The user's mother",
                                 "owner": "user"}],
                      "updates": [{"old": "The user's mom lives in Leeds.", "new": "The user's mother lives in York."}]}
    assert [c.id for c in load_cases([str(_write(tmp_path / "ok.jsonl", case))])] == ["c1"]
    case["expect"]["facts"][0] |= {"text": "The user lives in York.", "subject": "user"}
    case["expect"]["updates"][0]["new"] = "The user lives in York."
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [f"{path}:1: expect.updates[0]: old and new have different subjects; a change never "
                             "crosses subjects"]


def test_subject_spelled_another_way_is_rejected(tmp_path: Path) -> None:
    case = _good()
    case["expect"]["facts"][0]["subject"] = "User"
    path = _write(tmp_path / "x.jsonl", case)
    assert _errors(path) == [f"{path}:1: expect.facts[0].subject: write 'user', not 'User'"]


def test_errors_of_every_line_and_file_are_collected_before_failing(tmp_path: Path) -> None:
    bad_owner = _good("b")
    bad_owner["memories"][0]["owner"] = "me"
    one = _write(tmp_path / "one.jsonl", _good("a"), "{oops", bad_owner, _good("a"))
    two = _write(tmp_path / "two.jsonl", _good("z", lang="fr"))
    missing = tmp_path / "missing.jsonl"
    with pytest.raises(DatasetError) as info:
        load_cases([str(one), str(two), str(missing)])
    errors = info.value.errors
    assert [e.split(": ")[0] for e in errors] == [f"{missing}", f"{one}:2", f"{one}:3", f"{one}:4", f"{two}:1"]
    assert str(info.value) == "\n".join(errors)
    assert isinstance(info.value, ValueError)


def test_a_directory_spec_loads_all_its_jsonl_files_in_name_order(tmp_path: Path) -> None:
    _write(tmp_path / "b.jsonl", _good("b1"), _good("b2"))
    _write(tmp_path / "a.jsonl", _good("a1"))
    (tmp_path / "notes.txt").write_text("not a dataset", encoding="utf-8")
    assert [c.id for c in load_cases([str(tmp_path)])] == ["a1", "b1", "b2"]


def test_a_file_named_twice_is_loaded_once(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.jsonl", _good("a1"))
    assert [c.id for c in load_cases([str(tmp_path), str(path)])] == ["a1"]


def test_no_cases_at_all_is_an_error(tmp_path: Path) -> None:
    empty = _write(tmp_path / "empty.jsonl", "")
    assert _errors(empty) == [f"no cases in {empty}"]
    (tmp_path / "d").mkdir()
    assert _errors(tmp_path / "d") == [f"{tmp_path / 'd'}: no *.jsonl files in this directory"]


def test_iter_cases_streams_until_the_first_bad_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", _good("a"), _good("b"), "not json", _good("c"))
    stream = iter_cases(path)
    assert [next(stream).id, next(stream).id] == ["a", "b"]
    with pytest.raises(DatasetError, match=r"x\.jsonl:3: invalid JSON"):
        next(stream)


# --- hashing ------------------------------------------------------------------------------------


def test_dataset_hash_is_stable_and_ignores_where_cases_were_read_from(tmp_path: Path) -> None:
    first = _write(tmp_path / "one.jsonl", _good("a"), _good("b"))
    explicit = _good("a", path="chat", meta={})
    second = _write(tmp_path / "two.jsonl", "", explicit, _good("b"))
    digest = dataset_hash(load_cases([str(first)]))
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert dataset_hash(load_cases([str(first)])) == digest
    assert dataset_hash(load_cases([str(second)])) == digest


def test_dataset_hash_changes_when_a_case_changes(tmp_path: Path) -> None:
    path = _write(tmp_path / "x.jsonl", _good("a"), _good("b"))
    before = dataset_hash(load_cases([str(path)]))
    changed = _good("b")
    changed["expect"]["facts"][0]["text"] = "The user lives in Berlin now."
    changed["expect"]["updates"][0]["new"] = "The user lives in Berlin now."
    _write(path, _good("a"), changed)
    assert dataset_hash(load_cases([str(path)])) != before
    _write(path, _good("b"), _good("a"))
    assert dataset_hash(load_cases([str(path)])) != before  # order is part of the dataset


def test_a_message_of_exactly_max_message_chars_is_bundled_and_loads_even_if_the_engine_refuses_it(monkeypatch):
    import hymem.client as client_module
    import hymem.messages as messages_module
    from evals.faults.plan import FaultPlan
    from evals.run.replay import CaseReplayer, UnitModels
    from hymem import HashEmbedder
    from hymem.offline import offline_lm
    from hymem.validation import DEFAULT_MAX_MESSAGE_CHARS

    real = messages_module.normalize_messages

    def off_by_one(messages, *, max_message_chars=None, max_write_chars=None):  # the bug: `size >= limit`
        return real(messages, max_message_chars=None if max_message_chars is None else max_message_chars - 1,
                    max_write_chars=max_write_chars)

    monkeypatch.setattr(messages_module, "normalize_messages", off_by_one)
    monkeypatch.setattr(client_module, "normalize_messages", off_by_one)
    case = next(c for c in load_cases([str(bundled_dataset_dir())]) if c.id == "en-075-message-at-the-limit")
    assert len(case.turns[0][0]["content"]) == DEFAULT_MAX_MESSAGE_CHARS  # loads: the loader counts sizes itself
    run = CaseReplayer(case, "planted", "offline",
                       UnitModels(lm_factory=lambda c: offline_lm(), embedder=HashEmbedder()), FaultPlan.parse("none"),
                       seed=0).run()
    assert run.status == "infra_error" and "max_message_chars" in (run.error or "")  # what the gate's rule sees
