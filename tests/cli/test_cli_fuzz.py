"""Fuzzing the command line and the dataset schema: whatever the arguments or the JSONL line, the answer is an
exit code of the README's rule (0, 1 or 2), never a traceback (issue 34).

The CLI runs in-process (`evals.cli.main.main`); only the long-running work after validation is stubbed (a run's
units, a server's wait for Ctrl-C, a tuner's compile, a matcher fit's model), so every check of the arguments
and files is the real one.
"""

from __future__ import annotations

import argparse
import json
import os

import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st

from evals.cli.main import build_parser, main
from tests.draws import check_drawn, twin

CASE = {"id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}}

# The ci_heavy twins draw EXAMPLES (more for a longer hunt: HYMEM_FUZZ_EXAMPLES=2000 pytest -m ci_heavy this file);
# the default run draws a quarter of the default number (tests/draws.py).
EXAMPLES = int(os.environ.get("HYMEM_FUZZ_EXAMPLES", "80"))
DEFAULT_EXAMPLES = max(1, min(20, EXAMPLES))

COMMANDS = [["run"], ["matcher", "eval"], ["matcher", "sample"], ["matcher", "fit"], ["datasets", "audit"], ["serve"],
            ["proxy"], ["show"], ["compare"], ["gate"], ["plots"], ["tune"]]


def _options(command: list[str]) -> list[str]:
    """The option strings of a subcommand, read off the real parser (new flags are fuzzed as they are added)."""
    parser: argparse.ArgumentParser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return sorted(s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help"))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("fuzz")
    good = root / "good.jsonl"
    good.write_text(json.dumps(CASE) + "\n", encoding="utf-8")
    bad = root / "bad.jsonl"
    bad.write_text('{"id": "x", "turns": 3}\n', encoding="utf-8")
    deep = root / "deep.jsonl"
    deep.write_text('{"id": "a", "meta": ' + "[" * 3000 + "]" * 3000 + "}\n", encoding="utf-8")
    latin = root / "latin.toml"
    latin.write_bytes('[[provider]]\nname = "café"\n'.encode("latin-1"))
    providers = root / "providers.toml"
    providers.write_text('[[provider]]\nname = "p"\nmodel = "openai/m"\napi_base = "http://127.0.0.1:9/v1"\n',
                         encoding="utf-8")
    pairs = root / "pairs.jsonl"
    pair = {"lang": "en", "category": "c", "gold": {"text": "The user likes tea.", "subject": "user"},
            "pred": {"text": "The user enjoys tea.", "subject": "user"}, "same": True}
    pairs.write_text("".join(json.dumps({**pair, "id": f"p{i}", "same": i % 2 == 0}) + "\n" for i in range(4)),
                     encoding="utf-8")
    (root / "empty_dir").mkdir()
    fake_run = root / "fake_run"
    fake_run.mkdir()
    (fake_run / "manifest.json").write_text('{"schema_version": 1', encoding="utf-8")
    return {"root": str(root), "good": str(good), "bad": str(bad), "deep": str(deep), "latin": str(latin),
            "providers": str(providers), "pairs": str(pairs), "dir": str(root / "empty_dir"), "fake_run": str(fake_run),
            "missing": str(root / "missing" / "x")}


def _values(files: dict[str, str]) -> st.SearchStrategy[str]:
    paths = st.sampled_from(sorted(files.values()))
    numbers = st.sampled_from(["0", "-1", "1", "2", "3", "1e10", "nan", "inf", "-inf", "0.5", "99999", "65536", "x"])
    specs = st.sampled_from(["offline", "oracle", "oracle:flip_owner=2", "openai/m@http://127.0.0.1:9/v1",
                             "openai/m@http://127.0.0.1:99999/v1", "openai/m@http://[::1/v1", "bogus", "llm:", "p",
                             "llm:openai/m@http://127.0.0.1:9/v1", "text", "hash", "none", "sweep:fast",
                             "random:2", "random:0.1", "http://127.0.0.1:9/v1", "http://[::1", "a=b", "KEY=1",
                             "locomo:/missing", "every:0", "seq:http_500", "stored", "all", "heldout", ""])
    return st.one_of(paths, numbers, specs, st.text(max_size=12))


def _base(command: list[str], files: dict[str, str], name: str) -> list[str]:
    """Arguments that pass validation, so that the fuzzed ones after them (the last value of a flag wins) reach
    past argparse into each command's own checks."""
    out = f"{files['root']}/out/{name}"
    return {
        "run": ["--dataset", files["good"], "--embedder", "hash", "--faults", "none", "--no-progress", "--matcher",
                "text", "--out", out],
        "eval": ["--pairs", files["pairs"], "--matcher", "text", "--out", out],
        "sample": [files["fake_run"], "--out", f"{out}.jsonl"],
        "fit": ["--pairs", files["pairs"], "--out", f"{out}.json"],
        "audit": [files["good"]],
        "serve": ["--port", "0"],
        "proxy": ["--upstream", "http://127.0.0.1:9/v1"],
        "show": [files["fake_run"]],
        "plots": [files["fake_run"]],
        "compare": [files["fake_run"], files["dir"]],
        "gate": ["--baseline", files["fake_run"], "--current", files["dir"]],
        "tune": ["--program", "extractor", "--optimizer", "bootstrap", "--train", files["good"], "--out", out],
    }[command[-1]]


@st.composite
def _argv(draw, files: dict[str, str]) -> list[str]:
    command = draw(st.sampled_from(COMMANDS))
    options = _options(command) or ["--no-such-flag"]  # show and plots take none
    words: list[str] = list(command)
    if draw(st.integers(0, 3)):  # mostly from valid arguments, sometimes from nothing
        words += _base(command, files, draw(st.text(alphabet="abcdefgh", min_size=8, max_size=8)))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.integers(0, 9))
        if kind <= 6:  # a real flag with a value
            words += [draw(st.sampled_from(options)), draw(_values(files))]
        elif kind == 7:  # a real flag alone (a switch, or a missing value)
            words.append(draw(st.sampled_from(options)))
        elif kind == 8:  # a positional
            words.append(draw(_values(files)))
        else:  # an unknown flag
            words.append("--" + draw(st.text(alphabet="abcxyz-", min_size=1, max_size=6)))
    return words


@pytest.fixture
def stubbed(monkeypatch, files):
    """The long work after validation, stubbed: what a fuzzed run would spend minutes on."""
    import evals.arms.proxy
    import evals.arms.serve
    import evals.pipeline
    import evals.scoring.matcher_eval
    import evals.tuning.tune

    def no_units(*args, **kwargs):
        raise evals.pipeline.RunIOError("fuzz: the run's units are not run")

    def no_wait(handle, banner):
        handle.close()
        return 0

    def no_tune(config):
        raise evals.tuning.tune.TuneFailed("fuzz: not tuned")

    def no_fit(*args, **kwargs):
        raise ValueError("fuzz: not fitted")

    monkeypatch.setattr(evals.pipeline, "open_matcher", no_units)  # the first step after validation
    monkeypatch.setattr(evals.arms.serve, "wait_forever", no_wait)
    monkeypatch.setattr(evals.arms.proxy, "wait_forever", no_wait)
    monkeypatch.setattr(evals.tuning.tune, "tune", no_tune)
    # where `matcher fit` calls it: matcher_eval imports the name, so patching evals.scoring.semantic missed it
    # whenever an earlier test had imported matcher_eval (a real fit, minutes long, over the committed parameters)
    monkeypatch.setattr(evals.scoring.matcher_eval, "fit_semantic", no_fit)
    monkeypatch.chdir(files["root"])  # default outputs (./reports) land in the fuzz directory
    committed = evals.scoring.matcher_eval.PARAMS_FILE.read_bytes()
    yield
    assert evals.scoring.matcher_eval.PARAMS_FILE.read_bytes() == committed, "the fuzz rewrote the committed parameters"


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return 0 if exc.code is None else int(exc.code)


@twin(default=DEFAULT_EXAMPLES, heavy=EXAMPLES)
def test_no_argument_list_makes_a_traceback(draws, files, stubbed, capsys):
    check_drawn(draws, lambda data: one_argument_list(data, files, capsys), data=st.data(),
                suppress=(HealthCheck.too_slow,))


def one_argument_list(data: st.DataObject, files: dict[str, str], capsys: pytest.CaptureFixture) -> None:
    argv = data.draw(_argv(files))
    code = _exit_code(argv)  # an exception escaping main is the traceback this test forbids
    out, err = capsys.readouterr()
    if os.environ.get("HYMEM_FUZZ_LOG"):
        with open(os.environ["HYMEM_FUZZ_LOG"], "a", encoding="utf-8") as log:
            log.write(json.dumps([code, argv, err.strip().splitlines()[-1:]]) + "\n")
    assert code in (0, 1, 2), (argv, code, err)
    assert "Traceback" not in err + out, argv


# ---- the dataset schema -------------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=12)
FIELDS = [("id",), ("lang",), ("user_id",), ("tags",), ("memories",), ("turns",), ("turns", 0), ("turns", 0, 0),
          ("turns", 0, 0, "role"), ("turns", 0, 0, "content"), ("turns", 0, 0, "name"), ("path",), ("expect",),
          ("expect", "facts"), ("expect", "facts", 0), ("expect", "facts", 0, "text"), ("expect", "facts", 0, "subject"),
          ("expect", "no_memory"), ("expect", "profile"), ("expect", "separate"), ("expect", "updates"), ("meta",),
          ("source",), ("line",), ("extra_key",)]


def _mutated(case: dict, where: tuple, value: object) -> dict:
    """`case` with the value at `where` replaced (a missing parent: the case unchanged but for an extra key)."""
    out = json.loads(json.dumps(case))
    node = out
    for step in where[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return {**out, "extra_key": value}
    try:
        node[where[-1]] = value
    except (IndexError, TypeError):
        out["extra_key"] = value
    return out


@twin(default=DEFAULT_EXAMPLES * 3, heavy=EXAMPLES * 3)
def test_no_dataset_line_makes_a_traceback(tmp_path_factory, draws):
    """Any JSON line loads as a valid case (and hashes) or is one DatasetError with `file:line: ...` lines."""
    check_drawn(draws, lambda edits, nested: one_dataset_line(tmp_path_factory, edits, nested),
                edits=st.lists(st.tuples(st.sampled_from(FIELDS), JSON), min_size=1, max_size=3),
                nested=st.one_of(st.just(0), st.integers(0, 1500)))


def one_dataset_line(tmp_path_factory: pytest.TempPathFactory, edits: list[tuple[tuple, object]], nested: int) -> None:
    from evals.cases.dataset import DatasetError, dataset_hash, load_cases

    case = dict(CASE)
    for where, value in edits:
        case = _mutated(case, where, value)
    if nested:
        deep: object = "x"
        for _ in range(nested):
            deep = {"k": deep}
        case = _mutated(case, ("meta",), {"deep": deep})
    path = tmp_path_factory.mktemp("case") / "fuzz.jsonl"
    line = json.dumps(case, ensure_ascii=False, allow_nan=True)
    path.write_text(line + "\n", encoding="utf-8")
    try:
        cases = load_cases([path])
    except DatasetError as exc:
        assert exc.errors and all(e.startswith(f"{path}:1: ") for e in exc.errors), exc.errors
        return
    assert len(cases) == 1 and len(dataset_hash(cases)) == 64
