"""The HTML report: self-contained, every label escaped, the tables and figures there; checked in
headless Chromium when it is installed (Debian `chromium`; .ci/run installs it)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
from pathlib import Path

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
    # Pareto + per run (bars, confusion) + the eps curve of the run with a sweep
    assert len(imgs) == 1 + 2 * 2 + 1
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b in imgs)
    for title in ("CFA / DAFA layout", "FRL layout", "Benz layout", "Robust accuracy vs eps", "Sanity warnings"):
        assert title in html


def _chromium(args, tmp_path, timeout=120):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
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
    assert len(re.findall(r'<img src="data:image/png;base64,', dom)) == 6
    assert re.search(r"<script", dom, re.I) is None
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom  # shown as text, not run
    shot = tmp_path / "page.png"
    res = _chromium(["--hide-scrollbars", "--window-size=1280,2000", f"--screenshot={shot}", page.html.as_uri()], tmp_path)
    assert res.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
