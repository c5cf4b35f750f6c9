"""Hostile files, round two (issue 21 parts 3-5): files that contradict each other, model files whose
stored class order must be read, inputs that are no regular files, interrupts and impossible sizes,
look-alike model names, bidirectional-text marks in outputs, and odd DataLoader batches.

Every CLI case asserts the boundary's promise: its exit code, exactly one line on stderr naming the
problem, no traceback, and nothing created or changed in the test's world. A FIFO case never hangs
the suite: a watchdog opens the pipe for writing (which releases a reader) after a few seconds and the
case fails if it had to. Python API cases assert the error type and a one-line message.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from _shared import run_cli

SRC = str(Path(__file__).resolve().parents[2] / "src")
CLASSES = ["cat", "dog", "frog"]
#: every bidirectional mark, embedding, override and isolate, the zero-width characters and a BOM
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200b\u200d\ufeff"
AUDIT = ["audit", "--attack", "fgsm", "--eps", "0.05", "--bootstrap", "0", "--device", "cpu", "--examples", "0"]


class Linear(nn.Module):
    """A 3-class linear model on 1x8x8 images (scriptable, exportable)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(64, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.flatten(1))


def _model(seed: int = 0) -> Linear:
    torch.manual_seed(seed)
    m = Linear().eval()
    with torch.no_grad():
        m.lin.weight.mul_(8)
    return m


def _data(path: Path, classes: list[str], seed: int = 0) -> Path:
    """A train/test npz whose labels are the model's own predictions on 2 of 3 samples."""
    rng = np.random.default_rng(seed)
    x = rng.random((2, 90, 1, 8, 8)).astype(np.float32)
    with torch.no_grad():
        y = [_model()(torch.from_numpy(a)).argmax(1).numpy() for a in x]
    for a in y:
        a[::3] = (a[::3] + 1) % 3
    np.savez(path, x_train=x[0], y_train=y[0], x_test=x[1], y_test=y[1], classes=np.array(classes))
    return path


class World:
    def __init__(self, root: Path) -> None:
        self.root = root

    def __getattr__(self, name: str) -> Path:
        return self.root / name


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Model files in every form with and without stored classes, a named-class dataset, audits."""
    w = World(tmp_path_factory.mktemp("hostile_files"))
    _data(w.root / "data.npz", CLASSES)
    _data(w.root / "bidi.npz", [f"c{BIDI}at", f"d\u202eog{BIDI}", f"=fr\u061cog"])
    net = _model()
    example = torch.rand(4, 1, 8, 8)
    torch.jit.save(torch.jit.trace(net, example), w.root / "plain.ts")  # no classes stored
    for name, extra in (("swapped_json.ts", json.dumps(["dog", "cat", "frog"])),
                        ("right_lines.ts", "cat\ndog\nfrog\n"), ("garbage.ts", json.dumps({"a": "b"}))):
        torch.jit.save(torch.jit.trace(net, example), w.root / name, _extra_files={"classes": extra})
    ep = torch.export.export(net, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
    torch.export.save(ep, w.root / "swapped.pt2", extra_files={"classes": json.dumps(["frog", "dog", "cat"])})
    from safetensors.torch import save_file

    save_file(net.state_dict(), w.root / "swapped.safetensors", metadata={"classes": json.dumps(["cat", "frog", "dog"])})
    (w.root / "linear.py").write_text("from torch import nn\n\n\nclass Linear(nn.Module):\n    def __init__(self):\n"
                                      "        super().__init__()\n        self.lin = nn.Linear(64, 3)\n\n"
                                      "    def forward(self, x):\n        return self.lin(x.flatten(1))\n")
    for folder, seed in (("a", 0), ("b", 3)):  # two different models with the same file name
        (w.root / folder).mkdir()
        torch.jit.save(torch.jit.trace(_model(seed), example), w.root / folder / "model.ts",
                       _extra_files={"classes": json.dumps(CLASSES)})
    from robfair.cli import main

    data = f"npz:{w.root / 'data.npz'}"
    for run, extra in (("one", []), ("two", []), ("subset", ["--data", f"{data},limit=45"]),
                       ("train_split", ["--split", "train"])):
        with pytest.raises(SystemExit) as exc:
            main([str(a) for a in [*AUDIT, "--model", w.root / "right_lines.ts", "--data", data, *extra,
                                   "--out", w.root / run / "audit.json"]])
        assert exc.value.code == 0
    return w


def snapshot(root: Path) -> dict[str, tuple]:
    return {str(p.relative_to(root)): ("dir",) if p.is_dir() else (p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def one_line(code, out, err, expected, needle) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected, f"exit {code} (wanted {expected})\nstdout: {out[-1500:]}\nstderr: {err[-1500:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {lines[:4]}"
    assert "Traceback" not in out + err
    assert needle.lower() in lines[0].lower(), f"{lines[0]!r} does not mention {needle!r}"
    return lines[0]


def refused(argv, capsys, root: Path, needle: str) -> str:
    """Run the CLI in-process: exit 2, one line naming ``needle``, nothing written below ``root``."""
    before = snapshot(root)
    code, out, err = run_cli(argv, capsys)
    line = one_line(code, out, err, 2, needle)
    assert snapshot(root) == before, "the refusal wrote or changed a file"
    return line


@contextlib.contextmanager
def fifo_watchdog(*fifos: Path, seconds: float = 15.0):
    """Fails the case if a reader blocked on one of ``fifos``: after ``seconds`` the pipes are opened
    for writing (which releases a blocked reader) and ``fired`` is set."""
    fired: list[bool] = []
    stop = threading.Event()

    def watch() -> None:
        if stop.wait(seconds):
            return
        fired.append(True)
        while not stop.is_set():
            for f in fifos:
                with contextlib.suppress(OSError):
                    os.close(os.open(f, os.O_WRONLY | os.O_NONBLOCK))  # succeeds only with a reader waiting
            stop.wait(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        yield fired
    finally:
        stop.set()
        t.join()
    assert not fired, f"a command blocked on the FIFO {fifos} (released by the watchdog)"


def _copy_run(w: World, name: str, to: Path) -> Path:
    shutil.copytree(w.root / name, to)
    return to


# ============================================================================ files agree (part 3)
def test_compare_refuses_an_edited_outcomes_file(world, tmp_path, capsys):
    run = _copy_run(world, "two", tmp_path / "two")
    z = dict(np.load(run / "outcomes.npz"))
    z["clean_pred"] = z["y"].copy()  # every sample right: the edit a hand-made "better" run would be
    np.savez_compressed(run / "outcomes.npz", **z)
    line = refused(["compare", world.one, run, "--bootstrap", "0", "--out", tmp_path / "c.md"], capsys, tmp_path,
                   "was changed after robfair wrote it")
    assert str(run / "outcomes.npz") in line


def test_compare_refuses_outcomes_that_contradict_audit_json(world, tmp_path, capsys):
    """The issue's case: outcomes rewritten through robfair (its seal is fresh) with every sample right;
    compare printed p=5e-113, beyond: yes for a +0.0 difference."""
    from robfair.auditing import Outcomes

    run = _copy_run(world, "two", tmp_path / "two")
    o = Outcomes.load(run / "outcomes.npz")
    o.clean_pred = o.y.copy()
    o.adv_pred = {k: np.tile(o.y, (v.shape[0], 1)) for k, v in o.adv_pred.items()}
    o.save(run / "outcomes.npz")
    line = refused(["compare", world.one, run, "--bootstrap", "0"], capsys, tmp_path, "contradicts")
    assert str(run / "audit.json") in line and str(run / "outcomes.npz") in line and "robust" in line


def test_compare_refuses_outcomes_of_another_audit(world, tmp_path, capsys):
    run = _copy_run(world, "two", tmp_path / "two")
    shutil.copy(world.subset / "outcomes.npz", run / "outcomes.npz")
    line = refused(["compare", world.one, run, "--bootstrap", "0"], capsys, tmp_path, "written by another audit")
    assert "audit id" in line


def test_outcomes_of_other_samples_under_the_same_id_are_refused(world, tmp_path, capsys):
    from robfair.auditing import Outcomes

    run = _copy_run(world, "two", tmp_path / "two")
    o = Outcomes.load(world.subset / "outcomes.npz")
    o.meta["audit_id"] = json.loads((run / "audit.json").read_text())["meta"]["audit_id"]
    o.save(run / "outcomes.npz")
    refused(["compare", world.one, run, "--bootstrap", "0"], capsys, tmp_path, "holds other samples")


def test_compare_refuses_runs_audited_on_another_split(world, tmp_path, capsys):
    line = refused(["compare", world.one, world.train_split, "--bootstrap", "0", "--out", tmp_path / "c.json"],
                   capsys, tmp_path, "audited on different data")
    assert "test" in line and "train" in line


def test_compare_says_when_runs_saw_other_samples_and_tests_them_unpaired(world, tmp_path, capsys):
    code, out, err = run_cli(["compare", world.one, world.subset, "--bootstrap", "0", "--out", tmp_path / "c.json"],
                             capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert "note: 'one' and 'subset' were audited on different data" in text and "no paired test" in text
    saved = json.loads((tmp_path / "c.json").read_text())
    assert {r["test"] for r in saved["per_class"]} == {"z-test"} and "different data" in saved["notes"][0]
    # the same samples: paired, no note
    code, out, err = run_cli(["compare", world.one, world.two, "--bootstrap", "0"], capsys)
    assert code == 0 and "note:" not in out and "mcnemar" in out.lower()


def test_older_files_without_fingerprints_keep_working(world, tmp_path, capsys):
    """An audit.json written before fingerprints (no audit_id / fingerprint; outcomes without id or
    seal) loads and pairs as before; without its outcomes compare says it has no fingerprint."""
    from robfair.auditing import Outcomes

    runs = []
    for name in ("one", "two"):
        run = _copy_run(world, name, tmp_path / name)
        d = json.loads((run / "audit.json").read_text())
        for k in ("audit_id", "fingerprint", "class_order"):
            d["meta"].pop(k)
        d.pop("files", None)  # older files had no digests of their sidecars either
        (run / "audit.json").write_text(json.dumps(d))
        o = Outcomes.load(run / "outcomes.npz")
        o.meta = {k: v for k, v in o.meta.items() if k not in ("audit_id", "fingerprint")}
        header_free = dict(np.load(run / "outcomes.npz"))
        h = json.loads(bytes(header_free["header"]).decode())
        h.pop("sha256")
        h["meta"] = o.meta
        header_free["header"] = np.frombuffer(json.dumps(h).encode(), np.uint8)
        np.savez_compressed(run / "outcomes.npz", **header_free)
        runs.append(run)
    code, out, err = run_cli(["compare", *runs, "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert "mcnemar" in out.lower()
    (runs[1] / "outcomes.npz").unlink()
    code, out, err = run_cli(["compare", *runs, "--bootstrap", "0"], capsys)
    assert code == 0, err
    assert "no fingerprint: older file ('two')" in " ".join(out.split())


def test_compare_on_a_fifo_named_outcomes_returns_at_once(world, tmp_path, capsys):
    run = _copy_run(world, "two", tmp_path / "two")
    (run / "outcomes.npz").unlink()
    os.mkfifo(run / "outcomes.npz")
    with fifo_watchdog(run / "outcomes.npz"):
        line = refused(["compare", world.one, run, "--bootstrap", "0"], capsys, tmp_path, "named pipe (FIFO)")
    assert "not a regular file" in line


@pytest.mark.parametrize("what", ["audit.json", "metrics.jsonl"])
def test_a_fifo_in_a_run_folder_is_refused_not_read(world, tmp_path, capsys, what):
    run = _copy_run(world, "two", tmp_path / "two")
    (run / "config.yaml").write_text("data: digits\n")  # a finished run folder: report draws its metrics.jsonl
    (run / "checkpoints").mkdir()
    shutil.copy(world.root / "right_lines.ts", run / "checkpoints" / "best.pt")
    (run / what).unlink(missing_ok=True)
    os.mkfifo(run / what)
    argv = ["compare", world.one, run, "--bootstrap", "0"] if what == "audit.json" else \
        ["report", run, "--out", tmp_path / "r.html"]
    with fifo_watchdog(run / what):
        refused(argv, capsys, tmp_path, "named pipe")


@pytest.mark.parametrize("case", ["data", "config", "model", "certify-checkpoint", "arch", "arch-kwargs", "class-map"])
def test_fifo_inputs_are_refused_at_once(world, tmp_path, capsys, case):
    fifo = tmp_path / {"data": "x.npz", "config": "c.yaml", "model": "m.pt", "certify-checkpoint": ".certify.partial.npz",
                       "arch": "net.py", "arch-kwargs": "kw.json", "class-map": "map.yaml"}[case]
    os.mkfifo(fifo)
    weights = [*AUDIT, "--model", world.root / "swapped.safetensors", "--data", f"npz:{world.root / 'data.npz'}"]
    argv = {"arch": [*weights, "--arch", f"{fifo}:Linear"],
            "arch-kwargs": [*weights, "--arch", f"{world.root / 'linear.py'}:Linear", "--arch-kwargs", fifo],
            "class-map": [*AUDIT, "--model", world.root / "right_lines.ts", "--data", f"npz:{world.root / 'data.npz'}",
                          "--class-map", fifo],
            "data": [*AUDIT, "--model", world.root / "right_lines.ts", "--data", f"npz:{fifo}"],
            "config": ["train", "--config", fifo, "--out", tmp_path / "run"],
            "model": [*AUDIT, "--model", fifo, "--data", f"npz:{world.root / 'data.npz'}"],
            "certify-checkpoint": ["certify", "--model", world.root / "right_lines.ts", "--data",
                                   f"npz:{world.root / 'data.npz'}", "--n", "100", "--n0", "10", "--per-class", "1",
                                   "--bootstrap", "0", "--out", tmp_path / "certify.json"]}[case]
    with fifo_watchdog(fifo):
        refused(argv, capsys, tmp_path, "regular file")


# ============================================================================ model sources (part 4)
@pytest.mark.parametrize("name", ["swapped_json.ts", "swapped.pt2", "swapped.safetensors"])
def test_a_stored_class_order_is_read_from_every_source(world, tmp_path, capsys, name):
    """TorchScript's extra file comes back as bytes (it was never read), a .pt2's extra file and
    safetensors metadata as str: each order is checked against the dataset's."""
    arch = ["--arch", f"{world.root / 'linear.py'}:Linear"] if name.endswith(".safetensors") else []
    line = refused([*AUDIT, "--model", world.root / name, *arch, "--data", f"npz:{world.root / 'data.npz'}",
                    "--out", tmp_path / "a.json"], capsys, tmp_path, "same names, other order")
    assert "--class-map" in line


def test_a_stored_order_with_a_class_map_is_mapped(world, tmp_path, capsys):
    """--class-map model re-indexes the labels to the TorchScript file's order: the per-class numbers
    equal those of the same model stated in the dataset's order."""
    data = f"npz:{world.root / 'data.npz'}"
    code, _, err = run_cli([*AUDIT, "--model", world.root / "swapped_json.ts", "--data", data, "--class-map", "model",
                            "--out", tmp_path / "mapped.json"], capsys)
    assert code == 0, err
    mapped = json.loads((tmp_path / "mapped.json").read_text())
    assert mapped["meta"]["class_order"] == {"status": "stated"} and mapped["meta"]["classes"] == ["dog", "cat", "frog"]
    right = json.loads((world.one / "audit.json").read_text())
    assert right["meta"]["class_order"] == {"status": "checked"}
    # the file says output 0 is 'dog' (the net's output 0 is the data's 'cat'): the counts move with the names
    n = lambda d, c: sum(d["reports"]["fgsm"]["counts"]["n"][d["meta"]["groups"].index(c)])  # noqa: E731
    assert [n(mapped, c) for c in CLASSES] == [n(right, c) for c in CLASSES]  # the same samples per class name
    acc = {k: json.loads((p / "audit.json" if p.is_dir() else p).read_text())["reports"]["fgsm"]
           for k, p in (("mapped", tmp_path / "mapped.json"), ("right", world.one))}
    assert acc["mapped"] != acc["right"]  # read in the file's order, the same outputs mean other classes


def test_text_extra_file_in_the_right_order_is_checked(world):
    from robfair.models import load_any, model_classes

    net, meta = load_any(world.root / "right_lines.ts")
    assert meta["classes"] == CLASSES and model_classes(net) == CLASSES


def test_a_stored_entry_that_is_no_list_of_names_is_refused(world, tmp_path, capsys):
    refused([*AUDIT, "--model", world.root / "garbage.ts", "--data", f"npz:{world.root / 'data.npz'}"], capsys,
            tmp_path, "not a list of class names")


def test_a_source_without_classes_says_so_once(world, tmp_path, capsys):
    code, out, err = run_cli([*AUDIT, "--model", world.root / "plain.ts", "--data", f"npz:{world.root / 'data.npz'}",
                              "--out", tmp_path / "a.json"], capsys)
    assert code == 0, err
    text = " ".join(out.split())
    assert text.count("stores no class names") == 1 and "its class order was not checked" in text
    order = json.loads((tmp_path / "a.json").read_text())["meta"]["class_order"]
    assert order["status"] == "unchecked" and "stores no class names" in order["note"]


# ============================================================================ interrupts and limits (part 5)
@pytest.mark.parametrize("option", ["--n", "--n0"])
def test_certify_refuses_impossible_draw_counts_up_front(world, tmp_path, capsys, option):
    t0 = time.perf_counter()
    line = refused(["certify", "--model", world.root / "right_lines.ts", "--data", f"npz:{world.root / 'data.npz'}",
                    option, str(10**12), "--out", tmp_path / "c.json"], capsys, tmp_path, "beyond what certify can run")
    assert "batch-size" not in line and f"{option} 10" in line and "1000000000" in line
    assert time.perf_counter() - t0 < 30


def test_certify_limit_in_python():
    from robfair import certifying as certify
    from robfair.errors import ConfigError

    with pytest.raises(ConfigError, match="n=1000000000000 is beyond") as e:
        certify.check_draws(100, 10**12, 1000)
    assert "\n" not in str(e.value)


def test_interrupt_names_a_checkpoint_only_when_it_exists(tmp_path):
    from robfair.cli import _resume_hint

    ck = tmp_path / ".certify.partial.npz"
    argv = ["certify", "-m", "x.ts", "--out", "c.json"]
    none = _resume_hint(argv, ck)
    assert "no checkpoint was written" in none and "kept" not in none and none.endswith("robfair certify -m x.ts --out c.json")
    ck.write_bytes(b"x")
    assert f"kept in the checkpoint {ck}" in _resume_hint(argv, ck)
    last = tmp_path / "last.pt"
    assert "no checkpoint yet" in _resume_hint(["train", "--out", "r"], last)
    last.write_bytes(b"x")
    assert str(last) in _resume_hint(["train", "--out", "r"], last)


def test_ctrl_c_on_certify_before_any_checkpoint_claims_none(world, tmp_path):
    """SIGINT while the first samples are still being certified (10^9 draws each): no checkpoint
    exists, and the one line says so instead of claiming one."""
    out = tmp_path / "cert" / "certify.json"
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1")
    env.pop("ROBFAIR_PROGRESS", None)
    argv = ["certify", "--model", str(world.root / "right_lines.ts"), "--data", f"npz:{world.root / 'data.npz'}",
            "--n", str(10**9), "--per-class", "1", "--bootstrap", "0", "--device", "cpu", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, "-c", "from robfair.cli import main; main()", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(12)  # start-up and loading; the first block alone takes many minutes
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    o, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[")]
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert "no checkpoint was written" in lines[0] and "kept" not in lines[0]
    assert not (out.parent / ".certify.partial.npz").exists() and not out.exists()


# ============================================================================ leaderboard names (part 5)
def test_leaderboard_tells_two_models_with_one_file_name_apart(world, tmp_path, capsys):
    out = tmp_path / "lb.html"
    code, stdout, err = run_cli(["leaderboard", world.root / "a" / "model.ts", world.root / "b" / "model.ts",
                                 "--data", f"npz:{world.root / 'data.npz'}", "--eps", "0.05", "--attack", "fgsm",
                                 "--bootstrap", "0", "--device", "cpu", "--out", out, "--no-figures"], capsys)
    assert code == 0, err
    import csv

    rows = list(csv.DictReader(open(tmp_path / "lb_tables" / "leaderboard.csv")))
    assert sorted(r["model"] for r in rows) == ["a/model.ts", "b/model.ts"]
    summary = list(csv.DictReader(open(tmp_path / "lb_tables" / "summary.csv")))
    assert len(summary) == 2 and all(int(r["seeds"]) == 1 for r in summary)  # never "2/2 seeds" of one model
    assert "2/2 seeds" not in (tmp_path / "lb.md").read_text()


def test_leaderboard_names_are_never_alike():
    from robfair.cli.leaderboard import _names

    assert _names(["x/a/net.ts", "y/a/net.ts", "z/b/net.ts"]) == ["x/a/net.ts", "y/a/net.ts", "z/b/net.ts"]
    assert _names(["a/net.ts", "a/net.ts"]) == ["net.ts", "net.ts (2)"]
    names = _names(["a/net.ts", "b/net.ts", "net.ts (2)", "robustbench:Standard"])
    assert len(set(names)) == 4


# ============================================================================ bidi marks (part 5)
def test_bidi_marks_never_reach_markdown_csv_or_html(world, tmp_path, capsys):
    data = f"npz:{world.root / 'bidi.npz'}"
    for run in ("r1", "r2"):
        code, _, err = run_cli([*AUDIT, "--model", world.root / "plain.ts", "--data", data,
                                "--out", tmp_path / run / "audit.json"], capsys)
        assert code == 0, err
    code, _, err = run_cli(["report", tmp_path / "r1" / "audit.json", tmp_path / "r2" / "audit.json", "--out",
                            tmp_path / "page.html", "--no-figures"], capsys)
    assert code == 0, err
    for suffix in (".md", ".csv"):
        code, _, err = run_cli(["compare", tmp_path / "r1", tmp_path / "r2", "--bootstrap", "0",
                                "--out", tmp_path / f"cmp{suffix}"], capsys)
        assert code == 0, err
    outputs = [tmp_path / "page.html", tmp_path / "page.md", tmp_path / "cmp.md", tmp_path / "cmp.csv",
               *sorted((tmp_path / "page_tables").glob("*.csv"))]
    for p in outputs:
        text = p.read_text(encoding="utf-8")
        left = sorted({f"U+{ord(c):04X}" for c in text if c in BIDI})
        assert not left, f"{p.name} keeps {left}"
    assert "cat" in (tmp_path / "cmp.md").read_text() and "'=frog" in (tmp_path / "cmp.csv").read_text()


def test_plain_drops_every_format_and_control_character():
    import unicodedata

    from robfair.inert import plain, visible

    marks = "".join(chr(i) for i in range(0x110000) if unicodedata.category(chr(i)) == "Cf")
    assert len(marks) > 150 and plain(f"a{marks}b") == "ab"  # every format character: bidi, zero-width, tags ...
    assert plain("a\x00\x07\x08b\tc") == "ab c"  # C0 controls gone, a tab is a space
    assert plain("no\u00a0break") == "no break"
    assert visible(f"line\u202e one\nline two\u061c") == "line one\nline two"


# ============================================================================ Python API batches (part 5)
class _Items(torch.utils.data.Dataset):
    def __init__(self, item) -> None:
        self.item = item

    def __len__(self) -> int:
        return 12

    def __getitem__(self, i):
        return self.item(i)


def _x(i: int) -> torch.Tensor:
    return torch.rand(1, 8, 8, generator=torch.Generator().manual_seed(i))


def test_dict_batches_with_extra_fields_are_audited_like_tuples():
    import robfair

    m = _model()
    kw = dict(attacks=["fgsm"], eps=0.05, probe=0, examples=0, device="cpu")
    as_tuple = robfair.audit(m, torch.utils.data.DataLoader(_Items(lambda i: (_x(i), i % 3)), batch_size=5), **kw)
    as_dict = robfair.audit(m, torch.utils.data.DataLoader(
        _Items(lambda i: {"image": _x(i), "label": i % 3, "path": f"img{i}.png", "idx": i}), batch_size=5), **kw)
    assert as_dict.main == as_tuple.main and as_dict.meta["n"] == 12


@pytest.mark.parametrize("item, needle", [
    (lambda i: {"pic": _x(i), "label": i % 3}, "without an image key"),
    (lambda i: {"image": _x(i), "name": f"x{i}"}, "without a label key"),
    (lambda i: (_x(i), i % 3, i % 2, i), "is a 4-item list"),
    (lambda i: (_x(i), f"class {i}"), "labels are a tuple that is not numeric"),
    (lambda i: (torch.rand(1, 8, 8 + i % 2), i % 3), "the DataLoader failed on batch 0"),
])
def test_odd_batches_are_one_line_data_errors(item, needle):
    import robfair
    from robfair.errors import DataError

    with pytest.raises(DataError) as e:
        robfair.audit(_model(), torch.utils.data.DataLoader(_Items(item), batch_size=4), attacks=["fgsm"], eps=0.05,
                      probe=0, examples=0, device="cpu")
    msg = str(e.value)
    assert needle in msg and "\n" not in msg and ("expected" in msg or "fix" in msg)
