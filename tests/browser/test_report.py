"""The report for the shipped problems and candidates, opened in headless Chromium: every
candidate is listed with its verdict, links lead to candidate pages, sorting and filtering work."""

import json
import os
import shutil

import pytest

from harness.cli import main

from tests.support import REPO

pytestmark = pytest.mark.browser
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


def require_browser():
    try:
        import selenium  # noqa: F401
    except ImportError:
        selenium = None
    missing = [name for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER), ("selenium", selenium))
               if not found]
    if missing:
        message = f"browser tests need {', '.join(missing)} (apt: chromium chromium-driver; pip: .[browser])"
        if os.environ.get("CI"):
            pytest.fail(message)  # CI installs them: a skip there would hide a broken report
        pytest.skip(message)


@pytest.fixture(scope="module")
def shipped_report(tmp_path_factory):
    require_browser()
    tmp = tmp_path_factory.mktemp("report")
    code = main(["eval", str(REPO / "candidates"), "--problems", str(REPO / "problems"), "--out", str(tmp / "site"),
                 "--device", "cpu", "--trials", "3", "--correctness-trials", "2", "--db", str(tmp / "h.db"),
                 "--build-dir", str(tmp / "build")])
    assert code == 0
    results = [json.loads(line) for line in (tmp / "site" / "results.jsonl").read_text().splitlines()]
    return tmp / "site", results


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1300,2200"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def rows(driver, selector="table.leaderboard tbody tr"):
    from selenium.webdriver.common.by import By
    return driver.find_elements(By.CSS_SELECTOR, selector)


def test_leaderboard_lists_every_candidate_with_its_verdict(shipped_report, browser):
    from selenium.webdriver.common.by import By
    site, results = shipped_report
    browser.get((site / "index.html").as_uri())
    shown = {row.find_element(By.CSS_SELECTOR, "td:nth-child(2) a").text: row.find_element(By.CSS_SELECTOR, ".badge").text
             for row in rows(browser)}
    assert shown == {r["candidate"]: r["status"] for r in results}
    assert len(shown) == len(list((REPO / "candidates").rglob("*.*")))
    assert set(shown.values()) == {"ok", "skipped"}  # on CPU: C++ kernels judged, GPU kernels skipped
    browser.save_screenshot(str(site / "leaderboard.png"))
    assert (site / "leaderboard.png").stat().st_size > 10_000


def test_candidate_links_open_their_pages(shipped_report, browser):
    from selenium.webdriver.common.by import By
    site, results = shipped_report
    browser.get((site / "index.html").as_uri())
    links = {a.text: a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, "table.leaderboard a")}
    for result in results:
        browser.get(links[result["candidate"]])
        assert browser.find_element(By.ID, "verdict").text == result["status"]
        assert browser.find_element(By.TAG_NAME, "h1").text == result["candidate"]
        if result["status"] == "ok":
            assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect")  # timing distribution
            assert "load_inline" in browser.find_element(By.CSS_SELECTOR, ".code").text  # extracted code
    browser.find_element(By.LINK_TEXT, "← leaderboard").click()
    assert browser.title.startswith("Kernel leaderboard")


def test_clicking_a_header_sorts_its_table(shipped_report, browser):
    from selenium.webdriver.common.by import By
    site, _ = shipped_report
    browser.get((site / "index.html").as_uri())
    table = browser.find_element(By.CSS_SELECTOR, 'table[data-problem="conv2d_square"]')
    header = table.find_element(By.XPATH, ".//th[text()='candidate']")

    def names():
        return [row.find_element(By.CSS_SELECTOR, "td:nth-child(2) a").text for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]

    header.click()
    assert names() == sorted(names()) and header.get_attribute("aria-sort") == "ascending"
    header.click()
    assert names() == sorted(names(), reverse=True) and header.get_attribute("aria-sort") == "descending"
    # Numbers sort by value: the rank column of the same table, descending, starts at the row count.
    table.find_element(By.XPATH, ".//th[text()='#']").click()
    table.find_element(By.XPATH, ".//th[text()='#']").click()
    ranks = [int(row.find_element(By.CSS_SELECTOR, "td").text) for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert ranks == sorted(ranks, reverse=True) and len(ranks) == 4


def test_filtering_by_text_and_verdict(shipped_report, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
    site, results = shipped_report
    browser.get((site / "index.html").as_uri())
    browser.find_element(By.ID, "filter").send_keys("000_e04650")
    visible = [row for row in rows(browser) if row.is_displayed()]
    assert [row.find_element(By.CSS_SELECTOR, "a").text for row in visible] == ["conv2d_square/000_e04650da845c912a.txt"]
    browser.find_element(By.ID, "filter").clear()
    browser.execute_script("document.getElementById('filter').dispatchEvent(new Event('input'))")
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("ok")
    visible = [row for row in rows(browser) if row.is_displayed()]
    assert len(visible) == sum(r["status"] == "ok" for r in results) > 0
