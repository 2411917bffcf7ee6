"""`hymem-eval view`: the HTML page of a real run, opened in headless Chromium, checked for what a person sees.

The run is a real one (the offline model beside an oracle that files every fact under a wrong subject, hash
embedder) with two planted problems:
a store that never finds a recorded request (DOUBLE_WRITE, with its witness) for one user, and a model reply
that is not JSON for one conversation (a fault-free write that fails on the model's own reply).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from evals.cli.main import main
from evals.report.view_data import load, page_data

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
PLANTED_USER = "planted-user"  # the store forgets this user's recorded requests: a re-sent request_id writes again
GARBLED = "Kilimanjaro"
SECRET = 'My password: hunter2hunter2"ok"'  # redacted in every file; in the page, without breaking its JSON
NOISY = "oracle:swap_subject=1,seed=1"  # the gold facts, each filed under another subject  # a conversation naming it gets a reply from the offline model that is not JSON
CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")


def _cases() -> list[dict]:
    rows = {c["id"]: c for c in map(json.loads, (DATASETS / "chat_en.jsonl").read_text(encoding="utf-8").splitlines())}
    tim, long_message, teacher = rows["en-001-tim-john"], rows["en-070-long-user-message"], rows["en-002-unnamed-teacher"]
    planted = {**teacher, "id": "en-900-planted-double-write", "user_id": PLANTED_USER, "tags": ["planted"]}
    garbled = {**teacher, "id": "en-901-garbled-reply", "user_id": "u-garbled", "tags": ["planted"],
               "turns": [*teacher["turns"], [{"role": "user", "content": f"I climbed {GARBLED} last year. {SECRET}"}]]}
    return [tim, long_message, planted, garbled]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    from hymem.offline import _engine
    from hymem.store._store import Store

    root = tmp_path_factory.mktemp("view")
    data = root / "cases.jsonl"
    data.write_text("".join(json.dumps(c) + "\n" for c in _cases()), encoding="utf-8")
    recorded, answer = Store.recorded_request, _engine.answer
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Store, "recorded_request",
                      lambda self, user_id, rid: None if user_id == PLANTED_USER else recorded(self, user_id, rid))
        patch.setattr(_engine, "answer", lambda text, site: "this is not JSON" if GARBLED in text else answer(text, site))
        code = main(["run", "--dataset", str(data), "--lm", "offline", "--lm", NOISY, "--faults", "none",
                     "--embedder", "hash", "--matcher", "text", "--out", str(root / "run"), "--no-progress"])
    assert code == 0
    yield root / "run"


@pytest.fixture(scope="module")
def browser() -> Iterator:
    if not (CHROMIUM and CHROMEDRIVER):
        if os.environ.get("HYMEM_REQUIRE_BROWSER"):
            pytest.fail("HYMEM_REQUIRE_BROWSER is set but chromium or chromedriver is missing "
                        "(apt-get install chromium chromium-driver)")
        pytest.skip("no chromium and chromedriver (Debian: apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="hymem-chromium-")
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                "--window-size=1400,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"


def _rows(driver) -> list[str]:
    from selenium.webdriver.common.by import By

    return [row.get_attribute("data-case") for row in driver.find_elements(By.CSS_SELECTOR, "#case-rows tr")]


def _check(driver, flag: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f"input.flag[value='{flag}']").click()


def _open_case(driver, case_id: str):
    from selenium.webdriver.common.by import By

    cell = driver.find_element(By.CSS_SELECTOR, f"#case-rows tr[data-case='{case_id}'] td")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)  # clear of the sticky header
    cell.click()
    detail = driver.find_element(By.ID, "detail")
    assert detail.is_displayed() and detail.find_element(By.ID, "detail-case").text == case_id
    return detail


def test_run_writes_report_html_and_the_page_is_self_contained(run_dir: Path):
    html = (run_dir / "report.html").read_text(encoding="utf-8")
    assert "<link" not in html and 'src="http' not in html and "fetch(" not in html  # no network, no other file
    assert html.count("data:image/png;base64,") >= 1  # the run's plots, inline


def test_headline_and_verdict_as_the_record_says(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    badge = browser.find_element(By.CSS_SELECTOR, "header .verdict")
    assert badge.text == manifest["verdict"] == "invalid"  # the planted DOUBLE_WRITE makes it invalid
    assert "DOUBLE_WRITE" in browser.find_element(By.CSS_SELECTOR, "#run-0 .reasons").text
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    recall = metrics[(metrics["provider"] == NOISY) & (metrics["dataset"] == "all")
                     & (metrics["metric"] == "fact_recall")].iloc[0]
    table = browser.find_element(By.CSS_SELECTOR, "table.headline[data-dataset='all']")
    header = [th.text for th in table.find_elements(By.CSS_SELECTOR, "thead th")]
    assert header == ["metric", "offline", NOISY]
    row = next(tr for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr") if tr.text.startswith("fact_recall"))
    assert f"{recall['value']:.3f} [{recall['ci_low']:.3f}, {recall['ci_high']:.3f}] n={recall['n']}" in \
        row.find_elements(By.TAG_NAME, "td")[1].text
    paints = browser.execute_script("return performance.getEntriesByType('paint').map(e => e.name)")
    assert "first-contentful-paint" in paints
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [u for u in loaded if not u.startswith("data:")] == []  # nothing fetched: works offline from file://


def test_a_case_shows_its_gold_and_stored_facts_with_subjects(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    detail = _open_case(browser, "en-001-tim-john")
    facts = pd.read_parquet(run_dir / "facts.parquet")
    arms = detail.find_elements(By.CSS_SELECTOR, ".arm")
    assert [a.find_element(By.TAG_NAME, "h3").text for a in arms] == ["offline", NOISY]  # side by side
    for arm in arms:
        provider = arm.find_element(By.TAG_NAME, "h3").text
        shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in arm.find_elements(By.CSS_SELECTOR, "table.facts[data-stage='stored'] tbody tr")]
        mine = facts[(facts["provider"] == provider) & (facts["case_id"] == "en-001-tim-john")
                     & (facts["stage"] == "stored")]
        expected = [[r.gold_text or "", r.gold_subject or "", r.pred_text or "", r.pred_subject or ""]
                    for r in mine.itertuples()]
        assert [[row[1], row[2], row[4], row[5]] for row in shown] == expected
        assert ["John is a nurse in Berlin.", "John"] in [[row[1], row[2]] for row in shown]
        speakers = [s.text for s in arm.find_elements(By.CSS_SELECTOR, ".msg .speaker")]
        assert "[John]" in speakers and "[user] (Tim)" in speakers  # the speakers of the conversation


def test_filters_narrow_the_list(run_dir: Path, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    _open(browser, run_dir / "report.html")
    everything = sorted(_rows(browser))
    assert everything == sorted(c["id"] for c in _cases())
    _check(browser, "failed")
    assert _rows(browser) == ["en-901-garbled-reply"]
    _check(browser, "failed")
    _check(browser, "anomalies")  # the garbled reply failed its write cleanly: a natural failure, no anomaly
    assert sorted(_rows(browser)) == ["en-900-planted-double-write"]
    Select(browser.find_element(By.ID, "f-kind")).select_by_visible_text("DOUBLE_WRITE")
    assert _rows(browser) == ["en-900-planted-double-write"]
    Select(browser.find_element(By.ID, "f-kind")).select_by_index(0)
    _check(browser, "anomalies")
    Select(browser.find_element(By.ID, "f-tag")).select_by_visible_text("named-human")
    assert _rows(browser) == ["en-001-tim-john"]
    Select(browser.find_element(By.ID, "f-tag")).select_by_index(0)
    assert sorted(_rows(browser)) == everything


def test_flipped_cases_come_first(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    flips = page_data([load(run_dir)]).cases
    flipped = {c["case_id"] for c in flips if any(f["change"] in ("right_to_wrong", "wrong_to_right")
                                                   for f in c["flips"])}
    assert flipped and "en-001-tim-john" in flipped  # offline files John's facts under John; the noisy oracle does not
    rows = _rows(browser)
    assert set(rows[:len(flipped)]) == flipped
    _check(browser, "flipped")
    assert set(_rows(browser)) == flipped
    detail = _open_case(browser, "en-001-tim-john")
    changes = detail.find_element(By.CSS_SELECTOR, ".box.flips").text
    assert f"subject_accuracy: right to wrong — offline: 1, {NOISY}: 0" in changes
    noisy = detail.find_elements(By.CSS_SELECTOR, ".arm")[1]
    assert noisy.find_elements(By.CSS_SELECTOR, "table.facts td.subject-wrong")  # the wrong subjects, marked


def test_an_anomaly_shows_its_witness_and_a_failed_write_its_codes(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    anomalies = pd.read_parquet(run_dir / "anomalies.parquet")
    planted = anomalies[(anomalies["case_id"] == "en-900-planted-double-write") & (anomalies["provider"] == "offline")]
    assert "DOUBLE_WRITE" in set(planted["kind"])
    detail = _open_case(browser, "en-900-planted-double-write")
    box = detail.find_element(By.CSS_SELECTOR, ".arm .anomalies")
    witness = planted[planted["kind"] == "DOUBLE_WRITE"].iloc[0]["witness"]
    assert "DOUBLE_WRITE" in box.text and witness.splitlines()[0] in box.text

    detail = _open_case(browser, "en-901-garbled-reply")
    failed = detail.find_element(By.CSS_SELECTOR, ".arm .failed-writes")
    assert "write 1" in failed.text and "JSON_PARSE_FAILED" in failed.text
    assert "parse at lm.extract" in failed.text and "held" in failed.text  # the cause read off the reply; contract
    write = detail.find_element(By.CSS_SELECTOR, ".arm .write[data-write='1']")
    assert "FAILED" in write.text
    call = write.find_element(By.CSS_SELECTOR, "details.call")
    call.find_element(By.TAG_NAME, "summary").click()
    assert "this is not JSON" in call.text and GARBLED in call.text  # the model's call: prompt and reply
    assert 'password: [REDACTED]"ok"' in write.text
    assert "hunter2hunter2" not in (run_dir / "report.html").read_text(encoding="utf-8")


def test_a_long_prompt_is_cut_and_expands(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    detail = _open_case(browser, "en-070-long-user-message")
    call = detail.find_element(By.CSS_SELECTOR, ".arm .write[data-write='0'] details.call")
    call.find_element(By.TAG_NAME, "summary").click()
    prompt = call.find_element(By.TAG_NAME, "pre")
    cut = len(prompt.text)
    call.find_element(By.CSS_SELECTOR, "button.expand").click()
    assert len(prompt.text) > cut and "lighthouse" in prompt.text


def test_a_link_opens_the_case(run_dir: Path, browser):
    from selenium.webdriver.common.by import By

    _open(browser, run_dir / "report.html")
    browser.get((run_dir / "report.html").resolve().as_uri() + "#case=cases%2Fen-070-long-user-message")
    assert browser.find_element(By.ID, "detail-case").text == "en-070-long-user-message"


def test_view_of_two_runs_pairs_their_cases(run_dir: Path, tmp_path: Path, capsys):
    other = tmp_path / "again"
    shutil.copytree(run_dir, other)
    out = tmp_path / "both.html"
    assert main(["view", str(run_dir), str(other), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    data = page_data([load(run_dir), load(other)])
    assert [a.label for a in data.arms] == ["run#1/offline", f"run#1/{NOISY}", "run#2/offline", f"run#2/{NOISY}"]
    case = next(c for c in data.cases if c["case_id"] == "en-001-tim-john")
    assert sorted(case["arms"]) == ["0", "1", "2", "3"]  # each case once, every run's providers beside each other
    assert [(p["a"], p["b"]) for p in data.comparison] == [("run#1/offline", "run#2/offline"),
                                                                 (f"run#1/{NOISY}", f"run#2/{NOISY}")]
    assert f"run#2/{NOISY}" in out.read_text(encoding="utf-8")


def test_view_of_a_missing_run_is_exit_2(tmp_path: Path, capsys):
    assert main(["view", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_a_run_recorded_before_messages_were_kept_still_opens(run_dir: Path, tmp_path: Path):
    old = tmp_path / "old"
    shutil.copytree(run_dir, old)
    lines = (old / "units.jsonl").read_text(encoding="utf-8").split("\n")
    units = [json.loads(line) for line in lines if line.strip()]
    for unit in units:
        for write in unit["writes"]:
            del write["payload"], write["calls"]
    (old / "units.jsonl").write_text("".join(json.dumps(u) + "\n" for u in units), encoding="utf-8")
    assert main(["view", str(old)]) == 0
    data = page_data([load(old)])
    tim = next(u for u in data.units if u["case_id"] == "en-001-tim-john")
    assert tim["writes"] and all(w["payload"] == [] and w["calls"] == [] for w in tim["writes"])
    assert [f["gold"] for f in tim["facts"]["stored"] if f["gold"]]  # the gold and stored facts are still there
    assert "not in the record" in (old / "report.html").read_text(encoding="utf-8")  # the page says why


def test_a_run_directory_without_units_jsonl_opens_from_its_tables(run_dir: Path, tmp_path: Path):
    baseline = tmp_path / "baseline"  # as reports/baseline is committed: the tables and the manifest only
    shutil.copytree(run_dir, baseline)
    (baseline / "units.jsonl").unlink()
    assert main(["view", str(baseline), str(run_dir), "--out", str(tmp_path / "page.html")]) == 0
    tables, record = page_data([load(baseline)]), page_data([load(run_dir)])
    assert [c["case_id"] for c in tables.cases] == [c["case_id"] for c in record.cases]
    key = lambda u: (u["arm"], u["case_id"], u["epoch"])  # noqa: E731
    by_record = {key(u): u for u in record.units}
    for unit in tables.units:
        assert unit["record"] is False and unit["writes"] == []
        same = by_record[key(unit)]
        assert unit["facts"] == same["facts"]  # gold and stored facts with their subjects, from facts.parquet
        assert sorted((a["kind"], a["witness"]) for a in unit["anomalies"]) == \
            sorted((a["kind"], a["witness"]) for a in same["anomalies"])
    assert tables.runs[0]["verdict"] == "invalid" and "summary.md" in tables.runs[0]["reasons"][0]
