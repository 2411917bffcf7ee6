"""Corpus adapters (LoCoMo, DuLeMon, MemoryBank, Synthetic-Persona-Chat) and the label audit.

Every adapter runs on a tiny fixture written here in its corpus' schema, and on the real file
when ../shared/datasets is present (skipped with a reason otherwise).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from evals.cases.adapters import ADAPTERS, dataset_name, iter_items, iter_spec, load_spec
from evals.cases.audit import AUDIT_FILE, audit, format_audit, write_audit
from evals.cases.dataset import Case, DatasetError, canonical_json, load_cases

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
real = pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is absent (the public corpora are not mounted)")


# --- fixtures in each corpus' schema -----------------------------------------------------------------


def _locomo_sample(sample_id: str = "conv-1") -> dict:
    long_session = [{"speaker": "Tim" if i % 2 else "John", "dia_id": f"D2:{i}", "text": f"Line {i}."}
                    for i in range(1, 36)]
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Tim", "speaker_b": "John",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Tim", "dia_id": "D1:1", "text": "I work at Stripe now."},
                {"speaker": "John", "dia_id": "D1:2", "text": "I am a nurse in Berlin and I like to collect jerseys."},
                {"speaker": "Tim", "dia_id": "D1:3", "text": "Look at my dog!", "blip_caption": "a photo of a dog"},
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": long_session,
            "session_3_date_time": "3:00 pm on 10 May, 2023",  # a date key with no session (caveat 6)
        },
        "observation": {
            "session_1_observation": {
                "Tim": [["Tim works at Stripe.", "D1:1"],
                        ["Tim collects jerseys.", "D1:2"],  # John said it: misattributed
                        ["Tim shows John his dog.", "D1:3"],  # relational: names both
                        ["Tim likes tea.", "D9:9"]],  # no such turn
                "John": [["John is a nurse in Berlin.", ["D1:2"]]],
            },
            "session_2_observation": {"Tim": [["Tim said line 1.", "D2:1"]], "John": []},
        },
        "session_summary": {}, "event_summary": {}, "qa": [],
    }


def write_locomo(tmp_path: Path, tail: str = "]") -> Path:
    path = tmp_path / "locomo10.json"
    path.write_text("[" + json.dumps(_locomo_sample(), indent=1) + tail, encoding="utf-8")
    return path


def write_dulemon(tmp_path: Path, extra_lines: str = "") -> Path:
    session = {
        "bot_persona": ["B1: 我 超级 爱 吃肉"],
        "user_said_persona": ["U1: 我 喜欢 运动", "U2: 我 在 IT 部门 工作", "U3: 我 叫 魏建功", "U4: 我 是 巨蟹 座"],
        "user_no_said_persona": ["U5: 我 有 两 个 孩子"],
        "conversation": ["Usr: 下午 一起 去 打球 吗\tU1", "Bot: 魏建功 ， 好 啊\tU3",
                         "Usr:我 最近 很 忙", "Bot: 跟 你 一样 也是 IT 行业 的 人 都 忙\tU2",
                         "Bot: 你 的 两 个 孩子 还好 吗\tU5", "Usr: 挺 好 的\tU5", "Bot: 我 超级 爱 吃肉\tB1"],
    }
    path = tmp_path / "samples.json"
    path.write_text(json.dumps(session, ensure_ascii=False) + "\n" + extra_lines, encoding="utf-8")
    return path


def write_memorybank(tmp_path: Path) -> Path:
    root = tmp_path / "memorybank"
    en = {" Ivy ": {"name": "Ivy", "summary": {}, "personality": {}, "overall_history": "",
                    "history": {"2023-04-28": [{"query": "I went swimming again.", "response": "Nice!"}],
                                "2023-04-27": [{"query": "Hi, I'm Ivy. I love badminton.",
                                                "response": "Hello Ivy! Maybe try listening to music too."}]},
                    "meta_information": {"name": "Ivy", "personality": "witty", "speaking_style": "brisk",
                                         "hobbies": "playing badminton, swimming, listening to music, and chess"}}}
    cn = {"宫晓燕": {"name": "宫晓燕", "history": {"2023-04-27": [{"query": "我叫宫晓燕，我喜欢打羽毛球。",
                                                            "response": "你好！"}]},
                  "meta_information": {"name": "宫晓燕", "personality": "聪明", "speaking_style": "活泼",
                                       "hobbies": "打羽毛球，下棋"}}}
    for lang, data in (("en", en), ("cn", cn)):
        (root / lang).mkdir(parents=True)
        (root / lang / f"memory_bank_{lang}.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return root


SPC_CONVERSATION = "\n".join([
    "* * User 1: * * Hi, I'm [User 1's name]. I run a dog obedience school.",
    "User 2: Hi [User 1's name], I'm [User 2's name]. I have a turtle named Timothy.",
    "(The next day)",
    "User 1: My recipe:",
    "two eggs and flour",
    "User 2: You run a bakery too? I just bought a bakery.",
])


def write_spc(tmp_path: Path, rows: int = 1, tail: bytes = b"") -> Path:
    path = tmp_path / "Synthetic-Persona-Chat_test.csv"
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["user 1 personas", "user 2 personas", "Best Generated Conversation"])
        for _ in range(rows):
            writer.writerow(["My name is lucy.\nI run a dog obedience school.\nI bought a bakery.\nI am a democrat.",
                             "I have a turtle named timothy.", SPC_CONVERSATION])
        writer.writerow(["", "", ""])  # no turns: skipped
    if tail:
        with path.open("ab") as fh:
            fh.write(tail)
    return path


def facts(case: Case) -> dict[str, str]:
    return {f.text: f.subject for f in case.expect.facts or []}


def assert_round_trips(cases: list[Case], tmp_path: Path) -> None:
    """The cases pass the curated suites' strict loader (shape and gold consistency)."""
    path = tmp_path / "roundtrip.jsonl"
    path.write_text("".join(canonical_json(c) + "\n" for c in cases), encoding="utf-8")
    assert [c.id for c in load_cases([path])] == [c.id for c in cases]


# --- LoCoMo ------------------------------------------------------------------------------------------


def test_locomo_makes_one_case_per_session_seen_from_speaker_a(tmp_path):
    spec = f"locomo:{write_locomo(tmp_path)}"
    cases = load_spec(spec)
    assert [c.id for c in cases] == ["conv-1:s1", "conv-1:s2"]
    first, second = cases
    assert first.source == spec and dataset_name(first) == "locomo"
    assert first.meta["sample_id"] == "conv-1" and first.meta["session"] == 1
    assert first.turns[0][0] == {"role": "user", "name": "Tim", "content": "I work at Stripe now."}
    assert first.turns[0][1]["role"] == "assistant" and first.turns[0][1]["name"] == "John"
    assert first.turns[0][2]["content"] == "Look at my dog! (shares a photo: a photo of a dog)"
    assert first.expect.profile == {"name": "Tim"}
    assert facts(first) == {"The user works at Stripe.": "user", "The user collects jerseys.": "user",
                            "The user shows John his dog.": "user", "The user likes tea.": "user",
                            "John is a nurse in Berlin.": "John"}
    assert all(f.owner == "user" for f in first.expect.facts)
    assert [len(w) for w in second.turns] == [18, 17] and "multi-turn" in second.tags
    assert_round_trips(cases, tmp_path)


def test_locomo_flags_labels_whose_evidence_another_speaker_said(tmp_path):
    case = load_spec(f"locomo:{write_locomo(tmp_path)}")[0]
    flagged = {f["original"]: f["reasons"] for f in case.meta["flagged"]}
    assert flagged == {"Tim collects jerseys.": ["evidence_spoken_by_other_speaker"],
                       "Tim shows John his dog.": ["names_both_speakers"],
                       "Tim likes tea.": ["evidence_missing"]}


def test_locomo_clean_gold_leaves_out_misattributed_and_unevidenced_labels(tmp_path):
    case = load_spec(f"locomo:{write_locomo(tmp_path)}", gold="clean")[0]
    assert facts(case) == {"The user works at Stripe.": "user", "The user shows John his dog.": "user",
                           "John is a nurse in Berlin.": "John"}
    assert case.meta["gold"] == "clean"


# --- DuLeMon -----------------------------------------------------------------------------------------


def test_dulemon_user_facts_come_from_u_tags_even_on_bot_turns(tmp_path):
    (case,) = load_spec(f"dulemon:{write_dulemon(tmp_path)}")
    assert case.lang == "zh" and case.id == "dulemon-001"
    assert case.turns[0][0] == {"role": "user", "content": "下午一起去打球吗"}
    assert case.turns[0][2] == {"role": "user", "content": "我最近很忙"}
    assert case.turns[0][3] == {"role": "assistant", "content": "跟你一样也是IT行业的人都忙"}
    assert facts(case) == {"用户喜欢运动。": "user", "用户在IT部门工作。": "user", "用户有两个孩子。": "user"}
    assert case.expect.profile == {"name": "魏建功"}  # a name fact is the profile, as in the curated suites
    assert "bot-states-user-fact" in case.tags
    assert case.meta["excluded"] == {"bot_persona": 1, "user_fact_not_grounded": 1}
    assert [f["reasons"] for f in case.meta["flagged"]] == [["unsaid_user_fact_first_stated_by_bot"]]
    assert facts(load_spec(f"dulemon:{write_dulemon(tmp_path)}", gold="clean")[0]) == {
        "用户喜欢运动。": "user", "用户在IT部门工作。": "user"}
    assert_round_trips([case], tmp_path)


def test_dulemon_reports_a_bad_line_as_skipped(tmp_path):
    path = write_dulemon(tmp_path, extra_lines="{not json\n")
    items = list(iter_items(f"dulemon:{path}"))
    assert [type(i).__name__ for i in items] == ["Case", "Skipped"]
    assert items[1].id == "dulemon-002" and "invalid JSON" in items[1].reason


# --- MemoryBank ----------------------------------------------------------------------------------------


def test_memorybank_reads_both_languages_with_hobbies_as_user_facts(tmp_path):
    en, zh = load_spec(f"memorybank:{write_memorybank(tmp_path)}")
    assert (en.id, en.lang, zh.id, zh.lang) == ("en-01-ivy", "en", "zh-01", "zh")
    assert en.meta["days"] == ["2023-04-27", "2023-04-28"] and len(en.turns) == 2  # a write per day, in date order
    assert en.turns[0][0] == {"role": "user", "name": "Ivy", "content": "Hi, I'm Ivy. I love badminton."}
    assert en.turns[0][1] == {"role": "assistant", "content": "Hello Ivy! Maybe try listening to music too."}
    assert en.expect.profile == {"name": "Ivy"}
    assert facts(en) == {"The user enjoys playing badminton.": "user", "The user enjoys swimming.": "user",
                         "The user enjoys listening to music.": "user", "The user enjoys chess.": "user"}
    assert {f["original"]: f["reasons"] for f in en.meta["flagged"]} == {
        "listening to music": ["stated_only_by_assistant"], "chess": ["not_stated_by_user"]}
    assert facts(zh) == {"用户喜欢打羽毛球。": "user", "用户喜欢下棋。": "user"}
    assert en.meta["excluded"] == {"personality": 1, "speaking_style": 1}
    clean = load_spec(f"memorybank:{tmp_path / 'memorybank' / 'en'}", gold="clean")[0]
    assert facts(clean) == {"The user enjoys playing badminton.": "user", "The user enjoys swimming.": "user"}
    assert_round_trips([en, zh], tmp_path)


# --- Synthetic-Persona-Chat --------------------------------------------------------------------------------


def test_persona_chat_names_speakers_and_rewrites_personas_by_speaker(tmp_path):
    items = list(iter_items(f"persona_chat:{write_spc(tmp_path)}"))
    case, skipped = items
    assert skipped.id == "test-0002" and "no 'User 1:'" in skipped.reason
    other = case.meta["names"]["other"]
    assert case.meta["names"]["user"] == "Lucy" and case.expect.profile == {"name": "Lucy"}
    assert [m["role"] for m in case.turns[0]] == ["user", "assistant", "user", "assistant"]
    assert case.turns[0][0]["content"] == "Hi, I'm Lucy. I run a dog obedience school."
    assert case.turns[0][1] == {"role": "assistant", "name": other,
                                "content": f"Hi Lucy, I'm {other}. I have a turtle named Timothy."}
    assert case.turns[0][2]["content"] == "My recipe:\ntwo eggs and flour"  # continuation joined, stage dropped
    assert facts(case) == {"The user runs a dog obedience school.": "user", "The user bought a bakery.": "user",
                           "The user is a democrat.": "user", f"{other} has a turtle named timothy.": other}
    assert {f["original"]: f["reasons"] for f in case.meta["flagged"]} == {
        "I bought a bakery.": ["voiced_only_by_other_speaker"], "I am a democrat.": ["not_voiced"]}
    clean = load_spec(f"persona_chat:{write_spc(tmp_path)}", gold="clean")[0]
    assert set(facts(clean)) == {"The user runs a dog obedience school.", f"{other} has a turtle named timothy."}
    assert_round_trips([case], tmp_path)


# --- selection, streaming, specs ------------------------------------------------------------------------


def test_sample_is_deterministic_and_limit_caps(tmp_path):
    spec = f"persona_chat:{write_spc(tmp_path, rows=12)}"
    ids = [c.id for c in load_spec(spec)]
    first = [c.id for c in load_spec(spec, sample=4, seed=7)]
    assert first == [c.id for c in load_spec(spec, sample=4, seed=7)]
    assert len(first) == 4 and set(first) <= set(ids) and first == sorted(first, key=ids.index)
    assert any([c.id for c in load_spec(spec, sample=4, seed=s)] != first for s in range(8, 12))
    assert [c.id for c in load_spec(spec, limit=3)] == ids[:3]
    assert len(load_spec(spec, sample=4, seed=7, limit=2)) == 2
    assert len(load_spec(spec, sample=100)) == len(ids)


@pytest.mark.parametrize("kind", ["locomo", "dulemon", "persona_chat"])
def test_iter_spec_yields_the_first_case_before_reading_a_broken_tail(tmp_path, kind):
    padding = "x" * 300_000
    if kind == "locomo":
        path = write_locomo(tmp_path, tail=f', {{"pad": "{padding}", "broken": ')
    elif kind == "dulemon":
        path = write_dulemon(tmp_path, extra_lines=json.dumps({"pad": padding}) + "\n")
        path.write_bytes(path.read_bytes() + b"\xff\xfe not utf-8\n")
    else:
        path = write_spc(tmp_path, rows=1, tail=(padding + "\n").encode() + b"\xff\xfe,\n")
    stream = iter_spec(f"{kind}:{path}")
    assert isinstance(next(stream), Case)
    with pytest.raises(DatasetError):
        list(stream)


def test_plain_jsonl_specs_go_to_the_curated_loader(tmp_path):
    case = load_spec(f"dulemon:{write_dulemon(tmp_path)}")[0]
    path = tmp_path / "suite.jsonl"
    path.write_text(canonical_json(case) + "\n", encoding="utf-8")
    (loaded,) = load_spec(str(path))
    assert loaded.id == case.id and loaded.source == str(path)


def test_bad_specs_are_dataset_errors(tmp_path):
    with pytest.raises(DatasetError, match="unknown dataset kind 'nope'"):
        load_spec("nope:/x")
    with pytest.raises(DatasetError, match="no such file"):
        load_spec(f"locomo:{tmp_path / 'missing.json'}")
    with pytest.raises(DatasetError, match="top level"):
        (tmp_path / "obj.json").write_text("{}")
        load_spec(f"locomo:{tmp_path / 'obj.json'}")
    with pytest.raises(DatasetError, match="missing CSV column"):
        (tmp_path / "x.csv").write_text("a,b\n1,2\n")
        load_spec(f"persona_chat:{tmp_path / 'x.csv'}")
    with pytest.raises(DatasetError, match="--sample"):
        load_spec(f"dulemon:{write_dulemon(tmp_path)}", sample=0)
    assert set(ADAPTERS) == {"locomo", "dulemon", "memorybank", "persona_chat"}


# --- the audit ----------------------------------------------------------------------------------------------


def test_audit_lists_flagged_labels_with_reasons_and_writes_parquet(tmp_path):
    report = audit(f"locomo:{write_locomo(tmp_path)}")
    assert report.counts["cases"] == 2 and report.counts["labels"] == 6 and report.counts["skipped"] == 0
    assert report.by_reason == {"evidence_spoken_by_other_speaker": 1, "names_both_speakers": 1,
                                "evidence_missing": 1}
    (wrong,) = [f for f in report.flagged if f.reason == "evidence_spoken_by_other_speaker"]
    assert (wrong.case_id, wrong.label_text, wrong.subject, wrong.evidence, wrong.dropped_by_clean) == (
        "conv-1:s1", "The user collects jerseys.", "user", "D1:2 (John)", True)
    path = write_audit(report, tmp_path / "out")
    assert path == tmp_path / "out" / AUDIT_FILE
    table = pq.read_table(path)
    assert table.column_names == ["dataset", "case_id", "label_text", "original_text", "subject", "reason",
                                  "evidence", "dropped_by_clean"]
    assert sorted(table.column("reason").to_pylist()) == sorted(report.by_reason)
    text = format_audit(report)
    assert "evidence_spoken_by_other_speaker" in text and "'Tim collects jerseys.'" in text


def test_audit_of_a_clean_corpus_writes_an_empty_table_and_lists_skips(tmp_path):
    report = audit(f"persona_chat:{write_spc(tmp_path)}", gold="clean")
    assert report.skipped == [("test-0002", "no 'User 1:' / 'User 2:' turns")]
    assert "skipped (1):" in format_audit(report)
    assert audit(f"dulemon:{write_dulemon(tmp_path)}").counts["excluded:bot_persona"] == 1
    suite = tmp_path / "suite.jsonl"
    suite.write_text(json.dumps({"id": "c1", "lang": "en", "user_id": "tim", "turns": [[{"role": "user", "content": "Hi"}]],
                                 "expect": {"facts": [{"text": "The user says hi."}]}}) + "\n")
    plain = audit(str(suite))
    assert plain.counts["cases"] == 1 and plain.flagged == []
    table = pq.read_table(write_audit(plain, tmp_path / "out"))
    assert table.num_rows == 0 and "reason" in table.column_names


# --- the real corpora ------------------------------------------------------------------------------------------


@real
def test_real_locomo_audit_finds_the_63_labels_spoken_by_the_other_speaker(tmp_path):
    spec = f"locomo:{SHARED / 'locomo' / 'locomo10.json'}"
    report = audit(spec)
    assert report.counts["cases"] == 272 and report.counts["labels"] == 2541
    assert report.by_reason["evidence_spoken_by_other_speaker"] == 63
    assert report.by_reason["names_both_speakers"] == 442
    assert report.overlaps["evidence_spoken_by_other_speaker & names_both_speakers"] == 18
    jon = [f for f in report.flagged if f.original_text == "Jon lost his job at Door Dash."]
    assert [(f.case_id, f.reason, f.label_text) for f in jon] == [
        ("conv-30:s6", "evidence_spoken_by_other_speaker", "The user lost his job at Door Dash.")]
    assert pq.read_table(write_audit(report, tmp_path)).num_rows == len(report.flagged)
    clean = load_spec(spec, gold="clean", sample=40, seed=3)
    kept = {f.text for c in clean for f in c.expect.facts}
    assert not kept & {f.label_text for f in report.flagged if f.dropped_by_clean}


@real
@pytest.mark.parametrize("spec,n,sample", [
    ("locomo:locomo/locomo10.json", 10, True), ("dulemon:dulemon_sample/samples.json", 20, True),
    ("memorybank:memorybank", 30, True), ("persona_chat:synthetic_persona_chat", 25, False),
])
def test_real_corpora_give_valid_cases_with_subjects_by_speaker(tmp_path, spec, n, sample):
    kind, rel = spec.split(":")
    spec = f"{kind}:{SHARED / rel}"
    cases = load_spec(spec, gold="clean", limit=n)
    assert len(cases) == n
    for case in cases:
        users = {m.get("name") for turn in case.turns for m in turn if m["role"] == "user"}
        others = {m.get("name") for turn in case.turns for m in turn if m["role"] == "assistant"}
        assert max(len(t) for t in case.turns) <= 30
        for fact in case.expect.facts:
            assert fact.owner == "user"
            if fact.subject == "user":
                assert "用户" in fact.text or "the user" in fact.text.lower()
            else:
                assert fact.subject in others and fact.subject not in users and fact.subject in fact.text
    assert_round_trips(cases, tmp_path)
    if sample:  # (a sample reads the whole corpus: skipped for the 2,000-row CSVs to keep this file fast)
        assert [c.id for c in load_spec(spec, sample=5, seed=1)] == [c.id for c in load_spec(spec, sample=5, seed=1)]
