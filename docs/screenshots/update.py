"""Re-make the report screenshots in this folder: what a person sees when opening a robfair report.

    python docs/screenshots/update.py                      # trains everything it needs (about 5 min of CPU time)
    python docs/screenshots/update.py --demo runs/demo     # reuse a finished `robfair demo` folder

1. the demo report: `robfair demo` (unless --demo is given), then `robfair report` on its folder;
2. a 100-class report: a seeded synthetic 100-class dataset (8x8 images, one Gaussian prototype per
   class, class-dependent noise, so classes differ in difficulty), a standard and a PGD-AT MLP trained
   with `robfair train`, the PGD-AT run re-audited with an eps sweep, then `robfair report`;
3. a report with a flagged class: the demo's PGD-AT model audited with FGSM alone, the reliability
   probe at 30 times FGSM's compute (AutoAttack finds what FGSM missed), then `robfair report`;
4. each page opened in headless Chromium at 1400 px (robfair.report.browser): every image must be
   decoded and no table may overflow, then `<name>.png` (the first screen, 1400 x 1800) and
   `<name>-full.png` (the whole page at half scale) are written here; for the flagged report,
   `report-probe-flagged.png` is the page's reliability-probe verdict and lead figure above the
   run's probe table (two clips of the same page at full scale, stacked).

Every number on the pages is measured by these runs; nothing is drawn from fixtures.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def robfair(*args: str) -> None:
    cmd = [sys.executable, "-c", "from robfair.cli import main; main()", *map(str, args)]
    print("+ robfair", " ".join(map(str, args)), flush=True)
    subprocess.run(cmd, check=True)


def hundred_classes(path: Path, seed: int = 0) -> Path:
    """x_train/y_train/x_test/y_test/classes: 100 classes, 40 train and 30 test images each."""
    rng = np.random.default_rng(seed)
    k, d = 100, 64
    protos = rng.uniform(0.2, 0.8, size=(k, d))
    noise = np.linspace(0.05, 0.35, k)[rng.permutation(k)]  # class difficulty

    def draw(n: int):
        y = np.repeat(np.arange(k), n)
        x = protos[y] + rng.normal(size=(len(y), d)) * noise[y, None]
        return np.clip(x, 0, 1).astype(np.float32).reshape(-1, 1, 8, 8), y

    xtr, ytr = draw(40)
    xte, yte = draw(30)
    np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte,
             classes=np.array([f"class-{i:02d}" for i in range(k)], dtype=str))
    return path


def checked(page, html: Path) -> dict:
    """The page's check (robfair.report.browser): every image decoded, no table wider than its box."""
    check = page.check()
    broken = [i["alt"] for i in check["images"] if not i["complete"] or i["w"] == 0]
    wide = [t["title"] for t in check["tables"] if t["width"] > t["containerWidth"] + 0.5]
    if broken or wide or check["scrollWidth"] > 1400:
        raise SystemExit(f"{html}: broken images {broken}, overflowing tables {wide}, page width {check['scrollWidth']}")
    return check


def shoot(html: Path, name: str) -> None:
    from robfair.report.browser import Browser

    with Browser() as b:
        page = b.open(html, width=1400, height=1800)
        check = checked(page, html)
        page.screenshot(HERE / f"{name}.png", full_page=False)
        size = page.call("Page.getLayoutMetrics")["cssContentSize"]
        data = page.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 0.5}})["data"]
        (HERE / f"{name}-full.png").write_bytes(base64.b64decode(data))
        print(f"wrote {HERE / name}.png and {name}-full.png ({len(check['images'])} figures, "
              f"{len(check['tables'])} tables, page {size['height']:.0f} px)")


def shoot_probe(html: Path, name: str) -> None:
    """``<name>.png``: the top of the page down to the lead figure, then the first run's probe
    verdict and per-group probe table, at full scale, one above the other."""
    from PIL import Image

    from robfair.report.browser import Browser

    rect = ("(() => {{ const a = document.querySelector({0}), b = document.querySelector({1}); "
            "const r = a.getBoundingClientRect(), s = b.getBoundingClientRect(); "
            "return JSON.stringify({{y: r.top + window.scrollY - 12, h: s.bottom - r.top + 24}}); }})()")
    parts = (('"header"', '"#figures figure"'),  # the title, the probe's verdict, the lead figure
             ('"details .probe"', '"details section"'))  # the run's verdict and its probe table
    with Browser() as b:
        page = b.open(html, width=1400, height=1800)
        checked(page, html)
        shots = []
        for first, last in parts:
            box = json.loads(page.evaluate(rect.format(first, last)))
            data = page.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
                "x": 0, "y": max(0, box["y"]), "width": 1400, "height": box["h"], "scale": 1}})["data"]
            shots.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
    out = Image.new("RGB", (1400, sum(s.height for s in shots) + 16 * (len(shots) - 1)), "#d8dce3")
    y = 0
    for s in shots:
        out.paste(s, (0, y))
        y += s.height + 16
    out.save(HERE / f"{name}.png", optimize=True)
    print(f"wrote {HERE / name}.png ({out.width} x {out.height})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", type=Path, help="a finished `robfair demo` folder (default: run the demo)")
    ap.add_argument("--work", type=Path, help="working folder (default: a temporary one)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="robfair-shots-"))
    work.mkdir(parents=True, exist_ok=True)
    demo = args.demo
    if demo is None:
        demo = work / "demo"
        robfair("demo", "--out", demo)
    robfair("report", demo, "--out", work / "demo-report.html", "--title", "robfair demo: standard vs PGD-AT on digits",
            "--overwrite")
    shoot(work / "demo-report.html", "demo-report")

    data = hundred_classes(work / "c100.npz")
    runs = work / "c100"
    for method in ("standard", "pgd-at"):
        out = runs / method
        if not (out / "audit.json").exists():
            robfair("train", "--data", f"npz:{data}", "--model", "mlp", "--method", method, "--eps", "0.05",
                    "--epochs", "25", "--batch-size", "128", "--lr", "0.05", "--audit-attack", "pgd10", "--out", out)
    robfair("audit", "--model", runs / "pgd-at" / "checkpoints" / "best.pt", "--data", f"npz:{data}", "--attack", "pgd10",
            "--eps", "0.05", "--eps-sweep", "0:0.1:6", "--bootstrap", "200", "--out", runs / "pgd-at" / "audit.json",
            "--overwrite")
    robfair("report", runs, "--out", work / "c100-report.html", "--title",
            "100 classes (synthetic, seeded): standard vs PGD-AT MLP", "--bootstrap", "200", "--overwrite")
    shoot(work / "c100-report.html", "report-100-classes")

    flagged = work / "pgd-at-audited-with-fgsm"
    robfair("audit", "--model", demo / "at" / "checkpoints" / "best.pt", "--data", "digits", "--attack", "fgsm",
            "--eps", "0.1", "--probe", "30", "--bootstrap", "200", "--out", flagged / "audit.json", "--overwrite")
    robfair("report", flagged / "audit.json", "--out", work / "probe-report.html", "--title",
            "The demo's PGD-AT model audited with FGSM alone: the reliability probe flags what FGSM overstates",
            "--bootstrap", "200", "--overwrite")
    shoot_probe(work / "probe-report.html", "report-probe-flagged")


if __name__ == "__main__":
    main()
