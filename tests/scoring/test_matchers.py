"""The fact matchers through their public interfaces: one subject definition, `matcher eval` on
real pairs files, the semantic matcher's checks, and the LLM judge against a scripted model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.scoring import facts_frame, score_pairs
from evals.scoring.judge import JudgeMatcher
from evals.scoring.matcher import TextMatcher
from evals.scoring.pairs import load_pairs, split_of
from hymem.subjects import same_subject, split_subject, subject_of
from hymem.testing import ScriptedLM
from tests.scoring.test_scoring import NURSE, fact, one_turn


@pytest.mark.parametrize(("text", "subject"), [
    ("The AI assistant suggested tea.", "assistant"), ("The assistant suggested tea.", "assistant"),
    ("User likes tea", "user"), ("The user's mother is a nurse.", "the user's mother"),
    # a bare "AI" / "Agent" with its verb is the assistant; with a plural noun after it, nobody
    ("AI suggested restarting the pod", "assistant"), ("AI recommends pgbouncer", "assistant"),
    ("Agent recommended pgbouncer", "assistant"), ("AI will remind the user", "assistant"),
    ("AI tools are popular", None), ("AI is the user's favourite topic.", "user"),
    ("The user's friend Jack is a chef.", "Jack"), ("Jack, the user's friend, is a chef.", "Jack"),
    ("John is a pilot.", "John"), ("用户的姐姐小丽是律师。", "小丽"), ("用户的妈妈是护士。", "用户的母亲"), ("The user's mum is a nurse.", "the user's mother"),
    ("王芳是护士。", "王芳"), ("助手建议用户早睡。", "assistant"), ("On Sundays, the user plays tennis.", "user"),
    ("In 2020 the user moved.", None),
    # a sentence that opens with a thing is about the subject it names as agent or owner
    ("The fence was painted by the user.", "user"), ("旧车被用户卖掉了。", "user"), ("分公司由用户管理。", "user"),
    ("Marrakech is the user's favourite city.", "user"), ("麦香坊是用户面包店的名字。", "user"),
    ("Jack is the user's friend.", "Jack"), ("大伟是用户的哥哥。", "大伟"), ("Mia was hired by a hospital.", "Mia"),
    ("The user has a brother who is a plumber.", "the user's brother"), ("用户有个哥哥是水管工。", "用户的哥哥"),
    ("The user has a sister.", "user"), ("该用户在银行工作。", "user"), ("「用户的女儿今年上初中」", "用户的女儿"),
    # mem0-style memories name no subject, or a relative with no "the user's"; a capitalised verb is no name
    ("Works at Stripe as a backend engineer", None), ("Is vegetarian", None), ("Allergic to peanuts", None),
    ("Job: nurse", None), ("最近在瘦身", None), ("对现在的工作不满意", None), ("Mother is a nurse", "the user's mother"),
    ("母亲是护士", "用户的母亲"), ("Priya lives in Leeds.", "Priya"), ("高翔要在下周去青岛出差", "高翔"),
    # ChatGPT-memory style: a verb, a particle, a contraction or a label opens; a name is followed by a verb
    ("Loves sushi", None), ("Cultivates orchids", None), ("Enjoys hiking", None), ("Grew up in NOLA", None),
    ("Can't stand cilantro", None), ("Job title: product manager", None), ("- Supports Aston Villa", None),
    ("Speaks French", None), ("Started learning Spanish", None), ("James cooks dinner", "James"),
    ("Charles likes sushi", "Charles"), ("Hans works at SAP", "Hans"), ("Thomas plays chess", "Thomas"),
    ("Mia recently moved to Oslo", "Mia"),
    # an adverb opens no name, and a name is followed by its verb ("Prefers dark mode" has none)
    ("Never drinks coffee.", None), ("Previously worked as cabin crew", None), ("Usually runs at night", None),
    ("Prefers dark mode", None), ("Jogs daily", None), ("Vegetarian since 2019", None), ("Owns two cats", None),
    ("Mia actually likes jazz", "Mia"), ("Anna ate sushi", "Anna"), ("Kelly moved to Oslo", "Kelly"),
    ("Emily works at Stripe", "Emily"), ("Mia who lives in Oslo", "Mia"),
    # a label opens a mem0-style memory; a past verb with a capitalised object is no first name and surname
    ("Favourite movies are Inception and Interstellar", None), ("Birthday is March 3", None),
    ("Visited Paris in 2019", None), ("Joined Google in 2020", None), ("Cooks Italian food often", None),
    ("阿芳还在抽。", "阿芳"), ("小李都在家", "小李"), ("Mohammed runs a shop", "Mohammed"), ("Reed Hastings founded Netflix", "Reed Hastings"), ("Ted likes jazz", "Ted"),
    # a relative's name opens like any Chinese name; a time word after the relation is no name
    ("用户的奶奶以前是裁缝。", "用户的奶奶"), ("用户的母亲因病住院了。", "用户的母亲"), ("弟弟的职业是律师", "用户的弟弟"), ("Mother's name is Ann", "the user's mother"),
    ("用户的朋友李雷是医生", "李雷"),
    # a passive whose agent is the assistant, about the user's thing, is the assistant's act
    ("The user's resignation letter was drafted by the assistant.", "assistant"),
    ("The user's luggage was lost by the airline.", "user"), ("The user was praised by the assistant.", "user"),
    # a relative's relative is named by the one kinship term for it
    ("The user's mother's mother is Irish.", "the user's grandmother"),
    ("The user's maternal grandmother is Irish.", "the user's grandmother"),
    ("The user's stepdad is a mechanic.", "the user's stepfather"), ("用户妈妈的兄弟是厨师。", "用户的舅舅"),
    ("用户丈夫的父亲是退休教师。", "用户的公公"), ("The user's friend's mother is a nurse.", "the user's friend's mother"),
    # a compound kinship word is one relation, not its first part
    ("The user's mother-in-law lives in Bath.", "the user's mother-in-law"), ("The user's grandson is three.", "the user's grandson"),
    ("The user's brother-in-law Tom is a chef.", "Tom"), ("stepbrother breeds alpacas", "the user's stepbrother"),
    ("用户的外甥女在读高中。", "用户的外甥女"), ("大飞是用户的外甥。", "大飞"), ("用户的侄子在上海读书。", "用户的侄子"),
    # an irregular verb opening a subjectless memory is no name; Drew is
    ("Got promoted to head chef", None), ("Went to Peru in May", None), ("Drew is a painter.", "Drew"),
    # after the user's thing, a named agent does it
    ("The user's bathroom was tiled by Dario.", "Dario"), ("用户浴室的瓷砖是由马俊贴的。", "马俊"),
    ("用户的钱包被小偷偷走了。", "user"), ("用户被马俊骗了。", "user"),
    # an ex is not the relation itself; a late father is
    ("The user's ex-wife lives in Leeds.", "the user's ex-wife"), ("用户的前男友是医生。", "用户的前男朋友"),
    ("The user's late father was a miner.", "the user's father"),
    # a relative named right after a reporting frame is the subject; the one reported on is not
    ("The user mentioned that their aunt works as a taxidermist.", "the user's aunt"), ("用户提到儿子性格腼腆", "用户的儿子"),
    ("The user reported their neighbour to the council.", "user"), ("用户表示自己很喜欢喝茶", "user"),
    ("user grandma is 92", "the user's grandmother"), ("院子里的枣树是由用户的父亲种的", "用户的父亲")])
def test_one_definition_names_the_subject_of_a_sentence(text, subject):
    assert subject_of(text) == subject


def test_the_subject_is_split_off_so_text_is_matched_on_what_is_said():
    assert split_subject("The user lives in Berlin.") == ("user", " lives in Berlin.")
    assert same_subject("User", "用户") and not same_subject("John", "user")


def test_a_relative_label_is_the_relative_the_sentence_rule_names():
    """A label "the user's mom" and a sentence about "the user's mother" are one person, in both languages, so the
    guard never refuses a same-person update over a spelling and the dataset checks read labels as the engine does."""
    assert same_subject("The user's mom", "the user's mother")
    assert same_subject("The user's mom", subject_of("The user's mother moved to York."))
    assert same_subject("用户的妈妈", "用户的母亲") and same_subject("用户妈妈", subject_of("用户的母亲是护士。"))
    assert not same_subject("The user's mom", "the user's sister") and not same_subject("用户的妈妈", "用户")
    assert not same_subject("The user's friend Jack", "the user's friend")  # a named friend is that person


def _pairs_file(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    return path


def _pair(i: int, gold: str, pred: str, same: bool, lang: str = "en", category: str = "c",
          subjects: tuple[str, str] = ("user", "user")) -> dict:
    return {"id": f"p{i}", "lang": lang, "category": category, "gold": {"text": gold, "subject": subjects[0]},
            "pred": {"text": pred, "subject": subjects[1]}, "same": same}


PAIRS = [_pair(1, "The user lives in Berlin.", "The user lives in Berlin.", True, category="exact"),
         _pair(2, "The user lives in Berlin.", "The user lives in Paris.", False, category="entity_sub"),
         _pair(3, "The user likes coffee.", "John likes coffee.", False, category="subject_swap",
               subjects=("user", "John")),
         _pair(4, "用户住在深圳。", "用户住在深圳。", True, lang="zh", category="exact"),
         _pair(5, "用户吃辣。", "用户不吃辣。", False, lang="zh", category="negation")]


def test_matcher_eval_writes_agreement_with_cis_per_language_and_category(tmp_path, capsys):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(pairs), "--out", str(tmp_path / "out")]) == 0
    frame = pd.read_parquet(tmp_path / "out" / "agreement.parquet")
    assert list(frame.columns) == ["matcher", "split", "lang", "category", "metric", "value", "ci_low", "ci_high", "n"]
    total = frame[(frame.lang == "all") & (frame.category == "all")].set_index("metric")
    assert total.loc["agreement", "value"] == 1.0 and total.loc["agreement", "n"] == 5  # another file: all pairs
    assert set(frame.metric) == {"agreement", "precision", "recall"} and set(frame.split) == {"all"}
    assert {"en", "zh", "all"} == set(frame.lang) and {"negation", "group:same", "group:different"} <= set(frame.category)
    assert "agreement 1.000" in capsys.readouterr().out


def test_matcher_eval_split_selects_by_the_fixed_hash_of_the_id(tmp_path):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(pairs), "--split", "calibration",
                 "--out", str(tmp_path / "o")]) == 0
    n = pd.read_parquet(tmp_path / "o" / "agreement.parquet").query("lang == 'all' and category == 'all'")["n"].max()
    assert n == sum(split_of(p["id"]) == "calibration" for p in PAIRS)
    assert split_of("en-exact-01") in ("heldout", "calibration")


def test_a_pairs_file_saved_with_a_byte_order_mark_and_blank_lines_loads(tmp_path):
    path = tmp_path / "excel.jsonl"
    path.write_text("\n".join(json.dumps(p, ensure_ascii=False) for p in PAIRS) + "\n\n", encoding="utf-8-sig")
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(path), "--out", str(tmp_path / "o")]) == 0
    frame = pd.read_parquet(tmp_path / "o" / "agreement.parquet")
    assert frame.query("lang == 'all' and category == 'all' and metric == 'agreement'")["n"].item() == len(PAIRS)


@pytest.mark.parametrize(("line", "problem"), [
    ('{"id": "x", "lang": "fr", "category": "c", "gold": {"text": "a", "subject": "user"}, '
     '"pred": {"text": "b", "subject": "user"}, "same": true}', "lang: Input should be 'en' or 'zh'"),
    ('{"id": "x", "lang": "en", "category": "c", "gold": {"text": "a", "subject": "user"}, '
     '"pred": {"text": "b", "subject": "user"}, "same": "yes"}', "same: Input should be a valid boolean"),
    ('{"id": "x", "lang": "en", "category": "c", "gold": {"text": " ", "subject": "user"}, '
     '"pred": {"text": "b", "subject": "user"}, "same": true}', "gold.text: Value error, must not be blank"),
    ('{"id": "x", "lang": "en", "category": "all", "gold": {"text": "a", "subject": "user"}, '
     '"pred": {"text": "b", "subject": "user"}, "same": true}', "category: Value error, 'all' is reserved"),
    ("not json", "(line): not JSON")])
def test_a_bad_pairs_line_is_exit_2_with_file_line_field_problem(tmp_path, capsys, line, problem):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(PAIRS[0]) + "\n" + line + "\n", encoding="utf-8")
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(path), "--out", str(tmp_path / "o")]) == 2
    assert f"{path}:2: {problem}" in capsys.readouterr().err


def test_an_out_that_is_a_file_is_exit_2_before_any_matching(tmp_path, capsys):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", "text", "--pairs", str(pairs), "--out", str(pairs)]) == 2
    err = capsys.readouterr().err
    assert f"--out {pairs}: cannot create the directory" in err and "Traceback" not in err


def test_matcher_fit_refuses_an_out_it_cannot_write_before_fitting(tmp_path, capsys):
    assert main(["matcher", "fit", "--out", str(tmp_path / "missing" / "params.json")]) == 2
    assert "no such directory" in capsys.readouterr().err


@pytest.mark.slow
def test_matcher_eval_says_when_pairs_are_those_the_semantic_matcher_was_fitted_on(tmp_path, capsys):
    calibration = load_pairs(split="calibration")[:3]  # a copy of bundled pairs under another name
    pairs = _pairs_file(tmp_path / "mine.jsonl", [*(p.model_dump() for p in calibration), PAIRS[0]])
    assert main(["matcher", "eval", "--matcher", "semantic", "--pairs", str(pairs), "--out", str(tmp_path / "o")]) == 0
    assert "in-sample: 3 of 4 pairs are in the calibration split" in capsys.readouterr().out
    heldout = _pairs_file(tmp_path / "h.jsonl", [p.model_dump() for p in load_pairs(split="heldout")[:3]])
    assert main(["matcher", "eval", "--matcher", "semantic", "--pairs", str(heldout), "--out", str(tmp_path / "h")]) == 0
    assert "in-sample" not in capsys.readouterr().out


def test_an_unknown_matcher_spec_is_exit_2(tmp_path, capsys):
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", "fuzzy", "--pairs", str(pairs), "--out", str(tmp_path / "o")]) == 2
    assert "unknown spec 'fuzzy'" in capsys.readouterr().err


def test_the_bundled_pairs_load_and_both_splits_hold_both_languages():
    pairs = load_pairs()
    assert len(pairs) >= 500
    for split in ("heldout", "calibration"):
        assert {p.lang for p in pairs if p.split == split} == {"en", "zh"}


def test_a_case_is_prepared_once_with_all_its_texts():
    seen: list[tuple[list[str], list[str]]] = []

    class Counting(TextMatcher):
        def prepare(self, gold, pred):
            seen.append((list(gold), list(pred)))

    case, run = one_turn([NURSE, fact("The user works at Stripe.")], [fact("The user is a nurse in Berlin.")])
    score_pairs([(case, run)], Counting())
    assert len(seen) == 1 and "John is a nurse in Berlin." in seen[0][0]


# ------------------------------------------------------------------ the LLM judge, against a scripted model
def _judge(replies: list[str]) -> tuple[JudgeMatcher, ScriptedLM]:
    lm = ScriptedLM(replies)
    return JudgeMatcher(lm, "scripted"), lm


def test_the_judge_makes_one_call_per_gold_fact_and_its_decisions_land_in_facts():
    gold = [NURSE, fact("The user works at Stripe.")]
    stored = [fact("The user is a Stripe employee."), fact("John works as a nurse in Berlin.", "John")]
    case, run = one_turn(gold, stored)
    # One call per gold text (the candidates are every prediction-side text of the case, in order).
    judge, lm = _judge([json.dumps({"same": [False, True]}), json.dumps({"same": [True, False]})])
    frame = facts_frame([(case, run)], judge)
    assert lm.calls == 2 and judge.errors == 0
    assert all("[[ ## gold_fact ## ]]" in p for p in lm.prompts())
    stored_rows = frame[frame.stage == "stored"].set_index("gold_text")
    assert stored_rows.loc["John is a nurse in Berlin.", "pred_text"] == "John works as a nurse in Berlin."
    assert stored_rows.loc["The user works at Stripe.", "pred_text"] == "The user is a Stripe employee."
    assert set(frame.matcher) == {"llm:scripted"}


def test_a_malformed_judge_reply_decides_nothing_and_is_counted():
    case, run = one_turn([fact("The user works at Stripe.")], [fact("The user is a Stripe employee.")])
    judge, lm = _judge([json.dumps({"same": [True, True, True]})])
    frame = facts_frame([(case, run)], judge)
    assert judge.errors == 1 and not frame[frame.stage == "stored"].matched.any()
    assert frame.note.str.startswith("judge_error").all()  # every row the failed call was to decide says so
    assert judge.health()["judge_errors"] == 1 and "JudgeError" in judge.health()["judge_first_error"]


@pytest.fixture(scope="module")
def judge_server():
    """An OpenAI-compatible judge on 127.0.0.1 whose model name picks its reply: `judge-ok` says every
    candidate is the gold fact, `judge-prose` answers in prose (no JSON). Counts requests per gold fact."""
    import re
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    asked: list[tuple[str, int]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            prompt = body["messages"][-1]["content"]
            prompt = prompt if isinstance(prompt, str) else "".join(part.get("text", "") for part in prompt)
            found = re.search(r"\[\[ ## gold_fact ## \]\]\n(.*?)\n\n\[\[ ## candidates ## \]\]\n(.*?)\n\n", prompt, re.S)
            candidates = json.loads(found.group(2)) if found else []
            asked.append((found.group(1) if found else "", len(candidates)))
            text = json.dumps({"same": [True] * len(candidates)}) if body["model"] == "judge-ok" else "Same, I think."
            data = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                            "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", asked
    httpd.shutdown()
    httpd.server_close()


def test_a_run_whose_judge_fails_says_so_in_manifest_summary_facts_and_terminal(tmp_path, judge_server, capsys):
    url, _ = judge_server
    out = tmp_path / "run"
    code = main(["run", "--dataset", "datasets/chat_en.jsonl", "--limit", "2", "--faults", "none", "--embedder",
                 "hash", "--matcher", f"llm:openai/judge-prose@{url}", "--out", str(out), "--no-progress"])
    assert code == 1  # every judge call failed: the fact scores are no measurement (issue 34), the report is written
    card = json.loads((out / "manifest.json").read_text())["matcher"]
    assert card["judge_calls"] > 0 and card["judge_errors"] == card["judge_calls"]
    failed = f"The judge failed on {card['judge_errors']} of {card['judge_calls']} calls"
    summary = (out / "summary.md").read_text()
    assert f"**{failed}" in summary
    # its spend is said apart: the run's tokens_total counts the engine's calls only
    assert card["judge_tokens"] == 15 * card["judge_calls"] and f"({card['judge_tokens']} tokens" in summary
    printed = capsys.readouterr().out
    assert failed in printed and "NO measured agreement" in printed and "the judge FAILED on" in printed
    facts = pd.read_parquet(out / "facts.parquet")
    assert facts[facts.gold_text.notna()].note.str.startswith("judge_error").all()
    from evals.report.compare import judge_note, load_run

    assert "The judge failed on some calls of run" in judge_note([load_run(out)])  # compare and gate say it too


def test_the_judge_through_the_provider_plumbing_logs_site_judge(tmp_path):
    from evals.arms.accounting import AccountingLM, AttemptLog, price_table
    from evals.arms.providers import Provider, ProviderConfig

    provider = Provider(ProviderConfig(name="scripted", model="openai/scripted", api_base="http://127.0.0.1:9/v1"))
    log = AttemptLog(provider="judge:scripted", case_id="(matcher)")
    scripted = ScriptedLM([json.dumps({"same": [True]})])
    lm = AccountingLM.wrap(scripted, provider=provider, log=log, injector=None, cache=None, retries=True,
                           prices=price_table())
    judge = JudgeMatcher(lm, "scripted", log)
    assert judge.same_fact("The user works at Stripe.", "user", "The user is a Stripe employee.", "user")
    attempts = judge.attempts_frame()
    assert list(attempts.site) == ["judge"] and list(attempts.status) == ["ok"]


def _cached_judge(replies: list, cache_file: Path) -> tuple[JudgeMatcher, ScriptedLM]:
    """A judge through the provider plumbing (attempt log, retries, the response cache) on a scripted model."""
    from evals.arms.accounting import AccountingLM, AttemptLog, ResponseCache, price_table
    from evals.arms.providers import Provider, ProviderConfig

    provider = Provider(ProviderConfig(name="scripted", model="openai/scripted", api_base="http://127.0.0.1:9/v1"))
    log = AttemptLog(provider="judge:scripted", case_id="(matcher)")
    scripted = ScriptedLM(replies)
    cache = ResponseCache(cache_file)
    lm = AccountingLM.wrap(scripted, provider=provider, log=log, injector=None, cache=cache, retries=True,
                           prices=price_table())
    return JudgeMatcher(lm, "scripted", log, cache), scripted


def test_a_rate_limited_or_timed_out_judge_call_is_retried_and_decides(tmp_path):
    judge, scripted = _cached_judge([ScriptedLM.rate_limit(0.01), ScriptedLM.timeout(), json.dumps({"same": [True]})],
                                    tmp_path / "responses.sqlite")
    assert judge.same_fact("The user works at Stripe.", "user", "The user is a Stripe employee.", "user")
    attempts = judge.attempts_frame()
    assert list(attempts.status) == ["LMRateLimitError", "LMTimeoutError", "ok"] and set(attempts.site) == {"judge"}
    assert judge.health()["judge_errors"] == 0 and scripted.calls == 3


def test_a_judge_reply_that_could_not_be_read_is_never_cached(tmp_path):
    cache = tmp_path / "responses.sqlite"
    judge, _ = _cached_judge(["they look the same to me", json.dumps({"same": [True]})], cache)
    assert not judge.same_fact("The user likes tea.", "user", "The user enjoys tea.", "user")
    assert judge.same_fact("The user works at Stripe.", "user", "The user is a Stripe employee.", "user")
    judge.close()
    again, scripted = _cached_judge([json.dumps({"same": [True]})], cache)
    assert again.same_fact("The user likes tea.", "user", "The user enjoys tea.", "user")  # asked afresh
    assert scripted.calls == 1 and again.errors == 0


@pytest.mark.ci_heavy  # two runs with an LLM judge (run by `nox -s heavy`)
def test_a_run_with_no_cache_asks_the_judge_again(tmp_path, judge_server):
    url, asked = judge_server
    argv = ["run", "--dataset", "datasets/chat_en.jsonl", "--limit", "1", "--faults", "none", "--embedder", "hash",
            "--matcher", f"llm:openai/judge-ok@{url}", "--no-progress"]
    asked.clear()
    assert main([*argv, "--out", str(tmp_path / "one")]) == 0
    first = len(asked)
    assert main([*argv, "--out", str(tmp_path / "two"), "--no-cache"]) == 0
    assert first > 0 and len(asked) == 2 * first
    attempts = pd.read_parquet(tmp_path / "two" / "attempts.parquet")
    assert not attempts[attempts.site == "judge"].cache_hit.any()


def test_tune_names_its_metrics_matcher_and_the_judges_failed_calls(tmp_path, judge_server):
    from evals.tuning.tune import TuneConfig, summary_text, tune
    from tests.tuning.test_tune import write_cases

    url, _ = judge_server
    train = write_cases(tmp_path / "train.jsonl", ["en-001-tim-john", "en-002-unnamed-teacher"])
    dev = write_cases(tmp_path / "dev.jsonl", ["en-004-john-pilot-trap"])
    spec = f"llm:openai/judge-prose@{url}"
    outcome = tune(TuneConfig(program="extractor", optimizer="bootstrap", train=[train], dev=[dev], out=tmp_path / "t",
                              matcher=spec))
    card = outcome.manifest.matcher
    assert card["spec"] == spec and card["judge_errors"] == card["judge_calls"] > 0
    assert f"The judge failed on {card['judge_errors']} of {card['judge_calls']} calls" in summary_text(outcome)


def test_a_judge_named_in_a_providers_file_is_measured_and_known_by_its_model_and_endpoint(tmp_path, judge_server):
    url, _ = judge_server
    providers = tmp_path / "providers.toml"
    providers.write_text(f'[[provider]]\nname = "judge"\nmodel = "openai/judge-ok"\napi_base = "{url}"\n')
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", "llm:judge", "--providers", str(providers), "--pairs", str(pairs),
                 "--out", str(tmp_path / "o")]) == 0
    named = JudgeMatcher.from_spec("judge", providers_file=providers)
    assert named.fingerprint() == JudgeMatcher.from_spec(f"openai/judge-ok@{url}").fingerprint()
    providers.write_text(f'[[provider]]\nname = "judge"\nmodel = "openai/judge-prose"\napi_base = "{url}"\n')
    assert JudgeMatcher.from_spec("judge", providers_file=providers).fingerprint() != named.fingerprint()


def test_matcher_eval_with_the_judge_asks_once_per_gold_about_its_own_pairs_only(tmp_path, judge_server, capsys):
    url, asked = judge_server
    asked.clear()
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", f"llm:openai/judge-ok@{url}", "--pairs", str(pairs),
                 "--out", str(tmp_path / "o")]) == 0
    # one call per gold text, with the predictions labelled against it (not every prediction of the file)
    assert sorted(asked) == sorted([("The user lives in Berlin.", 2), ("The user likes coffee.", 1),
                                    ("用户住在深圳。", 1), ("用户吃辣。", 1)])
    total = pd.read_parquet(tmp_path / "o" / "agreement.parquet").query("lang == 'all' and category == 'all'")
    # "same" to every text: p1, p4 right, p2, p5 wrong, p3 "not same" by its subjects alone
    assert total.set_index("metric")["value"].to_dict() == {"agreement": 0.6, "precision": 0.5, "recall": 1.0}
    attempts = pd.read_parquet(tmp_path / "o" / "attempts.parquet")
    assert set(attempts.site) == {"judge"} and len(attempts) == 4
    assert "undecided" not in capsys.readouterr().out


def test_matcher_eval_counts_pairs_a_failed_judge_left_undecided_against_it(tmp_path, judge_server, capsys):
    url, _ = judge_server
    pairs = _pairs_file(tmp_path / "pairs.jsonl", PAIRS)
    assert main(["matcher", "eval", "--matcher", f"llm:openai/judge-prose@{url}", "--pairs", str(pairs),
                 "--out", str(tmp_path / "o")]) == 0
    total = pd.read_parquet(tmp_path / "o" / "agreement.parquet").query("lang == 'all' and category == 'all'")
    # every pair whose subjects agree is undecided and counted wrong; p3 is "not same" by its subjects
    assert total.set_index("metric").loc["agreement", "value"] == 0.2
    assert "undecided: 4 of 5 pairs (4 of 4 judge calls failed" in capsys.readouterr().out


# ------------------------------------------------------------------ runs name their matcher and its agreement
@pytest.fixture
def text_run(chat_en_six_run) -> Path:
    """Six chat_en cases scored by `text` (the session's shared run, tests/conftest.py: the tests copy it to change it)."""
    return chat_en_six_run


def test_a_run_names_its_matcher_and_held_out_agreement_with_ci(text_run):
    manifest = json.loads((text_run / "manifest.json").read_text())
    card = manifest["matcher"]
    assert manifest["matcher_spec"] == card["spec"] == "text" and card["split"] == "heldout"
    assert 0 < card["ci_low"] <= card["heldout_agreement"] <= card["ci_high"] <= 1 and card["n"] > 200
    summary = (text_run / "summary.md").read_text()
    assert f"Facts are matched by `text`, which agrees with {card['heldout_agreement']:.1%}" in summary
    assert set(pd.read_parquet(text_run / "facts.parquet").matcher) == {"text"}
    from evals.report.compare import show

    assert f"facts matched by text: held-out agreement {card['heldout_agreement']:.3f}" in show(text_run)


def test_a_matcher_with_no_measured_agreement_is_flagged_in_bold():
    from evals.scoring.agreement import card_line

    line = card_line({"spec": "llm:openai/gpt-4o-mini", "heldout_agreement": None})
    assert line.startswith("**") and "no measured agreement" in line


def test_gate_rescores_the_current_run_with_the_baselines_matcher_and_compare_says_they_differ(text_run, tmp_path,
                                                                                                 capsys):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(text_run, other)
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "matcher_spec": "llm:x"}))
    assert main(["gate", "--baseline", str(text_run), "--current", str(other)]) in (0, 1)  # faults none: some rules unmeasured
    assert "re-scored with the baseline's (`text`)" in (other / "gate.md").read_text()
    assert (other / "rescored" / "text" / "metrics.parquet").is_file()
    assert main(["compare", str(text_run), str(other), "--out", str(tmp_path / "cmp")]) == 0
    assert "scored by different matchers (text, llm:x)" in (tmp_path / "cmp" / "compare.md").read_text()


def test_runs_scored_by_two_versions_of_one_matcher_are_flagged_and_rescored_alike(text_run, tmp_path):
    import shutil

    older = tmp_path / "older"
    shutil.copytree(text_run, older)
    manifest = json.loads((older / "manifest.json").read_text())
    manifest["matcher"]["fingerprint"] = "text:threshold=0.4"  # scored before the matcher changed
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert main(["compare", str(older), str(text_run), "--out", str(tmp_path / "cmp")]) == 0
    assert "different versions of the matcher `text`" in (tmp_path / "cmp" / "compare.md").read_text()
    assert main(["gate", "--baseline", str(older), "--current", str(text_run), "--summary",
                 str(tmp_path / "gate.md"), "--junit", str(tmp_path / "gate.xml")]) in (0, 1)
    assert "**The runs were scored by different versions" in (tmp_path / "gate.md").read_text()
    # --matcher text re-scores the older run with today's text matcher; the current one is left as it is
    assert main(["compare", str(older), str(text_run), "--matcher", "text", "--out", str(tmp_path / "cmp2")]) == 0
    assert "different versions" not in (tmp_path / "cmp2" / "compare.md").read_text()
    assert (older / "rescored" / "text" / "metrics.parquet").is_file() and not (text_run / "rescored" / "text").exists()


@pytest.mark.slow
def test_compare_rescores_both_runs_with_one_matcher(text_run, tmp_path, capsys):
    assert main(["compare", str(text_run), str(text_run), "--matcher", "semantic", "--out", str(tmp_path)]) == 0
    rescored = text_run / "rescored" / "semantic"
    assert json.loads((rescored / "manifest.json").read_text())["matcher_spec"] == "semantic"
    assert set(pd.read_parquet(rescored / "facts.parquet").matcher) == {"semantic"}


@pytest.mark.slow
def test_the_semantic_matcher_catches_near_misses_and_accepts_paraphrases():
    from evals.scoring.choose_matcher import make_matcher

    m = make_matcher("semantic")
    assert m.same_fact("The user works at Stripe.", "user", "User works at Stripe", "user")
    assert not m.same_fact("The user lives in Berlin.", "user", "The user wants to live in Berlin.", "user")
    assert not m.same_fact("用户每天早上跑步。", "user", "用户每天晚上跑步。", "user")
    assert not m.same_fact("The user is a nurse.", "user", "The user's mother is a nurse.", "user")
    assert m.matches("John is a nurse in Berlin.", "The user is a nurse in Berlin.")  # text alone: the subject is apart
