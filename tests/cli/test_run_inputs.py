"""`hymem-eval run` at the door: bad input is one line and exit 2, an I/O failure mid-run one line and exit 1,
never a traceback; checks that need no model answer before it loads; a torn record is skipped on --resume."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main

CASES = [
    {"id": "a", "lang": "en", "user_id": "tim",
     "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
     "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}},
    {"id": "b", "lang": "zh", "user_id": "li",
     "turns": [[{"role": "user", "content": "我在北京工作。"}], [{"role": "user", "content": "我喜欢喝茶。"}]],
     "expect": {"facts": [{"text": "用户在北京工作。"}, {"text": "用户喜欢喝茶。"}]}},
]


def _write(path: Path, cases: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(c, ensure_ascii=False) for c in cases) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return _write(tmp_path / "d.jsonl", CASES)


def _run(*args: str) -> list[str]:
    return ["run", "--embedder", "hash", "--no-progress", *args]


def _one_line_error(capsys, code: int, expected_code: int, *needles: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == expected_code, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.fixture
def no_model_load(monkeypatch):
    """Fail the test if the embedding model is loaded: these checks must answer before it."""
    import hymem.client  # noqa: F401  (binds the real make_embedder before the patch, so it cannot leak)
    import hymem.embedder

    def refuse(spec):
        raise AssertionError(f"the embedder {spec!r} was loaded before the inputs were checked")

    monkeypatch.setattr(hymem.embedder, "make_embedder", refuse)


# ---- 3: every message is checked with the engine's own normaliser at load time ----------------------------

@pytest.mark.parametrize("message, field, problem", [
    ({"role": "robot", "content": "hi"}, "turns[0][1].role", "unknown role"),
    ({"role": "user", "content": 42}, "turns[0][1].content", "must be a string"),
    ({"role": "user"}, "turns[0][1].content", "missing"),
    ({"role": "assistant", "name": "Jo\nhn", "content": "I am a nurse."}, "turns[0][1].name", ""),
    ({"role": "assistant", "name": "The User", "content": "I am a nurse."}, "turns[0][1].name", "'The User' names the current user"),
    ({"role": "user", "content": "x" * 32_001}, "turns[0][1].content", "32001 characters"),  # the engine's limits
])
def test_a_message_the_engine_refuses_is_refused_at_load_time(tmp_path, capsys, no_model_load, message, field,
                                                              problem):
    bad = {**CASES[0], "turns": [[CASES[0]["turns"][0][0], message]]}
    path = _write(tmp_path / "bad.jsonl", [CASES[1], bad])
    code = main(_run("--dataset", str(path), "--embedder", "minilm", "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, f"{path}:2: {field}: {problem}")
    assert not (tmp_path / "r" / "units.jsonl").exists()


def test_a_write_over_the_engines_size_limit_is_refused_at_load_time(tmp_path, capsys, no_model_load):
    turn = [{"role": "user", "content": "x" * 30_000} for _ in range(5)]
    path = _write(tmp_path / "big.jsonl", [{**CASES[0], "turns": [turn]}])
    code = main(_run("--dataset", str(path), "--embedder", "minilm", "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, f"{path}:1: turns[0]", "max_write_chars")


def test_two_dataset_files_of_one_name_are_refused_not_merged(tmp_path, capsys, no_model_load):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    first, second = _write(tmp_path / "a" / "chat.jsonl", CASES[:1]), _write(tmp_path / "b" / "chat.jsonl", CASES[1:])
    code = main(_run("--dataset", str(first), "--dataset", str(second), "--embedder", "minilm",
                     "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, "are all dataset 'chat'", str(first), str(second))


@pytest.mark.parametrize("limit", [[], ["--limit", "5"]])
def test_one_case_id_in_two_files_is_refused_with_or_without_limit(tmp_path, capsys, no_model_load, limit):
    """A unit is (provider, case id, epoch): two cases of one id would share units (resume, scoring)."""
    first = _write(tmp_path / "first.jsonl", CASES[:1])
    second = _write(tmp_path / "second.jsonl", [{**CASES[0], "user_id": "tom"}])
    code = main(_run("--dataset", str(first), "--dataset", str(second), "--embedder", "minilm", *limit,
                     "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, "case ids repeat across datasets: ['a']")


def test_a_lone_surrogate_escape_is_a_bad_line_not_a_traceback(tmp_path, capsys):
    path = tmp_path / "s.jsonl"
    text = json.dumps(CASES[0]).replace("I work at Stripe.", "I work at \\ud800 Stripe.")
    path.write_text(json.dumps(CASES[1], ensure_ascii=False) + "\n" + text + "\n", encoding="utf-8")
    code = main(_run("--dataset", str(path), "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, f"{path}:2: turns[0][0].content: a lone UTF-16 surrogate")


# ---- 4 and 5: the run directory ------------------------------------------------------------------------------

def test_out_that_is_a_file_is_refused(dataset, tmp_path, capsys, no_model_load):
    target = tmp_path / "a-file"
    target.write_text("mine")
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm", "--out", str(target)))
    _one_line_error(capsys, code, 2, "is a file")
    assert target.read_text() == "mine"


def test_out_on_a_directory_that_is_not_a_run_is_refused_and_left_untouched(dataset, tmp_path, capsys,
                                                                            no_model_load):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "summary.md").write_text("my notes")
    (theirs / "units.jsonl").write_text('{"not": "a unit"}\n')
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm", "--out", str(theirs)))
    _one_line_error(capsys, code, 2, "holds other files and no run")
    assert (theirs / "summary.md").read_text() == "my notes"
    assert (theirs / "units.jsonl").read_text() == '{"not": "a unit"}\n'
    assert sorted(p.name for p in theirs.iterdir()) == ["summary.md", "units.jsonl"]


def test_an_empty_existing_directory_is_accepted(dataset, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(empty))) == 0
    assert (empty / "summary.md").exists()


@pytest.fixture
def tmpfs(tmp_path):
    """Mount small tmpfs file systems under tmp_path (needs root; skipped otherwise)."""
    mounted = []

    def mount(name: str, options: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_out_on_a_read_only_file_system_is_one_line_and_exit_2(dataset, tmpfs, capsys, no_model_load):
    ro = tmpfs("ro", "ro,size=1m")
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm", "--out", str(ro / "run")))
    _one_line_error(capsys, code, 2, "--out", "Read-only file system")


def test_the_default_reports_dir_in_a_read_only_cwd_is_one_line_and_exit_2(dataset, tmpfs, capsys, monkeypatch,
                                                                           no_model_load):
    ro = tmpfs("ro", "ro,size=1m")
    monkeypatch.chdir(ro)
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm"))
    _one_line_error(capsys, code, 2, "./reports", "give --out DIR", "Read-only file system")


def test_a_full_disk_mid_run_is_one_line_and_exit_1(dataset, tmpfs, capsys):
    small = tmpfs("small", "size=48k")
    code = main(_run("--dataset", str(dataset), "--out", str(small / "run")))
    _one_line_error(capsys, code, 1, "No space left on device", "--resume")


# ---- 4, 6 and 11: --resume ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_once(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("finished")
    out = root / "run"
    # One unit at a time (`--concurrency 1` alone keeps two in flight over its one connection): the Chinese
    # case "b" is the last record (the torn-record test cuts inside it).
    assert main(_run("--dataset", str(_write(root / "d.jsonl", CASES)), "--faults", "none", "--out", str(out),
                     "--concurrency", "1", "--units-in-flight", "1")) == 0
    return out


@pytest.fixture
def finished(finished_once, tmp_path) -> Path:
    """A copy of one finished run of the dataset, made once for the module: each test damages its own copy."""
    return Path(shutil.copytree(finished_once, tmp_path / "run"))


def test_resume_with_a_truncated_manifest_is_one_line_and_exit_2(dataset, finished, capsys, no_model_load):
    manifest = finished / "manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:40])
    code = main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(finished), "--resume", "--concurrency", "1"))
    _one_line_error(capsys, code, 2, "manifest.json: not a run manifest")


@pytest.mark.parametrize("middle", ['{"foreign": "record", "from": "another tool"}', "garbage, not JSON"])
def test_resume_with_a_foreign_or_garbage_middle_line_is_one_line_and_exit_2(dataset, finished, capsys,
                                                                             no_model_load, middle):
    units = finished / "units.jsonl"
    first, *rest = units.read_text(encoding="utf-8").splitlines(keepends=True)
    units.write_text(first + middle + "\n" + "".join(rest), encoding="utf-8")
    code = main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(finished), "--resume", "--concurrency", "1"))
    _one_line_error(capsys, code, 2, "units.jsonl:2: not a CaseRun record")


@pytest.mark.parametrize("change", [{"case_id": "not-in-this-run"}, {"provider": "another"}, {"epoch": 1}])
def test_resume_refuses_a_record_of_a_unit_the_run_does_not_plan(dataset, finished, capsys, no_model_load, change):
    units = finished / "units.jsonl"
    lines = units.read_text(encoding="utf-8").splitlines()
    units.write_text("\n".join([*lines, json.dumps({**json.loads(lines[0]), **change})]) + "\n", encoding="utf-8")
    code = main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(finished), "--resume", "--concurrency", "1"))
    _one_line_error(capsys, code, 2, f"units.jsonl:{len(lines) + 1}: unit", "is not one of this run's")
    assert not (finished / "cases.parquet").read_bytes().count(b"not-in-this-run")


def test_resume_skips_a_record_torn_inside_a_multibyte_character(dataset, finished, capsys):
    units = finished / "units.jsonl"
    data = units.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = data.index("喜".encode(), last_start) + 1  # inside the 3-byte character
    units.write_bytes(data[:cut])
    code = main(_run("--dataset", str(dataset), "--faults", "none", "--out", str(finished), "--resume", "--concurrency", "1"))
    assert code == 0, capsys.readouterr().err
    cases = pd.read_parquet(finished / "cases.parquet")
    assert sorted(cases.case_id) == ["a", "b"] and (cases.status == "ok").all()


def test_resume_with_other_inputs_and_out_holding_a_run_answer_before_the_model_loads(dataset, finished, capsys,
                                                                                      no_model_load):
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm", "--faults", "none", "--out", str(finished),
                     "--resume", "--concurrency", "1"))
    _one_line_error(capsys, code, 2, "different inputs")
    code = main(_run("--dataset", str(dataset), "--embedder", "minilm", "--faults", "none", "--out", str(finished)))
    _one_line_error(capsys, code, 2, "already holds a run")


# ---- 9: a providers file's problems, one line each -----------------------------------------------------------

_GOOD = 'name = "x"\nmodel = "openai/offline"\napi_base = "http://127.0.0.1:9/v1"\n'


@pytest.mark.parametrize("table, problem", [
    ('name = "x"\n', "provider[0]: model: required (or local)"),
    (_GOOD + "max_connections = 0\n", "provider[0].max_connections: Input should be greater than or equal to 1"),
    (_GOOD + "max_conections = 3\n", "provider[0].max_conections: unknown key"),
    (_GOOD.replace("http://127.0.0.1:9/v1", "not a url"), "provider[0].api_base: not an http(s) URL: 'not a url'"),
    (_GOOD + "input_price = -1\n", "provider[0].input_price: Input should be greater than or equal to 0"),
    (_GOOD + "timeout = 0\n", "provider[0].timeout: Input should be greater than 0"),
    (_GOOD + "[[provider]]\n" + _GOOD, "provider[1].name: 'x' is already a provider's name"),
], ids=["no-model", "no-connections", "unknown-key", "bad-url", "negative-price", "no-timeout", "repeated-name"])
def test_a_bad_providers_file_is_one_line_naming_the_entry_and_field(dataset, tmp_path, capsys, no_model_load,
                                                                     monkeypatch, table, problem):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "providers.toml"
    path.write_text("[[provider]]\n" + table, encoding="utf-8")
    code = main(_run("--dataset", str(dataset), "--providers", str(path), "--lm", "x", "--faults", "none",
                     "--out", str(tmp_path / "r")))
    _one_line_error(capsys, code, 2, f"--providers {path}: {problem}")


def test_every_problem_of_a_providers_file_is_its_own_line(dataset, tmp_path, capsys, no_model_load):
    path = tmp_path / "providers.toml"
    path.write_text('[[provider]]\nname = "x"\nmax_connections = 0\n[[provider]]\nmodel = "offline"\n',
                    encoding="utf-8")
    code = main(_run("--dataset", str(dataset), "--providers", str(path), "--faults", "none",
                     "--out", str(tmp_path / "r")))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert [line.split(f"--providers {path}: ", 1)[1] for line in err] == [
        "provider[0].model: required (or local)",
        "provider[0].max_connections: Input should be greater than or equal to 1",
        "provider[1].name: Field required"]


# ---- 4: serve and proxy ports --------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["serve"], ["proxy", "--upstream", "http://127.0.0.1:9/v1"]])
@pytest.mark.parametrize("port", ["-1", "99999", "http"])
def test_a_bad_port_is_one_line_and_exit_2(capsys, command, port):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--port", port])
    _one_line_error(capsys, exit_info.value.code, 2, "--port")
