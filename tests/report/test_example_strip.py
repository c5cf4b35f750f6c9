"""The report's strip of the weakest class's clean / adversarial images (from the audit's examples.npz):
shown when the file is there, skipped silently when not, labels escaped."""

from __future__ import annotations

import base64
import re
import shutil

import numpy as np
import pytest
import torch
from torch import nn

from robfair.auditing import AuditReport, audit, examples_path
from robfair.data import Dataset
from robfair.report.html import amplified_perturbation, example_strip, write_report
from robfair.report.tables import RunEntry

from reportkit import entry

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _audited(tmp_path, classes, channels=3, groups=None):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    k = len(classes)
    model = nn.Sequential(nn.Conv2d(channels, 4, 3), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 4 * 4, k)).eval()
    x = torch.rand(96, channels, 6, 6, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    y[::7] = (y[::7] + 1) % k
    gid = None if groups is None else torch.arange(96) % len(groups)
    ds = Dataset(x=x, y=y, classes=list(classes), g=gid, groups=groups, name="toy")
    rep = audit(model, ds, ["pgd10"], eps=0.1, device="cpu", batch_size=32, probe=0)
    path = rep.save(tmp_path / "run", bootstrap=0)
    return AuditReport.load(path), path


def _strip_html(html):
    m = re.search(r'<figure class="strip">(.*?)</figure>', html, re.S)
    return m.group(1) if m else None


def test_strip_shown_with_examples_and_labels_escaped(tmp_path, evil_classes):
    rep, path = _audited(tmp_path, evil_classes, groups=["<g>", "h&i"])
    ex = rep.examples
    assert ex is not None and examples_path(path).is_file()
    out = write_report([RunEntry(name="audited", audit=rep, path=path.parent), entry("plain", [(10, 9, 5)] * 4,
                                                                                     evil_classes)],
                       tmp_path / "r.html", n_boot=20)
    html = out.html.read_text()
    strip = _strip_html(html)
    assert strip is not None and html.count('<figure class="strip">') == 1  # the run without examples has none
    assert re.search(r"<\s*script", html, re.I) is None
    cells = re.findall(r'<div class="cell"><img src="data:image/png;base64,([A-Za-z0-9+/=]+)" alt="([^"]*)"><span>([^<]*)</span>',
                       strip)
    assert len(cells) == 3 * len(ex)  # clean, adversarial and perturbation rows
    assert all(base64.b64decode(b)[:8] == b"\x89PNG\r\n\x1a\n" for b, _, _ in cells)
    esc = {"<script>alert(1)</script>": "&lt;script&gt;alert(1)&lt;/script&gt;", "cat & dog": "cat &amp; dog",
           "$x^2$": "$x^2$", "ok": "ok"}
    clean_labels = [lab for _, _, lab in cells[:len(ex)]]
    adv_labels = [lab for _, _, lab in cells[len(ex):2 * len(ex)]]
    assert clean_labels == [esc[evil_classes[int(p)]] for p in ex.clean_pred]  # predicted class names
    assert adv_labels == [esc[evil_classes[int(p)]] for p in ex.adv_pred]
    assert all(lab.startswith("×") for _, _, lab in cells[2 * len(ex):])
    assert f"weakest class &#39;{esc[evil_classes[ex.weakest]]}&#39;" in strip
    assert "group &lt;g&gt;" in strip or "group h&amp;i" in strip  # grouped data: the group in each alt text


def test_strip_absent_without_examples_file(tmp_path, evil_classes):
    rep, path = _audited(tmp_path, evil_classes[:3])
    examples_path(path).unlink()
    again = AuditReport.load(path)
    assert again.examples is None and again.outcomes is not None
    e = RunEntry(name="r", audit=again, path=path.parent)
    assert example_strip(e) is None
    html = write_report([e], tmp_path / "r.html", n_boot=20).html.read_text()
    assert _strip_html(html) is None and "weakest class '" not in html
    # a bare audit.json without any side file and a report with --no-figures: no strip either
    assert example_strip(entry("x", [(10, 9, 5)] * 3, ["a", "b", "c"])) is None
    html = write_report([RunEntry(name="r", audit=rep, path=path.parent)], tmp_path / "n.html", figures=False,
                        n_boot=20).html.read_text()
    assert _strip_html(html) is None


def test_one_channel_images_and_the_perturbation_row(tmp_path):
    rep, path = _audited(tmp_path, ["a", "b", "c"], channels=1)
    strip = example_strip(RunEntry(name="r", audit=rep))
    assert strip is not None and [label for label, _ in strip.rows] == ["clean", "pgd10, eps 0.1", "perturbation"]
    p, f = amplified_perturbation(np.full((1, 2, 2), 100, np.uint8), np.array([[[100, 110], [90, 100]]], np.uint8))
    assert f == pytest.approx(12.7) and p.tolist() == [[[128, 255], [1, 128]]]
    p, f = amplified_perturbation(np.zeros((3, 2, 2), np.uint8), np.zeros((3, 2, 2), np.uint8))
    assert f == 1 and (p == 128).all()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_strip_renders_in_a_real_browser(tmp_path):
    from robfair.report.browser import Browser

    rep, path = _audited(tmp_path, [f"class-{i}" for i in range(10)])
    page = write_report([RunEntry(name="r", audit=rep, path=path.parent)], tmp_path / "b.html", n_boot=20).html
    with Browser() as b:
        check = b.open(page, width=1400).check()
    strip = [i for i in check["images"] if i["alt"].startswith(("clean image", "adversarial image", "perturbation"))]
    assert len(strip) == 3 * len(rep.examples)
    assert all(i["complete"] and i["w"] >= 64 and i["shownW"] >= 50 for i in strip)
    assert check["scrollWidth"] <= 1400
