"""The labelled matcher pairs (datasets/matcher/pairs.jsonl): form, counts, balance and the split rule.

Matcher agreement is measured on this file, so a malformed line, a duplicate id, a lopsided category or a
README table that no longer matches the data would silently skew every figure built on it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from hymem.subjects import canonical_subject, same_subject, subject_of

HERE = Path(__file__).resolve().parents[2] / "datasets" / "matcher"
PAIRS = HERE / "pairs.jsonl"
README = HERE / "README.md"

TRUE_CATEGORIES = {
    "exact", "format_noise", "paraphrase_synonym", "paraphrase_nominal", "paraphrase_number",
    "paraphrase_abbrev", "paraphrase_passive", "paraphrase_reorder", "paraphrase_detail", "paraphrase_qualifier",
    "subject_alias",
}  # fmt: skip
NEAR_MISS_CATEGORIES = {
    "modality", "time", "relation_shift", "negation", "number_sub", "entity_sub", "role", "subject_swap",
}  # fmt: skip
SPLIT_RULE = "int(hashlib.sha256(id.encode()).hexdigest(), 16) % 10 < 4"
CJK = re.compile(r"[\u4e00-\u9fff]")


def split_of(pair_id: str) -> str:
    """The README's rule, verbatim."""
    return "heldout" if int(hashlib.sha256(pair_id.encode()).hexdigest(), 16) % 10 < 4 else "calibration"


def _load() -> list[dict]:
    rows = []
    for number, line in enumerate(PAIRS.read_text(encoding="utf-8").splitlines(), 1):
        assert line.strip(), f"{PAIRS}:{number}: blank line"
        rows.append(json.loads(line))
    return rows


@pytest.fixture(scope="module")
def pairs() -> list[dict]:
    return _load()


def test_every_line_has_exactly_the_documented_form(pairs):
    for row in pairs:
        where = row.get("id")
        assert list(row) == ["id", "lang", "category", "gold", "pred", "same"], where
        assert isinstance(row["id"], str) and re.fullmatch(r"(en|zh)-[a-z_]+-\d{2,}", row["id"]), where
        assert row["id"].startswith(f"{row['lang']}-{row['category']}-"), where
        assert row["lang"] in ("en", "zh"), where
        assert row["category"] in TRUE_CATEGORIES | NEAR_MISS_CATEGORIES, where
        assert isinstance(row["same"], bool), where
        for side in ("gold", "pred"):
            assert list(row[side]) == ["text", "subject"], where
            assert all(isinstance(v, str) and v.strip() == v and v for v in row[side].values()), where
        if row["lang"] == "zh":
            assert CJK.search(row["gold"]["text"]) and CJK.search(row["pred"]["text"]), where
        else:
            assert not CJK.search(row["gold"]["text"] + row["pred"]["text"]), where


def test_ids_and_pairs_are_unique(pairs):
    ids = Counter(row["id"] for row in pairs)
    assert [i for i, n in ids.items() if n > 1] == []
    texts = Counter((row["gold"]["text"], row["pred"]["text"], row["pred"]["subject"]) for row in pairs)
    assert [t for t, n in texts.items() if n > 1] == []


def _in_vocabulary(subject: str) -> bool:
    """The suites' spelling: "user", "assistant", or a name as written (not lower-case, not an alias)."""
    if subject in ("user", "assistant"):
        return True
    return canonical_subject(subject) not in ("user", "assistant") and not subject[0].islower()


def test_each_text_names_its_subject_in_the_suites_vocabulary(pairs):
    words = {"user": ("user", "用户"), "assistant": ("assistant", "助手")}
    for row in pairs:
        for side in ("gold", "pred"):
            subject, text = canonical_subject(row[side]["subject"]), row[side]["text"].casefold()
            # A subjectless prediction ("works at Stripe", "在腾讯工作"), the way mem0-style extractors write
            # memories, is the user's: the engine files a memory that names no subject under the user.
            # "grandfather worked as a miner" names the user's grandfather: filed under the user like "The
            # user's grandfather ..." (README rule 1).
            named = subject_of(row[side]["text"])
            if side == "pred" and subject == "user" and (named is None or named.startswith(("the user's", "用户的"))):
                continue
            if named is not None and canonical_subject(named) == subject == "assistant":
                continue  # "AI suggested restarting the pod": the subject rule reads a bare "AI" as the assistant
            assert any(w in text for w in words.get(subject, (subject,))), (row["id"], side)
        assert _in_vocabulary(row["gold"]["subject"]), row["id"]
        if row["category"] == "subject_alias":  # another spelling of the same subject, never the same string
            assert row["pred"]["subject"] != row["gold"]["subject"], row["id"]
            assert same_subject(row["pred"]["subject"], row["gold"]["subject"]), row["id"]
        else:
            assert _in_vocabulary(row["pred"]["subject"]), row["id"]


def test_counts_and_balance_per_language(pairs):
    per_lang = Counter(row["lang"] for row in pairs)
    assert per_lang["en"] >= 340 and per_lang["zh"] >= 220
    for lang in ("en", "zh"):
        rows = [row for row in pairs if row["lang"] == lang]
        share_same = sum(row["same"] for row in rows) / len(rows)
        assert 0.4 <= share_same <= 0.6, (lang, share_same)


def test_categories_carry_their_label_and_near_misses_are_well_stocked(pairs):
    for row in pairs:
        assert row["same"] is (row["category"] in TRUE_CATEGORIES), row["id"]
    counts = Counter((row["category"], row["lang"]) for row in pairs)
    for category in NEAR_MISS_CATEGORIES:
        assert counts[category, "en"] >= 20 and counts[category, "zh"] >= 12, category
    for category in TRUE_CATEGORIES:
        assert counts[category, "en"] >= 10 and counts[category, "zh"] >= 8, category
    # No single true category may stand for "paraphrase": the largest is under a fifth of the true pairs.
    true_counts = Counter(row["category"] for row in pairs if row["same"])
    assert max(true_counts.values()) < 0.2 * sum(true_counts.values())


def test_split_has_both_parts_in_each_language_and_is_about_forty_percent_heldout(pairs):
    for lang in ("en", "zh"):
        splits = Counter(split_of(row["id"]) for row in pairs if row["lang"] == lang)
        assert splits["heldout"] > 0 and splits["calibration"] > 0, lang
        assert 0.3 <= splits["heldout"] / sum(splits.values()) <= 0.5, (lang, splits)
        for same in (True, False):
            kinds = {split_of(row["id"]) for row in pairs if row["lang"] == lang and row["same"] is same}
            assert kinds == {"heldout", "calibration"}, (lang, same)


def test_readme_states_the_split_rule_and_the_counts_of_the_file(pairs):
    text = README.read_text(encoding="utf-8")
    assert SPLIT_RULE in text
    table = {
        m[0]: tuple(map(int, m[1:]))
        for m in re.findall(
            r"^\| `(\w+)` \| (?:true|false) \| (\d+) \| (\d+) \| (\d+) / (\d+) \| (\d+) / (\d+) \|$", text, re.MULTILINE
        )
    }
    assert set(table) == TRUE_CATEGORIES | NEAR_MISS_CATEGORIES
    counts = Counter()
    for row in pairs:
        counts[row["category"], row["lang"]] += 1
        counts[row["category"], row["lang"], split_of(row["id"])] += 1
    for category, stated in table.items():
        actual = tuple(
            counts[key]
            for key in (
                (category, "en"),
                (category, "zh"),
                (category, "en", "calibration"),
                (category, "en", "heldout"),
                (category, "zh", "calibration"),
                (category, "zh", "heldout"),
            )
        )
        assert stated == actual, category
    assert f"holds {len(pairs)} hand-labelled pairs" in text
