"""How the report scales: render a synthetic run of N candidates (5 models x 10 samples per problem,
the shipped candidates' code varied per sample, 40-100 timed calls per timing, a worker's log for
each failure in a worker) and measure it.

    python bench/report_scale.py [N] [--paint]

Prints the render time (the whole site, and the index alone), the whole site's size and file count,
and what the first paint of index.html waits for: its bytes, its elements and the stylesheet and
script it links. --paint also opens index.html in headless Chromium (chromium, chromedriver and
selenium needed) and prints its first contentful paint and load event, the medians of three loads."""

from __future__ import annotations

import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's harness, not an installed one

from harness.judge.diagnose import diagnose
from harness.present.site import render_index, render_site
from harness.records import Result, Status
from tests.unit.present.synthetic import IN_A_WORKER, timing, varied_code, worker_log

MODELS = ["gpt-5", "claude-sonnet-4-5", "gemini-2.5-pro", "llama-3.3-70b", "qwen3-coder"]
SAMPLES = 10


def synthetic_results(count: int) -> list[Result]:
    rng = random.Random(0)
    problems = max(1, count // (len(MODELS) * SAMPLES))
    results = []
    for i in range(count):
        problem = f"{i % problems + 1}_problem"
        model, sample = MODELS[(i // problems) % len(MODELS)], (i // problems // len(MODELS)) % SAMPLES
        status = rng.choice(list(Status))
        ok = status is Status.ok
        reference = timing(rng, rng.uniform(0.05, 40.0), n=rng.randint(40, 100))
        speedup = rng.uniform(0.2, 3.0)
        result = Result(run_id="bench", problem=problem, candidate=f"{problem}/{model}/sample_{sample}_{i}.py",
                        status=status, speedup=speedup if ok else None, candidate_hash=f"{i:064x}",
                        error=None if ok else "main.cpp:4: error: 'f' was not declared in this scope",
                        timing=timing(rng, reference.median_ms / speedup, n=rng.randint(40, 100)) if ok else None,
                        reference_timing=reference, max_abs_err=1e-6 if ok else None,
                        log_tail=worker_log(i, varied_code(i)) if status in IN_A_WORKER else None)
        result.diagnosis = diagnose(result, varied_code(i))
        results.append(result)
    return results


def paint_and_load_ms(index: Path) -> tuple[float, float]:
    """The index's first contentful paint and its load event in headless Chromium, the medians of
    three loads."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1300,2200"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        loads = []
        for _ in range(3):
            driver.get(index.as_uri())
            loads.append(driver.execute_script(
                "return [performance.getEntriesByName('first-contentful-paint')[0].startTime, "
                "performance.getEntriesByType('navigation')[0].loadEventEnd]"))
        return statistics.median(p for p, _ in loads), statistics.median(e for _, e in loads)
    finally:
        driver.quit()


def main() -> None:
    count = int(next((a for a in sys.argv[1:] if a.isdigit()), 5000))
    results = synthetic_results(count)
    codes = {r.candidate: varied_code(i) for i, r in enumerate(results)}
    with tempfile.TemporaryDirectory() as out:
        began = time.perf_counter()
        index = render_site(None, results, lambda r: codes[r.candidate], Path(out))
        elapsed = time.perf_counter() - began
        began = time.perf_counter()
        render_index(None, results)
        index_only = time.perf_counter() - began
        files = [p for p in Path(out).rglob("*") if p.is_file()]
        total = sum(p.stat().st_size for p in files)
        html = index.read_text(encoding="utf-8")
        linked = [Path(out) / link for link in re.findall(r'<(?:link[^>]*href|script[^>]*src)="([^"]+)"', html)]
        print(f"{count} candidates: rendered in {elapsed:.1f} s (the index alone {index_only:.1f} s); "
              f"the site {total / 1e6:.2f} MB in {len(files)} files ({total / count / 1e3:.2f} kB a candidate); "
              f"index.html {len(html.encode()) / 1e6:.2f} MB, {len(re.findall(r'<[a-zA-Z]', html))} elements; "
              f"linked by it: {sum(p.stat().st_size for p in linked) / 1e3:.1f} kB; "
              f"largest page {max(p.stat().st_size for p in files) / 1e6:.2f} MB")
        if "--paint" in sys.argv:
            paint, loaded = paint_and_load_ms(index)
            print(f"index.html in headless Chromium: first contentful paint {paint:.0f} ms, loaded {loaded:.0f} ms")


if __name__ == "__main__":
    main()
