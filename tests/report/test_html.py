"""The HTML report: self-contained, every label escaped, the tables and figures there; checked in
headless Chromium when it is installed (Debian `chromium`; .ci/run installs it)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from robfair.report.html import write_report

from reportkit import entry

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    classes = ["<script>alert(1)</script>", "cat & dog", "$x^2$", "ok"]
    sweep = [entry("s", [(20, 20, 20 - 5 * i), (20, 18, 18 - 4 * i), (20, 15, 15 - 5 * i), (20, 19, 19 - 6 * i)],
                   classes).audit for i in range(3)]
    for i, a in enumerate(sweep):
        for r in a.reports.values():
            object.__setattr__(r, "eps", 0.05 * i)
    entries = [
        entry("standard", [(20, 19, 2), (20, 18, 1), (20, 17, 0), (20, 19, 3)], classes, method="standard"),
        entry("<b>pgd-at</b>", [(20, 16, 9), (20, 15, 8), (20, 14, 5), (20, 16, 10)], classes,
              warnings=["possible gradient masking: FGSM beats PGD (<i>check</i>)"], eps_sweep=sweep),
    ]
    out = tmp_path_factory.mktemp("report") / "rep.html"
    paths = write_report(entries, out, title="Study <img src=x onerror=alert(1)>", description="a & b", n_boot=100)
    return paths


def test_files_written(page):
    assert page.html.exists() and page.markdown == page.html.with_suffix(".md")
    names = sorted(p.name for p in page.tables)
    assert names == ["benz-clean.csv", "benz-robust.csv", "eps.csv", "frl.csv", "summary.csv", "warnings.csv"]
    assert all(p.parent.name == "rep_tables" for p in page.tables)


def test_every_label_is_escaped(page):
    html = page.html.read_text()
    assert re.search(r"<\s*script", html, re.I) is None  # no script element at all, injected or ours
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;pgd-at&lt;/b&gt;" in html and "<b>pgd-at" not in html
    assert "Study &lt;img src=x onerror=alert(1)&gt;" in html and "<img src=x" not in html
    assert "cat &amp; dog" in html and "$x^2$" in html and "a &amp; b" in html
    assert "FGSM beats PGD (&lt;i&gt;check&lt;/i&gt;)" in html
    md = page.markdown.read_text()
    assert "<script" not in md and "&lt;script&gt;" in md  # raw HTML in Markdown would render too


def test_self_contained(page):
    html = page.html.read_text()
    assert re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I) is None  # nothing fetched
    assert "@import" not in html and "url(" not in html
    imgs = re.findall(r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    # overview + class x run heatmap + Pareto; per run: error split, confusion; + the eps curve of the run with a sweep
    assert len(imgs) == 3 + 2 * 2 + 1
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in imgs)
    for title in ("Which classes are weak, how much, and how sure", "robust accuracy per class and run",
                  "average vs worst-class robust accuracy", "standard and boundary error per class",
                  "robust accuracy vs eps per class", "confusion matrices"):
        assert title in html, title
    for title in ("CFA / DAFA layout", "FRL layout", "Benz layout", "Robust accuracy vs eps", "Sanity warnings"):
        assert title in html


def test_picture_first_and_every_run_open(page):
    html = page.html.read_text()
    assert html.index("Which classes are weak") < html.index("<table")  # the figure before any table
    assert html.count("<details open") == html.count("<details") == 2  # every run section open, collapsible


def _chromium(args, tmp_path, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'ud'}"]
    return subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=timeout)


def console_lines(stderr: str) -> list[str]:
    return [s for s in stderr.splitlines() if ":CONSOLE" in s]


@needs_chromium
def test_console_error_detection_works(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefined_function()</script></body></html>")
    res = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", bad.as_uri()], tmp_path)
    assert any("undefined_function" in s for s in console_lines(res.stderr))


@needs_chromium
def test_page_in_headless_chromium(page, tmp_path):
    res = _chromium(["--enable-logging=stderr", "--v=0", "--dump-dom", page.html.as_uri()], tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert console_lines(res.stderr) == []  # no console errors (nor messages)
    dom = res.stdout
    assert len(re.findall(r"<table", dom)) == 6
    assert len(re.findall(r'<img src="data:image/png;base64,', dom)) == 8
    assert re.search(r"<script", dom, re.I) is None
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # shown as text, not run
    shot = tmp_path / "page.png"
    res = _chromium(["--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}", page.html.as_uri()], tmp_path)
    assert res.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


# ----------------------------------------------------------------------------------- a real browser at 1400 px
TEN = [f"class-{i}" for i in range(10)]


@pytest.fixture(scope="module")
def ten_class_page(tmp_path_factory):
    """Three runs on 10 classes with one eps sweep: the report a user of CIFAR-10 gets."""
    rng = np.random.default_rng(1)
    cells = lambda hi: [(100, c, int(c * rng.uniform(0.01, hi))) for c in rng.integers(70, 100, size=10)]  # noqa: E731
    sweep = [entry("s", [(100, 90, max(0, 90 - i * (5 + j))) for j in range(10)], TEN).audit for i in range(4)]
    for i, a in enumerate(sweep):
        for r in a.reports.values():
            object.__setattr__(r, "eps", 2 / 255 * i)
    entries = [entry("standard-training", cells(0.05), TEN, method="standard"),
               entry("pgd-at", cells(0.8), TEN, eps_sweep=sweep), entry("trades-beta-6", cells(0.8), TEN, method="trades")]
    return write_report(entries, tmp_path_factory.mktemp("ten") / "ten.html", n_boot=50).html


def _overflowing(check, width):
    return [t["title"] for t in check["tables"] if t["width"] > t["containerWidth"] + 0.5 or t["right"] > width]


def _broken(check):
    return [i["alt"] for i in check["images"] if not i["complete"] or i["w"] == 0 or i["h"] == 0 or i["shownW"] < 50]


@needs_chromium
def test_report_in_a_real_browser(ten_class_page, tmp_path):
    """Every figure decoded and shown, no table wider than its box, nothing scrolls sideways at 1400 px."""
    from robfair.report.browser import Browser

    with Browser() as b:
        check = b.open(ten_class_page, width=1400).check()
        assert len(check["images"]) == 3 + 3 * 2 + 1
        assert _broken(check) == []
        assert check["tables"] and _overflowing(check, 1400) == [], check["tables"]
        assert check["scrollWidth"] <= 1400
        assert all(check["details"])
        assert check["title"] == check["h1"] == "robfair report"
        # the checks can fail: a broken image and a wide table are caught
        bad = tmp_path / "bad.html"
        wide = "".join(f"<td>{'9' * 40}</td>" for _ in range(10))
        bad.write_text(f"<html><body><img alt='broken' src='data:image/png;base64,AAAA'>"
                       f"<section><h3>wide</h3><div class='scroll' style='overflow-x:auto;max-width:1250px'>"
                       f"<table><tr>{wide}</tr></table></div></section></body></html>")
        check = b.open(bad, width=1400).check()
        assert _broken(check) == ["broken"] and _overflowing(check, 1400) == ["wide"]
        assert b.console == []
