"""Repeats (`run --epochs K`): every unit K times with distinct seeds, per-case stability, flaky cases and
decision flips, and intervals that resample cases with all their epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.arms.oracle import parse_oracle_spec, plan_perturbations
from evals.cases.dataset import bundled_dataset_dir, load_cases
from evals.cli.main import main
from evals.record import read_manifest, read_table, read_units

ROOT = Path(__file__).resolve().parents[2]
P = 0.3
NOISY = f"oracle:flip_owner={P},seed=7"
RUN = ["run", "--faults", "none", "--embedder", "hash", "--no-progress"]


def _run(*args: str) -> int:
    return main([*RUN, *args])


def _metric(run_dir: Path, provider: str, metric: str, dataset: str = "all") -> dict:
    m = pd.read_parquet(run_dir / "metrics.parquet")
    rows = m[(m["provider"] == provider) & (m["dataset"] == dataset) & (m["metric"] == metric)]
    assert len(rows) == 1, (provider, metric, len(rows))
    return rows.iloc[0].to_dict()


@pytest.fixture(scope="module")
def oracles(tmp_path_factory) -> Path:
    """The exact and the noisy oracle, 3 epochs, on 20 cases of each bundled suite."""
    out = tmp_path_factory.mktemp("epochs") / "run"
    assert _run("--lm", NOISY, "--lm", "oracle", "--epochs", "3", "--limit", "20", "--out", str(out)) == 0
    return out


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_every_unit_runs_once_per_epoch_and_the_manifest_counts_them(oracles: Path):
    units = read_units(oracles)
    manifest = read_manifest(oracles)
    assert manifest.epochs == 3
    assert len(units) == 2 * 3 * manifest.n_cases
    by_case: dict[tuple[str, str], set[int]] = {}
    for u in units:
        by_case.setdefault((u.provider, u.case_id), set()).add(u.epoch)
    assert set(map(frozenset, by_case.values())) == {frozenset({0, 1, 2})}
    cases = pd.read_parquet(oracles / "cases.parquet")
    assert sorted(cases["epoch"].unique()) == [0, 1, 2]
    assert sorted(pd.read_parquet(oracles / "case_metrics.parquet")["epoch"].unique()) == [0, 1, 2]


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_the_noisy_oracle_draws_its_errors_afresh_in_each_epoch(oracles: Path):
    facts = pd.read_parquet(oracles / "facts.parquet")
    stored = facts[(facts["provider"] == NOISY) & (facts["stage"] == "stored") & facts["gold_text"].notna()]
    wrong_owner = {e: set(zip(g["case_id"], g["gold_text"], strict=True))
                   for e, g in stored[stored["owner_ok"] == False].groupby("epoch")}  # noqa: E712
    assert len(wrong_owner) == 3 and wrong_owner[0] != wrong_owner[1] != wrong_owner[2]


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_decision_flip_rate_recovers_the_noisy_oracles_flip_rate_within_its_ci(oracles: Path):
    # Each epoch flips the owner of exactly round(P x n) of the n gold facts, drawn independently, so a
    # fact's decision is the same in all three epochs with probability q^3 + (1-q)^3, q = round(P n)/n.
    cases = load_cases([bundled_dataset_dir()])
    shown = {u.case_id for u in read_units(oracles)}
    cases = [c for c in cases if c.id in shown]
    n = sum(len(c.expect.facts or []) for c in cases)
    q = round(P * n) / n
    expected = 1 - q ** 3 - (1 - q) ** 3
    row = _metric(oracles, NOISY, "decision_flip_rate")
    assert row["ci_low"] <= expected <= row["ci_high"], (expected, row)
    assert row["ci_low"] > 0.2
    assert row["n"] == sum(1 for c in cases if c.expect.facts)  # n counts cases, not case x epoch
    flaky = _metric(oracles, NOISY, "flaky_case_rate")
    assert 0 < flaky["value"] < 1 and flaky["n"] == len(cases)


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_the_exact_oracle_has_no_flips_and_no_flaky_cases(oracles: Path):
    assert _metric(oracles, "oracle", "decision_flip_rate")["value"] == 0.0
    assert _metric(oracles, "oracle", "flaky_case_rate")["value"] == 0.0
    stability = pd.read_parquet(oracles / "stability.parquet")
    mine = stability[stability["provider"] == "oracle"]
    assert set(mine["stability"]) <= {"stable-pass", "stable-fail"} and (mine["epochs"] == 3).all()


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_the_per_case_table_classes_each_case_by_its_epochs(oracles: Path):
    stability = pd.read_parquet(oracles / "stability.parquet")
    cm = pd.read_parquet(oracles / "case_metrics.parquet")
    row = stability[(stability["provider"] == NOISY) & (stability["metric"] == "owner_accuracy")
                    & (stability["stability"] == "flaky")].iloc[0]
    values = cm[(cm["provider"] == NOISY) & (cm["case_id"] == row["case_id"]) & (cm["metric"] == "owner_accuracy")]
    per_epoch = (values["num"] / values["den"]).tolist()
    assert len(per_epoch) == 3 and 1.0 in per_epoch and min(per_epoch) < 1.0
    assert row["mean"] == pytest.approx(sum(per_epoch) / 3)
    assert row["passes"] == per_epoch.count(1.0)


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_the_summary_says_which_worst_cases_are_flaky(oracles: Path):
    summary = (oracles / "summary.md").read_text(encoding="utf-8")
    assert "3 epochs per case" in summary
    assert "| flaky_case_rate |" in summary and "| decision_flip_rate |" in summary
    worst = summary.split("## Worst cases", 1)[1].split("##", 1)[0]
    assert "**flaky** on" in worst or "decisions flip between epochs" in worst
    png = oracles / "plots" / "stability.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.ci_heavy  # two runs of 2 epochs (run by `nox -s heavy`)
def test_resume_redoes_only_the_missing_case_epoch_units(tmp_path: Path):
    out = tmp_path / "run"
    args = ["--lm", NOISY, "--epochs", "2", "--limit", "2", "--out", str(out)]
    assert _run(*args) == 0
    lines = (out / "units.jsonl").read_text(encoding="utf-8").splitlines()
    dropped = json.loads(lines[3])
    (out / "units.jsonl").write_text("\n".join(lines[:3] + lines[4:]) + "\n", encoding="utf-8")
    assert _run(*args, "--resume") == 0
    after = (out / "units.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(after) == len(lines)  # exactly one unit was redone
    redone = json.loads(after[-1])
    assert (redone["case_id"], redone["epoch"]) == (dropped["case_id"], dropped["epoch"])
    assert len(read_units(out)) == len(lines)
    # a different epochs count is a different run
    assert _run("--lm", NOISY, "--epochs", "3", "--limit", "2", "--out", str(out), "--resume") == 2


def test_one_epoch_keeps_the_hash_and_metrics_of_runs_made_before_epochs(tmp_path: Path):
    baseline = read_manifest(ROOT / "reports" / "baseline")
    assert baseline.epochs == 1 and baseline.compute_hash() == baseline.manifest_hash
    cases = read_table(ROOT / "reports" / "baseline", "cases")  # written before epochs: migrated to epoch 0
    assert cases is not None and set(cases["epoch"]) == {0}
    out = tmp_path / "one"
    assert _run("--limit", "2", "--out", str(out)) == 0
    metrics = set(pd.read_parquet(out / "metrics.parquet")["metric"])
    assert not metrics & {"flaky_case_rate", "decision_flip_rate"}
    assert not (out / "plots" / "stability.png").exists()


@pytest.mark.ci_heavy  # two runs of 3 epochs (run by `nox -s heavy`)
def test_identical_epochs_never_narrow_an_interval(tmp_path: Path):
    """The offline model is deterministic: K copies of the same answers must give the K=1 intervals and n."""
    one, three = tmp_path / "one", tmp_path / "three"
    assert _run("--limit", "6", "--out", str(one)) == 0
    assert _run("--limit", "6", "--epochs", "3", "--out", str(three)) == 0
    a, b = (pd.read_parquet(p / "metrics.parquet").set_index(["provider", "dataset", "metric"]) for p in (one, three))
    shared = a.index.intersection(b.index)
    rates = [k for k in shared if not str(k[2]).startswith(("latency", "tokens", "cost", "lm_", "embed"))]
    assert len(rates) > 20
    pd.testing.assert_frame_equal(a.loc[rates, ["value", "ci_low", "ci_high", "n"]],
                                  b.loc[rates, ["value", "ci_low", "ci_high", "n"]])
    assert _metric(three, "offline", "decision_flip_rate")["value"] == 0.0


def test_bad_epochs_and_temperature_are_one_line_usage_errors(tmp_path: Path, capsys):
    assert _run("--epochs", "0", "--out", str(tmp_path / "a")) == 2
    assert _run("--temperature", "-1", "--out", str(tmp_path / "b")) == 2
    err = capsys.readouterr().err
    assert "--epochs must be at least 1" in err and "--temperature must be between 0 and 2" in err


def test_each_epoch_plans_its_own_oracle_errors_from_its_seed():
    cases = load_cases([bundled_dataset_dir()])
    spec = parse_oracle_spec(NOISY)
    from evals.arms.oracle import hash_seed

    a = plan_perturbations(spec.model_copy(update={"seed": hash_seed(7, 1)}), cases)
    b = plan_perturbations(spec.model_copy(update={"seed": hash_seed(7, 2)}), cases)
    assert a != b and sum(map(len, a)) == sum(map(len, b))


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_compare_lists_flaky_cases_apart_from_real_flips(oracles: Path, tmp_path: Path):
    assert main(["compare", str(oracles), "--out", str(tmp_path)]) == 0
    cases = pd.read_parquet(tmp_path / "compare_cases.parquet")
    stability = pd.read_parquet(oracles / "stability.parquet")
    flaky = stability[(stability["provider"] == NOISY) & (stability["stability"] == "flaky")]
    flaky_keys = set(zip(flaky["metric"], flaky["case_id"], strict=True))
    listed = cases[cases["change"] == "flaky"]
    flips = cases[cases["change"].isin(["right_to_wrong", "wrong_to_right"])]
    assert len(listed) and len(flips)  # the noisy oracle has both flaky cases and cases wrong in every epoch
    assert set(zip(listed["metric"], listed["case_id"], strict=True)) <= flaky_keys
    assert not set(zip(flips["metric"], flips["case_id"], strict=True)) & flaky_keys
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert f"### Flaky cases, not flips: {len(listed)}" in md


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_gate_pairs_cases_over_their_epoch_means(oracles: Path, tmp_path: Path):
    """n paired is the number of cases, never case x epoch."""
    from evals.core.stats import paired_bootstrap_delta
    from evals.report.compare import case_values, load_run

    run = load_run(oracles)
    values = case_values(run, NOISY, "all", "owner_accuracy")
    n_cases = read_manifest(oracles).n_cases
    assert len(values) <= n_cases
    cm = pd.read_parquet(oracles / "case_metrics.parquet")
    mine = cm[(cm["provider"] == NOISY) & (cm["metric"] == "owner_accuracy")]
    some = mine["case_id"].iloc[0]
    rows = mine[mine["case_id"] == some]
    assert values[(rows["dataset"].iloc[0], some)] == pytest.approx(rows["num"].sum() / rows["den"].sum())
    exact = case_values(run, "oracle", "all", "owner_accuracy")
    delta, low, high, n = paired_bootstrap_delta(values, exact, seed=0)
    assert n == len(values) and low <= delta <= high and delta > 0


# ---- HTTP providers: a sampling seed and temperature per epoch, and no epoch reuses another's reply --------


class _Recorder:
    """A pass-through HTTP server on 127.0.0.1 that keeps every request body it forwards."""

    def __init__(self, upstream: str):
        import threading
        import urllib.request
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies: list[dict] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                recorder.bodies.append(json.loads(body))
                request = urllib.request.Request(upstream.rstrip("/") + self.path.removeprefix("/v1"), data=body,
                                                 headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=60) as reply:
                    data, status = reply.read(), reply.status
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.ci_heavy  # runs over HTTP through `serve` (run by `nox -s heavy`)
def test_http_epochs_send_their_own_seed_and_the_temperature_and_never_share_a_cached_reply(tmp_path: Path):
    from evals.arms.serve import start_server

    dataset = tmp_path / "d.jsonl"
    dataset.write_text(json.dumps({
        "id": "a", "lang": "en", "user_id": "tim",
        "turns": [[{"role": "user", "name": "Tim", "content": "I moved to Berlin. I work at Stripe."}]],
        "expect": {"facts": [{"text": "The user lives in Berlin."}, {"text": "The user works at Stripe."}]}}) + "\n",
        encoding="utf-8")
    with start_server() as server:
        recorder = _Recorder(server.url)
        try:
            args = ["--dataset", str(dataset), "--lm", f"openai/offline@{recorder.url}", "--epochs", "2",
                    "--temperature", "0.7"]  # both runs share the cache next to them, tmp_path/.cache
            assert _run(*args, "--out", str(tmp_path / "one")) == 0
            first = list(recorder.bodies)
            assert _run(*args, "--out", str(tmp_path / "two")) == 0
        finally:
            recorder.close()
    assert first and {b.get("temperature") for b in first} == {0.7}
    assert len({b.get("seed") for b in first}) == 2  # one sampling seed per epoch
    units = read_units(tmp_path / "one")
    assert {u.epoch for u in units} == {0, 1}
    for unit in units:  # epoch 1 asked the model itself, though epoch 0 had sent the same prompts
        lm = [a for a in unit.attempts if a.site != "embed"]
        assert lm and not any(a.cache_hit for a in lm), unit.epoch
    assert len(recorder.bodies) == len(first)  # the second run was answered from the cache, epoch by epoch
    again = read_units(tmp_path / "two")
    assert all(a.cache_hit for u in again for a in u.attempts if a.site != "embed")


@pytest.mark.ci_heavy  # two runs and two gates (run by `nox -s heavy`)
def test_a_one_epoch_run_gates_against_a_multi_epoch_baseline_and_back(tmp_path: Path, capsys):
    """A repeated baseline is not a bigger one: the 1-epoch run lost no case, and cannot measure flakiness."""
    one, two = tmp_path / "one", tmp_path / "two"
    small = ["--lm", "oracle", "--dataset", str(ROOT / "datasets" / "chat_en.jsonl"), "--limit", "3",
             "--matcher", "text"]
    assert _run(*small, "--out", str(one)) == 0
    assert _run(*small, "--epochs", "2", "--out", str(two)) == 0
    assert _metric(two, "oracle", "lm_attempts")["n"] == _metric(one, "oracle", "lm_attempts")["n"] == 3
    capsys.readouterr()
    assert main(["gate", "--baseline", str(two), "--current", str(one)]) == 0, capsys.readouterr().out
    note = (one / "gate.md").read_text(encoding="utf-8")
    assert "The baseline ran 2 epoch(s) per case and the current run 1" in note
    assert "flaky_case_rate and decision_flip_rate need two or more epochs" in note
    assert main(["gate", "--baseline", str(one), "--current", str(two)]) == 0
    assert main(["compare", str(one), str(two), "--out", str(tmp_path / "cmp")]) == 0
    md = (tmp_path / "cmp" / "compare.md").read_text(encoding="utf-8")
    assert ", 3 cases, 2 epochs per case (" in md and "a different number of times (1, 2 epochs)" in md


@pytest.fixture(scope="module")
def faulted(tmp_path_factory) -> Path:
    """The offline model under the fast sweep, 2 epochs of 4 cases."""
    out = tmp_path_factory.mktemp("faulted") / "run"
    assert main(["run", "--embedder", "hash", "--no-progress", "--matcher", "text", "--limit", "4", "--epochs", "2",
                 "--dataset", str(ROOT / "datasets" / "chat_en.jsonl"), "--faults", "sweep:fast",
                 "--out", str(out)]) == 0
    return out


@pytest.mark.ci_heavy  # the faulted fixture: a fast sweep of 2 epochs (run by `nox -s heavy`)
def test_gating_shared_cases_of_a_multi_epoch_run_keeps_its_values_and_n(faulted: Path):
    """--allow-different-inputs recomputes every value from the per-case tables: over all cases of a K-epoch run
    it must give the report's values and n (cases, not case x epoch; counts per epoch, not K^2 times)."""
    from evals.report.compare import load_run
    from evals.report.gate_inputs import case_hashes, restrict

    out = faulted
    run = load_run(out)
    again = restrict(run, set(case_hashes(run)))
    merged = again.metrics.merge(run.metrics, on=["provider", "dataset", "metric"], suffixes=("", "_report"))
    assert len(merged) == len(again.metrics) and {"faulted_units", "owner_accuracy"} <= set(merged["metric"])
    assert _metric(out, "offline", "faulted_units")["value"] > 0
    pd.testing.assert_series_equal(merged["value"], merged["value_report"], check_names=False)
    by_case = merged[~merged["metric"].isin(["rollback_correct_rate", "error_code_accuracy", "retry_equivalence_rate",
                                             "infra_error_rate"])  # whose report n counts units, not cases
                     & ~merged["metric"].str.startswith("write_failure_")]  # and writes
    assert len(by_case) > 20
    pd.testing.assert_series_equal(by_case["n"], by_case["n_report"], check_names=False)


@pytest.mark.ci_heavy  # the oracles fixture: 2 providers x 3 epochs x 60 cases (run by `nox -s heavy`)
def test_show_says_how_many_epochs_and_headlines_flakiness(oracles: Path):
    """The terminal table (show, and the end of `run`) of a K-epoch run, as its summary.md."""
    from evals.report.compare import show

    text = show(oracles)
    assert "· 3 epochs per case ·" in text.splitlines()[1]
    assert any(line.startswith("flaky_case_rate ") for line in text.splitlines())
    assert any(line.startswith("decision_flip_rate ") for line in text.splitlines())


@pytest.mark.ci_heavy  # the faulted fixture: a fast sweep of 2 epochs (run by `nox -s heavy`)
def test_the_verdict_counts_a_repeated_case_once(faulted: Path):
    """8 units of 4 cases in 2 epochs are not 8 cases."""
    summary = (faulted / "summary.md").read_text(encoding="utf-8")
    reasons = summary.split("\n\n", 2)[1]
    assert "in 8 units (4 cases × 2 epochs)" in reasons and "8 cases" not in reasons, reasons


@pytest.mark.ci_heavy  # the faulted fixture: a fast sweep of 2 epochs (run by `nox -s heavy`)
def test_faults_and_anomalies_say_which_epoch_they_belong_to(faulted: Path):
    """K epochs replay the same case and write K times: without the epoch their rows cannot be told apart."""
    faults = read_table(faulted, "faults")
    assert faults is not None and set(faults["epoch"]) == {0, 1}
    per_epoch = faults.groupby("epoch").size()
    assert per_epoch[0] == per_epoch[1] > 0
    anomalies = read_table(faulted, "anomalies")
    assert anomalies is not None and "epoch" in anomalies.columns


@pytest.fixture(scope="module")
def engine_errors(tmp_path_factory) -> Path:
    """2 epochs of 2 cases, where every write for tim raises: a write-contract finding (ENGINE_EXCEPTION) per epoch."""
    import hymem.client as client_module

    real = client_module.HyMemoryClient.add

    def broken_for_tim(self, messages, user_id, request_id=None):
        if user_id == "tim":
            raise RuntimeError("planted: tim's writes fail")
        return real(self, messages, user_id, request_id)

    out = tmp_path_factory.mktemp("engine_errors") / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(client_module.HyMemoryClient, "add", broken_for_tim)
        assert _run("--dataset", str(ROOT / "datasets" / "chat_en.jsonl"), "--limit", "2", "--epochs", "2",
                    "--matcher", "text", "--out", str(out)) == 0
    return out


def test_an_anomaly_in_the_summary_names_its_epoch(engine_errors: Path):
    out = engine_errors
    found = (out / "summary.md").read_text(encoding="utf-8").split("## Anomalies", 1)[1].split("## Infra", 1)[0]
    assert "`en-001-tim-john` write 1, epoch 0 (chat)" in found and "write 1, epoch 1 (chat)" in found, found
    anomalies = read_table(out, "anomalies")
    assert anomalies is not None and sorted(anomalies["epoch"]) == [0, 1]


def test_gating_shared_cases_counts_the_write_contract_findings_as_anomalies(engine_errors: Path):
    """restrict() must count what anomaly_count counts, the control run's findings included, or a gate with
    --allow-different-inputs passes `anomaly_count == 0` on a run whose summary lists anomalies."""
    from evals.report.compare import load_run
    from evals.report.gate_inputs import case_hashes, restrict

    run = load_run(engine_errors)
    assert _metric(engine_errors, "offline", "anomaly_count")["value"] == 1.0
    again = restrict(run, set(case_hashes(run))).metrics
    row = again[(again["dataset"] == "all") & (again["metric"] == "anomaly_count")]
    assert row["value"].tolist() == [1.0]


@pytest.mark.ci_heavy  # two fast sweeps of 2 epochs (run by `nox -s heavy`)
def test_a_resumed_fast_sweep_faults_the_same_units_as_an_uninterrupted_one(tmp_path: Path):
    """sweep:fast designates its faulted units from a probe of every unit. A resume that probed only the missing
    units designated others: a case's two epochs got different faults, and the run was not the one it resumed."""
    out = tmp_path / "run"
    args = ["--dataset", str(ROOT / "datasets" / "chat_en.jsonl"), "--limit", "10", "--lm", "oracle", "--epochs", "2",
            "--faults", "sweep:fast", "--matcher", "text", "--out", str(out)]
    assert main(["run", "--embedder", "hash", "--no-progress", *args]) == 0
    whole = {(u.case_id, u.epoch): sorted((f.write, f.site, f.kind) for f in u.faults) for u in read_units(out)}
    lines = (out / "units.jsonl").read_text(encoding="utf-8").splitlines()
    (out / "units.jsonl").write_text("\n".join(lines[:-6]) + "\n", encoding="utf-8")  # the last faulted replays
    assert main(["run", "--embedder", "hash", "--no-progress", *args, "--resume"]) == 0
    resumed = {(u.case_id, u.epoch): sorted((f.write, f.site, f.kind) for f in u.faults) for u in read_units(out)}
    assert resumed == whole
