"""Bad input is refused at once: exit 2 and one line naming the file, line, field and problem, never a
traceback and never a run that turns it into infra errors (issue 34). Records read back from disk (units.jsonl,
pairs, datasets, rules) are validated strictly, with a nesting limit, before anything uses them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evals.cli.main import main

CASE = {"id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}}
PAIR = {"lang": "en", "category": "paraphrase", "gold": {"text": "The user likes tea.", "subject": "user"},
        "pred": {"text": "The user enjoys tea.", "subject": "user"}, "same": True}


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def _code(argv: list[str]) -> int:
    """main(argv), with argparse's SystemExit (a usage error) as its exit code."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line(capsys, code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def _write(path: Path, *records: object) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _run(*args: str) -> list[str]:
    return ["run", "--embedder", "hash", "--faults", "none", "--no-progress", "--matcher", "text", *args]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return _write(tmp_path / "d.jsonl", CASE)


# ---- run: providers, --lm, datasets, paths ----------------------------------------------------------------


@pytest.mark.parametrize("lm, needle", [
    ("openai/m@http://127.0.0.1:99999/v1", "Port out of range"),
    ("openai/m@http://[::1/v1", "Invalid IPv6 URL"),
])
def test_a_bad_lm_url_is_one_line(dataset, tmp_path, capsys, lm, needle):
    code = _code(_run("--dataset", str(dataset), "--lm", lm, "--out", str(tmp_path / "r")))
    _one_line(capsys, code, "--lm", needle)
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("table, needle", [
    ('name = "a"\nmodel = ""', "provider[0]: model: required"),
    ('name = "a"\nmodel = "bogus"', "provider[0].model: 'bogus' is not a model"),
    ('name = ""\nmodel = "openai/m"\napi_base = "http://127.0.0.1:9/v1"', "provider[0].name: '' is not a name"),
    ('name = "a"\nmodel = "openai/m"\napi_base = "http://127.0.0.1:70000/v1"', "provider[0].api_base"),
])
def test_a_bad_providers_file_is_one_line(dataset, tmp_path, capsys, table, needle):
    providers = tmp_path / "providers.toml"
    providers.write_text(f"[[provider]]\n{table}\n", encoding="utf-8")
    code = _code(_run("--dataset", str(dataset), "--providers", str(providers), "--out", str(tmp_path / "r")))
    _one_line(capsys, code, str(providers), needle)


def test_a_providers_file_that_is_not_utf8_is_named(dataset, tmp_path, capsys):
    providers = tmp_path / "latin.toml"
    providers.write_bytes('[[provider]]\nname = "café"\nmodel = "openai/m"\n'.encode("latin-1"))
    code = _code(_run("--dataset", str(dataset), "--providers", str(providers), "--out", str(tmp_path / "r")))
    _one_line(capsys, code, str(providers), "not UTF-8")


@pytest.mark.parametrize("change, needle", [
    ({"user_id": "u" * 257}, "user_id: String should have at most 256 characters"),
    ({"expect": {"no_memory": "false"}}, "expect.no_memory: Input should be a valid boolean"),
    ({"user_id": 7}, "user_id: Input should be a valid string"),
    ({"meta": {"x": _nested(900)}}, "nested deeper than"),
])
def test_a_bad_dataset_line_is_refused_strictly(tmp_path, capsys, change, needle):
    data = _write(tmp_path / "d.jsonl", {**CASE, **change})
    code = _code(_run("--dataset", str(data), "--out", str(tmp_path / "r")))
    _one_line(capsys, code, f"{data}:1:", needle)


def test_a_dataset_line_nested_past_the_parser_is_refused(tmp_path, capsys):
    data = tmp_path / "deep.jsonl"
    data.write_text('{"id": "a", "meta": ' + "[" * 5000 + "]" * 5000 + "}\n", encoding="utf-8")
    code = _code(_run("--dataset", str(data), "--out", str(tmp_path / "r")))
    _one_line(capsys, code, f"{data}:1:", "nested deeper than")


def test_an_empty_dataset_path_does_not_load_the_current_directory(dataset, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(dataset.parent)  # a valid dataset is right here: '' must not find it
    code = _code(_run("--dataset", "", "--out", str(tmp_path / "r")))
    _one_line(capsys, code, "--dataset ''", "empty path")


@pytest.mark.parametrize("argv", [
    ["run", "--out", ""], ["tune", "--program", "extractor", "--optimizer", "bootstrap", "--train", "x.jsonl",
                           "--out", ""],
    ["matcher", "eval", "--out", ""], ["compare", "", "--out", "x"], ["gate", "--baseline", "", "--current", "x"],
])
def test_an_empty_path_argument_is_a_usage_error(tmp_path, capsys, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    _one_line(capsys, _code(argv), "an empty path")
    assert list(tmp_path.iterdir()) == []  # nothing written into the current directory


# ---- serve and proxy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, needle", [
    (["serve", "--latency", "inf"], "--latency"), (["serve", "--latency", "nan"], "--latency"),
    (["serve", "--latency", "1e10"], "--latency"),
    (["proxy", "--upstream", "http://127.0.0.1:9/v1", "--fault-delay", "-1"], "--fault-delay"),
    (["proxy", "--upstream", "http://127.0.0.1:9/v1", "--fault-delay", "nan"], "--fault-delay"),
    (["proxy", "--upstream", "http://127.0.0.1:99999/v1"], "--upstream"),
    (["proxy", "--upstream", "http://[::1/v1"], "--upstream"),
])
def test_serve_and_proxy_refuse_bad_values_before_listening(capsys, no_wait, argv, needle):
    _one_line(capsys, _code(argv), needle)


@pytest.fixture
def no_wait(monkeypatch):
    """A server that got as far as listening returns at once (exit 0) instead of waiting for Ctrl-C."""
    import evals.arms.proxy
    import evals.arms.serve

    def close(handle, *args, **kwargs):
        handle.close()
        return 0

    monkeypatch.setattr(evals.arms.serve, "wait_forever", close)
    monkeypatch.setattr(evals.arms.proxy, "wait_forever", close)


def test_serve_and_proxy_start_with_good_values(capsys, no_wait):
    assert _code(["serve", "--latency", "0.5"]) == 0
    assert _code(["proxy", "--upstream", "http://127.0.0.1:9/v1", "--fault-delay", "0"]) == 0


@pytest.mark.parametrize("argv", [["matcher", "eval", "--matcher", "text", "--out", "o", "--seed", "-1"],
                                  ["run", "--seed", "4294967296"], ["datasets", "audit", "x", "--seed", "-5"]])
def test_a_seed_out_of_range_is_a_usage_error(capsys, argv):
    _one_line(capsys, _code(argv), "--seed", "use a seed from 0 to")


def test_proxy_refuses_a_directory_as_its_log(tmp_path, capsys, no_wait):
    code = _code(["proxy", "--upstream", "http://127.0.0.1:9/v1", "--log", str(tmp_path)])
    _one_line(capsys, code, "--log", "a directory")


# ---- records read back: units.jsonl, rules, pairs -----------------------------------------------------------


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    data = _write(root / "d.jsonl", CASE)
    out = root / "run"
    assert main(_run("--dataset", str(data), "--out", str(out))) == 0
    return out


def _copy_with_unit(run: Path, dest: Path, edit) -> Path:
    shutil.copytree(run, dest)
    lines = (dest / "units.jsonl").read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    edit(record)
    # the bad record first, a good one after it: a bad line is never mistaken for a torn last line
    (dest / "units.jsonl").write_text(json.dumps(record) + "\n" + lines[0] + "\n", encoding="utf-8")
    return dest


def _null_text(record: dict) -> None:
    record["memories"][0]["text"] = None


@pytest.mark.parametrize("edit, needle", [
    (_null_text, "memories[0]: text: must be a string"),
    (lambda r: r.update(epoch="0"), "epoch: Input should be a valid integer"),
    (lambda r: r["memories"][0].update(extra=_nested(300)), "recursion limit"),
])
def test_a_bad_units_record_stops_resume_and_keeps_the_manifest(finished_run, tmp_path, capsys, edit, needle):
    run = _copy_with_unit(finished_run, tmp_path / "run", edit)
    manifest = (run / "manifest.json").read_bytes()
    data = finished_run.parent / "d.jsonl"
    for _ in range(2):  # and the next resume says the same: nothing was rewritten as unfinished
        code = _code(_run("--dataset", str(data), "--out", str(run), "--resume"))
        _one_line(capsys, code, "units.jsonl:1:", needle)
        assert (run / "manifest.json").read_bytes() == manifest


def test_a_resume_that_crashes_leaves_a_finished_manifest_as_it_was(finished_run, tmp_path, monkeypatch):
    import evals.pipeline

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    manifest = (run / "manifest.json").read_bytes()

    def crash(*args, **kwargs):
        raise RuntimeError("the report crashed")

    monkeypatch.setattr(evals.pipeline, "report_run", crash)
    with pytest.raises(RuntimeError, match="the report crashed"):
        main(_run("--dataset", str(finished_run.parent / "d.jsonl"), "--out", str(run), "--resume"))
    assert (run / "manifest.json").read_bytes() == manifest


def test_a_bad_units_record_stops_a_rescoring_gate(finished_run, tmp_path, capsys):
    run = _copy_with_unit(finished_run, tmp_path / "run", _null_text)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    manifest["matcher_spec"] = "semantic"  # scored by another matcher: the gate re-scores its units with text
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    code = _code(["gate", "--baseline", str(finished_run), "--current", str(run), "--matcher", "text"])
    _one_line(capsys, code, "units.jsonl:1:", "text: must be a string")


@pytest.mark.parametrize("rule, needle", [
    ("min = nan", "min: Input should be a finite number"),
    ("max = inf", "max: Input should be a finite number"),
    ('min = "0.5"', "min: Input should be a valid number"),
])
def test_gate_rules_are_strict_and_finite(finished_run, tmp_path, capsys, rule, needle):
    rules = tmp_path / "rules.toml"
    rules.write_text(f'[[rule]]\nmetric = "fact_f1"\n{rule}\n', encoding="utf-8")
    code = _code(["gate", "--baseline", str(finished_run), "--current", str(finished_run), "--rules", str(rules)])
    _one_line(capsys, code, str(rules), needle)


@pytest.mark.parametrize("flag", ["--junit", "--summary"])
def test_gate_outputs_that_cannot_be_written_are_refused_first(finished_run, tmp_path, capsys, flag):
    _one_line(capsys, _code(["gate", "--baseline", str(finished_run), "--current", str(finished_run),
                             flag, str(tmp_path)]), flag, "a directory")
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    _one_line(capsys, _code(["gate", "--baseline", str(finished_run), "--current", str(finished_run),
                             flag, str(blocker / "sub" / "gate.out")]), flag, "a parent of it is a file")


def test_compare_and_audit_refuse_an_out_that_is_a_file(finished_run, dataset, capsys):
    _one_line(capsys, _code(["compare", str(finished_run), str(finished_run), "--out", str(dataset)]),
              "in the way")
    _one_line(capsys, _code(["datasets", "audit", str(dataset), "--out", str(dataset)]), "in the way")


def test_a_pairs_line_nested_too_deep_is_one_line(tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({**PAIR, "id": "p"})[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}\n",
                     encoding="utf-8")
    code = _code(["matcher", "eval", "--pairs", str(pairs), "--matcher", "text", "--out", str(tmp_path / "o")])
    _one_line(capsys, code, f"{pairs}:1:", "nested deeper than")


@pytest.mark.parametrize("count, same, needle", [(3, True, "too few usable"), (60, True, "a fit needs both")])
def test_matcher_fit_on_too_few_or_one_class_pairs_is_one_line(tmp_path, capsys, count, same, needle):
    pairs = _write(tmp_path / "pairs.jsonl", *({**PAIR, "id": f"p{i}", "same": same} for i in range(count)))
    code = _code(["matcher", "fit", "--pairs", str(pairs), "--out", str(tmp_path / "params.json")])
    _one_line(capsys, code, str(pairs), needle)
    assert not (tmp_path / "params.json").exists()
