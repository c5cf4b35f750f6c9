"""A corpus of hostile inputs and faults, across every subcommand (issue 11).

Every case asserts the promise of the error boundary: the expected exit code, exactly one line on
stderr naming the problem, no traceback, and no file created or changed anywhere in the test's
world (results are never overwritten, nothing half-written is left). Kill and interrupt tests for
``train`` and ``sweep`` run the CLI in a subprocess and send SIGINT / SIGKILL.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from _shared import run_cli, wait_for as _wait_for

SRC = str(Path(__file__).resolve().parents[2] / "src")
TINY_MODEL = ["--model", "mlp", "--set", "model_kwargs={hidden: [8]}"]
TRAIN = ["train", *TINY_MODEL, "--epochs", "1", "--device", "cpu", "--audit-attack", "none"]
AUDIT = ["audit", "--bootstrap", "0", "--attack", "fgsm", "--eps", "0.1", "--device", "cpu"]


def _tiny_study(out: Path) -> dict:
    return {"name": "tiny", "out": str(out),
            "base": {"data": "digits", "model": "mlp", "model_kwargs": {"hidden": [8]}, "epochs": 1,
                     "batch_size": 256, "eps": 0.1, "val_per_class": 5, "val_attack": "fgsm", "device": "cpu"},
            "grid": {"method": ["standard"]}, "seeds": [0],
            "audit": {"attacks": ["fgsm"], "eps": "${eps}", "bootstrap": 10}}


#: attribute / placeholder name -> file name of the corpus' fixtures
FILES = {k: k.rsplit("_", 1)[0] + "." + k.rsplit("_", 1)[1] for k in (
    "other_pt", "random_pt", "existing_json", "existing_md", "existing_html", "existing_png", "dir_json", "fifo_json",
    "bomb_yaml", "cyclic_yaml", "deep_yaml", "binary_yaml", "pyobj_yaml", "study_yaml", "badkw_yaml", "robsel_yaml",
    "empty_npz")}
FILES.update({k: k for k in ("run", "torn", "deep", "afile", "study_dir")})


class World:
    """Paths of the corpus' fixtures, all below one folder whose every file is watched."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __getattr__(self, name: str) -> Path:
        return self.root / FILES.get(name, name)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    w = World(root)
    from robfair.cli import main

    with pytest.raises(SystemExit) as exc:  # one tiny finished run (1 epoch of an 8-unit MLP on digits)
        main(["train", *TINY_MODEL, "--epochs", "1", "--device", "cpu", "--method", "standard",
              "--set", "val_per_class=10", "--set", "val_attack=fgsm", "--eps", "0.1", "--audit-attack", "fgsm",
              "--out", str(w.run)])
    assert exc.value.code == 0
    shutil.copy(w.run / "checkpoints" / "best.pt", w.other_pt)
    shutil.copytree(w.run, w.torn)
    text = (w.torn / "audit.json").read_text()
    (w.torn / "audit.json").write_text(text[: len(text) // 2])
    (w.deep).mkdir()
    (w.deep / "audit.json").write_text("[" * 200_000)
    (w.afile).write_text("a file, not a folder\n")
    (w.existing_json).write_text('{"keep": true}\n')
    (w.existing_md).write_text("keep\n")
    (w.existing_html).write_text("<p>keep</p>\n")
    (w.existing_png).write_bytes(b"\x89PNG keep")
    (w.dir_json).mkdir()
    os.mkfifo(w.fifo_json)
    bomb = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for prev, cur in zip("abcdef", "bcdefg"):
        bomb.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 10) + "]")
    (w.bomb_yaml).write_text("\n".join(bomb) + "\n")  # ~400 bytes, 10**7 values expanded
    (w.cyclic_yaml).write_text("a: &a [*a]\n")
    (w.deep_yaml).write_text("[" * 20_000 + "]" * 20_000 + "\n")
    (w.binary_yaml).write_bytes(b"\xff\xfe\x00\x81" * 64)
    (w.pyobj_yaml).write_text('epochs: !!python/object/apply:os.system ["echo pwned"]\n')
    (w.study_yaml).write_text(yaml.safe_dump(_tiny_study(w.study_out)))
    badkw = _tiny_study(w.study_out)
    badkw["base"]["model_kwargs"] = {"hiden": [8]}
    (w.badkw_yaml).write_text(yaml.safe_dump(badkw))
    robsel = _tiny_study(w.study_out)  # an adversarial base whose standard baseline inherits select: avg+worst
    robsel["base"]["select"] = "avg+worst"
    robsel["grid"] = {"method": ["pgd-at", "standard"]}
    (w.robsel_yaml).write_text(yaml.safe_dump(robsel))
    (w.study_dir).mkdir()
    (w.study_dir / "study.yaml").write_text("name: other\n")
    rng = np.random.default_rng(0)
    np.savez(w.empty_npz, x=np.zeros((0, 1, 8, 8), np.float32), y=np.zeros(0, np.int64))
    (w.random_pt).write_bytes(rng.bytes(4096))
    return w


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path below ``root`` with its size and modification time (files) or kind."""
    out = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = ("dir",) if p.is_dir() else (st.st_size, st.st_mtime_ns)
    return out


def assert_one_line(code, out, err, expected_code, needle):
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == expected_code, f"exit {code} (wanted {expected_code})\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {lines[:5]}"
    assert "Traceback" not in out + err
    assert "pwned" not in out + err
    assert needle.lower() in lines[0].lower(), f"{lines[0]!r} does not mention {needle!r}"
    return lines[0]


# (id, argv with {name} placeholders for World paths, needle of the one line)
CASES = [
    # ---- audit: results never replaced, outputs checked first
    ("audit-train-split-into-run", AUDIT + ["-m", "{run}/checkpoints/best.pt", "--split", "train", "--out", "{run}"],
     "never replaces"),
    ("audit-other-model-into-run", AUDIT + ["-m", "{other_pt}", "--out", "{run}", "--overwrite"], "another checkpoint"),
    ("audit-other-data-into-run", AUDIT + ["-m", "{run}/checkpoints/best.pt", "--data", "npz:{empty_npz}", "--out",
                                           "{run}", "--overwrite"], "other data"),
    ("audit-own-run-no-overwrite", AUDIT + ["-m", "{run}/checkpoints/best.pt", "--out", "{run}/audit.json"], "--overwrite"),
    ("audit-into-run-metrics", AUDIT + ["-m", "{other_pt}", "--out", "{run}/metrics.jsonl"], "is a file"),
    ("audit-into-checkpoints", AUDIT + ["-m", "{other_pt}", "--out", "{run}/checkpoints/x.json"], "checkpoints"),
    ("audit-model-dev-zero", AUDIT + ["-m", "/dev/zero"], "not a regular file"),
    ("audit-model-folder", AUDIT + ["-m", "{run}"], "directory"),
    ("audit-model-random-bytes", AUDIT + ["-m", "{random_pt}"], "checkpoint"),
    ("audit-out-below-file", AUDIT + ["-m", "{other_pt}", "--out", "{afile}/x.json"], "is a file"),
    ("audit-out-exists", AUDIT + ["-m", "{other_pt}", "--out", "{existing_json}"], "already exists"),
    ("audit-out-is-folder", AUDIT + ["-m", "{other_pt}", "--out", "{dir_json}"], "is a folder"),
    ("audit-out-fifo", AUDIT + ["-m", "{other_pt}", "--out", "{fifo_json}"], "not a regular file"),
    ("audit-plot-suffix", AUDIT + ["-m", "{other_pt}", "--plot", "{root}/bars.txt"], ".png"),
    ("audit-plot-exists", AUDIT + ["-m", "{other_pt}", "--plot", "{existing_png}"], "already exists"),
    ("audit-eps-2", ["audit", "-m", "{other_pt}", "--attack", "fgsm", "--eps", "2"], "above 1"),
    ("audit-eps-400-digits", ["audit", "-m", "{other_pt}", "--eps", "1" * 400], "characters"),
    ("audit-eps-nested", ["audit", "-m", "{other_pt}", "--eps", "(" * 40 + "0.1" + ")" * 40], "characters"),
    ("audit-eps-overflow", ["audit", "-m", "{other_pt}", "--eps", "1e400"], "finite"),
    ("audit-eps-sweep-large", AUDIT + ["-m", "{other_pt}", "--eps-sweep", "0:2:3"], "above 1"),
    ("audit-device-mps", AUDIT[:-2] + ["-m", "{other_pt}", "--device", "mps"], "mps"),
    ("audit-device-cuda-7", AUDIT[:-2] + ["-m", "{other_pt}", "--device", "cuda:7"], "cuda"),
    ("audit-device-bogus", AUDIT[:-2] + ["-m", "{other_pt}", "--device", "tpu"], "device"),
    ("audit-seed-negative", AUDIT + ["-m", "{other_pt}", "--seed", "-1"], "seed"),
    ("audit-seed-huge", AUDIT + ["-m", "{other_pt}", "--seed", str(2**64)], "seed"),
    ("audit-bootstrap-1e8", AUDIT[:1] + ["-m", "{other_pt}", "--bootstrap", "100000000"], "bootstrap"),
    ("audit-empty-npz", AUDIT + ["-m", "{other_pt}", "--data", "npz:{empty_npz}"], "no samples"),
    ("audit-npz-dev-zero", AUDIT + ["-m", "{other_pt}", "--data", "npz:/dev/zero"], "npz"),
    # ---- train: validated before a run folder exists
    ("train-lr-inf", TRAIN + ["--set", "lr=.inf", "--out", "{root}/new_run"], "lr"),
    ("train-lr-nan", TRAIN + ["--set", "lr=.nan", "--out", "{root}/new_run"], "lr"),
    ("train-yaml-bomb", TRAIN + ["-c", "{bomb_yaml}", "--out", "{root}/new_run"], "aliases"),
    ("train-yaml-cyclic", TRAIN + ["-c", "{cyclic_yaml}", "--out", "{root}/new_run"], "itself"),
    ("train-yaml-deep", TRAIN + ["-c", "{deep_yaml}", "--out", "{root}/new_run"], "deeply"),
    ("train-config-dev-zero", TRAIN + ["-c", "/dev/zero", "--out", "{root}/new_run"], "not a regular file"),
    ("train-config-binary", TRAIN + ["-c", "{binary_yaml}", "--out", "{root}/new_run"], "utf-8"),
    ("train-config-python-object", TRAIN + ["-c", "{pyobj_yaml}", "--out", "{root}/new_run"], "yaml"),
    ("train-out-below-file", TRAIN + ["--out", "{afile}/run"], "is a file"),
    ("train-out-study-folder", TRAIN + ["--out", "{study_dir}"], "already holds"),
    ("train-resume-study-folder", TRAIN + ["--out", "{study_dir}", "--resume"], "study folder"),
    ("train-out-finished-run", TRAIN + ["--out", "{run}"], "--resume"),
    ("train-eps-2", TRAIN + ["--method", "pgd-at", "--eps", "2", "--out", "{root}/new_run"], "above 1"),
    ("train-device-mps", TRAIN[:-4] + ["--audit-attack", "none", "--device", "mps", "--out", "{root}/new_run"], "mps"),
    ("train-seed-negative", TRAIN + ["--set", "seed=-1", "--out", "{root}/new_run"], "seed"),
    ("train-set-unreadable", TRAIN + ["--set", "lr=[1, 2", "--out", "{root}/new_run"], "--set"),
    ("train-standard-robust-select", TRAIN + ["--method", "standard", "--set", "select=avg+worst", "--out",
                                              "{root}/new_run"], "set select: clean"),
    # ---- sweep
    ("sweep-yaml-bomb", ["sweep", "{bomb_yaml}", "--dry-run"], "aliases"),
    ("sweep-dev-zero", ["sweep", "/dev/zero"], "not a regular file"),
    ("sweep-study-is-folder", ["sweep", "{study_dir}"], "folder"),
    ("sweep-out-is-run", ["sweep", "{study_yaml}", "--out", "{run}"], "single run"),
    ("sweep-out-below-file", ["sweep", "{study_yaml}", "--out", "{afile}/s"], "is a file"),
    ("sweep-device-mps", ["sweep", "{study_yaml}", "--device", "mps"], "mps"),
    ("sweep-dry-run-model-kwargs", ["sweep", "{badkw_yaml}", "--dry-run"], "hiden"),
    ("sweep-dry-run-standard-robust-select", ["sweep", "{robsel_yaml}", "--dry-run"], "method standard trains on no attack"),
    ("sweep-standard-robust-select", ["sweep", "{robsel_yaml}"], "set select: clean"),
    # ---- leaderboard
    ("leaderboard-out-exists", ["leaderboard", "{run}/checkpoints/best.pt", "{other_pt}", "--data", "digits",
                                "--eps", "0.1", "--out", "{existing_html}"], "already exists"),
    ("leaderboard-eps-2", ["leaderboard", "{run}/checkpoints/best.pt", "{other_pt}", "--data", "digits",
                           "--eps", "2", "--out", "{root}/lb.html"], "above 1"),
    ("leaderboard-seed-negative", ["leaderboard", "{run}/checkpoints/best.pt", "{other_pt}", "--data", "digits",
                                   "--eps", "0.1", "--seed", "-1", "--out", "{root}/lb.html"], "seed"),
    ("leaderboard-bootstrap-1e8", ["leaderboard", "{run}/checkpoints/best.pt", "{other_pt}", "--data", "digits",
                                   "--eps", "0.1", "--bootstrap", "100000000", "--out", "{root}/lb.html"], "bootstrap"),
    ("leaderboard-model-dev-zero", ["leaderboard", "/dev/zero", "{other_pt}", "--data", "digits",
                                    "--eps", "0.1", "--out", "{root}/lb.html"], "regular file"),
    ("leaderboard-arch-count", ["leaderboard", "{run}/checkpoints/best.pt", "{other_pt}", "{other_pt}", "--data",
                                "digits", "--eps", "0.1", "--arch", "a.py:A", "--arch", "b.py:B", "--out", "{root}/lb.html"],
     "3 models but 2 --arch"),
    ("leaderboard-arch-kwargs-count", ["leaderboard", "--model", "{run}/checkpoints/best.pt", "--model", "{other_pt}",
                                       "--data", "digits", "--eps", "0.1", "--arch-kwargs", "w: 1", "--arch-kwargs",
                                       "w: 2", "--arch-kwargs", "w: 3", "--out", "{root}/lb.html"],
     "2 models but 3 --arch-kwargs"),
    ("leaderboard-models-both-forms", ["leaderboard", "{run}/checkpoints/best.pt", "--model", "{other_pt}", "--data",
                                       "digits", "--eps", "0.1", "--out", "{root}/lb.html"], "not both"),
    ("leaderboard-per-model-arch-on-checkpoint", ["leaderboard", "--model", "{run}/checkpoints/best.pt", "--arch",
                                                  "x.py:Net", "--model", "{other_pt}", "--arch", "-", "--data",
                                                  "digits", "--eps", "0.1", "--out", "{root}/lb.html"], "--arch"),
    # ---- report
    ("report-out-exists", ["report", "{run}", "--out", "{existing_html}"], "already exists"),
    ("report-out-below-file", ["report", "{run}", "--out", "{afile}/r.html"], "is a file"),
    ("report-out-suffix", ["report", "{run}", "--out", "{root}/r.txt"], ".html"),
    ("report-bootstrap-1e8", ["report", "{run}", "--out", "{root}/r.html", "--bootstrap", "100000000"], "bootstrap"),
    ("report-torn-audit", ["report", "{torn}", "--out", "{root}/r.html"], "truncated"),
    # ---- compare
    ("compare-bootstrap-1e8", ["compare", "{run}", "{run}", "--bootstrap", "100000000"], "bootstrap"),
    ("compare-out-exists", ["compare", "{run}", "{run}", "--out", "{existing_md}"], "already exists"),
    ("compare-out-suffix", ["compare", "{run}", "{run}", "--out", "{root}/c.txt"], ".md"),
    ("compare-seed-negative", ["compare", "{run}", "{run}", "--seed", "-1"], "seed"),
    ("compare-torn-audit", ["compare", "{run}", "{torn}"], "truncated"),
    ("compare-deep-json", ["compare", "{run}", "{deep}"], "not json"),
    # ---- theory
    ("theory-n-2", ["theory", "gaussian", "--n", "2", "--d", "2"], "one class"),
    ("theory-seed-negative", ["theory", "gaussian", "--seed", "-1"], "seed"),
    ("theory-out-exists", ["theory", "gaussian", "--n", "200", "--out", "{existing_json}"], "already exists"),
    ("theory-huge", ["theory", "gaussian", "--d", "100000", "--n", "10000000"], "2e8"),
    ("theory-eps-overflow", ["theory", "gaussian", "--eps", "1e400"], "finite"),
    # ---- demo
    ("demo-out-holds-run", ["demo", "--out", "{run}", "--epochs", "1"], "already holds"),
    ("demo-eps-2", ["demo", "--out", "{root}/new_demo", "--eps", "2"], "above 1"),
    ("demo-out-below-file", ["demo", "--out", "{afile}/demo"], "is a file"),
    ("demo-device-mps", ["demo", "--out", "{root}/new_demo", "--device", "mps"], "mps"),
    # ---- certify
    ("certify-out-exists", ["certify", "-m", "{other_pt}", "--n", "10", "--out", "{existing_json}"], "already exists"),
    ("certify-model-dev-zero", ["certify", "-m", "/dev/zero", "--n", "10"], "regular file"),
    ("certify-seed-negative", ["certify", "-m", "{other_pt}", "--seed", "-1"], "seed"),
    ("certify-device-mps", ["certify", "-m", "{other_pt}", "--n", "10", "--device", "mps"], "mps"),
    # ---- the command line itself
    ("unknown-command", ["no-such-command"], "no such command"),
    ("unknown-option", ["compare", "--no-such-flag"], "no-such-flag"),
]


def _argv(template: list[str], w: World) -> list[str]:
    fill = {k: str(w.root / v) for k, v in FILES.items()}
    fill["root"] = str(w.root)
    return [a.format(**fill) if "{" in a and "}" in a and not a.startswith(("(", "model_kwargs")) else a
            for a in template]


def test_corpus_size():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name,template,needle", CASES, ids=[c[0] for c in CASES])
def test_hostile_case(name, template, needle, world, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBFAIR_LOG_DIR", str(tmp_path / "logs"))
    before = snapshot(world.root)
    code, out, err = run_cli(_argv(template, world), capsys)
    assert_one_line(code, out, err, 2, needle)
    after = snapshot(world.root)
    assert after == before, f"files changed: {set(after.items()) ^ set(before.items())}"
    assert not (tmp_path / "logs").exists(), "an expected failure must not be logged as a crash"


# ---------------------------------------------------------------------------------------------- faults
def test_disk_full_is_one_line_and_leaves_nothing(world, capsys, monkeypatch, tmp_path):
    """ENOSPC while writing audit.json: one line naming the disk, exit 2, no file, no temp file."""
    import robfair.utils as U

    real = U.atomic_path

    def full(path):
        class _Full:
            def __enter__(self_inner):
                self_inner.cm = real(path)
                tmp = self_inner.cm.__enter__()
                tmp.write_text("partial")
                raise OSError(errno.ENOSPC, "No space left on device", str(tmp))

            def __exit__(self_inner, *a):
                return self_inner.cm.__exit__(*a)

        return _Full()

    monkeypatch.setattr(U, "atomic_path", full)
    out = tmp_path / "out" / "a.json"
    code, o, err = run_cli(AUDIT + ["-m", world.other_pt, "--out", out], capsys)
    assert_one_line(code, o, err, 2, "disk is full")
    assert not out.exists() and not list((tmp_path / "out").glob(".*.tmp"))


def test_unwritable_output_refused_before_computing(world, capsys, monkeypatch, tmp_path):
    """A folder the user cannot write to (simulated: the tests run as root) is refused up front."""
    import robfair.safeio as S

    real = os.access
    monkeypatch.setattr(S.os, "access", lambda p, mode: False if mode & os.W_OK else real(p, mode))
    called = []
    for name in ("robfair.models.load_checkpoint", "robfair.models.load_any"):
        monkeypatch.setattr(name, lambda *a, **k: called.append(1))
    code, o, err = run_cli(AUDIT + ["-m", world.other_pt, "--out", tmp_path / "ro" / "a.json"], capsys)
    assert_one_line(code, o, err, 2, "not writable")
    assert not called, "the checkpoint was loaded before the output was checked"


def test_permission_error_while_reading_is_one_line(world, capsys, monkeypatch):
    def denied(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied", str(world.other_pt))

    for name in ("robfair.models.load_checkpoint", "robfair.models.load_any"):
        monkeypatch.setattr(name, denied)
    code, o, err = run_cli(AUDIT + ["-m", world.other_pt], capsys)
    line = assert_one_line(code, o, err, 2, "permission denied")
    assert str(world.other_pt) in line


def test_a_bug_is_one_line_naming_a_log_with_the_traceback(world, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("ROBFAIR_LOG_DIR", str(tmp_path / "logs"))

    def bug(*a, **k):
        raise TypeError("unsupported operand")

    monkeypatch.setattr("robfair.report.text.print_audit", bug)
    code, o, err = run_cli(AUDIT + ["-m", world.other_pt], capsys)
    line = assert_one_line(code, o, err, 1, "internal error")
    logs = list((tmp_path / "logs").glob("robfair-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in line
    text = logs[0].read_text()
    assert "Traceback" in text and "TypeError: unsupported operand" in text and "robfair audit" in text


def test_output_files_honour_the_umask(world, capsys, tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "t.json"
        code, _, err = run_cli(["theory", "gaussian", "--n", "200", "--d", "2", "--out", out], capsys)
        assert code == 0, err
        assert out.stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        out2 = tmp_path / "t2.json"
        code, _, err = run_cli(["theory", "gaussian", "--n", "200", "--d", "2", "--out", out2], capsys)
        assert code == 0, err
        assert out2.stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)


def test_own_audit_replaced_only_with_overwrite(world, capsys, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(world.run, run)
    before = (run / "audit.json").read_bytes()
    code, _, err = run_cli(AUDIT + ["-m", run / "checkpoints/best.pt", "--out", run, "--overwrite"], capsys)
    assert code == 0, err
    d = json.loads((run / "audit.json").read_text())
    assert d["meta"]["split"] == "test" and d["meta"]["attacks"] == ["fgsm"]
    assert (run / "audit.json").read_bytes() != before
    # another split goes beside it under the name the refusal suggested
    code, _, err = run_cli(AUDIT + ["-m", run / "checkpoints/best.pt", "--split", "train", "--out",
                                    run / "audit-train.json"], capsys)
    assert code == 0, err
    assert json.loads((run / "audit-train.json").read_text())["meta"]["split"] == "train"
    from robfair.experiments import load_report

    assert load_report(run)[1].meta["split"] == "test"  # what report/compare read is still the test audit


# ---------------------------------------------------------------------------------------------- inert text
@pytest.fixture(scope="module")
def hostile_npz(world):
    names = ["\x1b]0;pwned\x07zero", "[bold]one[/bold]", "$\\frac{a}{$", "=HYPERLINK(\"x\")", "\x1b[31mred",
             "five|x", "six\nnl", "seven\u202e", "[link=file:///etc]eight[/link]", "nine"]
    rng = np.random.default_rng(0)
    p = world.root.parent / "hostile_names.npz"
    np.savez(p, x=rng.random((40, 1, 8, 8)).astype(np.float32), y=np.arange(40) % 10, classes=np.array(names))
    return p


def test_hostile_class_names_are_inert_in_terminal_and_plot(world, hostile_npz, capsys, tmp_path):
    png, out = tmp_path / "bars.png", tmp_path / "a.json"
    code, stdout, err = run_cli(AUDIT + ["-m", world.other_pt, "--data", f"npz:{hostile_npz}", "--plot", png,
                                         "--out", out], capsys)
    assert code == 0, err
    text = stdout + err
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "[bold]one[/bold]" in text  # markup shown, not interpreted
    assert "$\\frac{a}{$" in text
    assert png.read_bytes()[:4] == b"\x89PNG" and out.exists()  # math text did not crash the figure


def test_hostile_names_inert_in_markdown_and_csv(world, hostile_npz, capsys, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(world.run, run)
    code, o, err = run_cli(AUDIT + ["-m", run / "checkpoints/best.pt", "--data", f"npz:{hostile_npz}", "--out", run,
                                    "--overwrite"], capsys)
    assert_one_line(code, o, err, 2, "other data")  # the run was audited on digits: never replaced by this
    a = tmp_path / "a.json"
    code, _, err = run_cli(AUDIT + ["-m", run / "checkpoints/best.pt", "--data", f"npz:{hostile_npz}", "--out", a],
                           capsys)
    assert code == 0, err
    md, csv = tmp_path / "c.md", tmp_path / "c.csv"
    for target in (md, csv):
        code, _, err = run_cli(["compare", a, a, "--bootstrap", "10", "--out", target], capsys)
        assert code == 0, err
    m = md.read_text()
    assert "\x1b" not in m and "\n nl" not in m and "five\\|x" in m
    c = csv.read_text()
    assert "\x1b" not in c and "'=HYPERLINK" in c and ",=HYPERLINK" not in c


def test_inert_helpers():
    from robfair.inert import csv_cell, plain, term

    assert plain("a\x1b[2J\x1b]8;;http://x\x07b\x1b\\c\nd\u202e") == "abc d"
    assert term("[bold]x[/bold]") == "\\[bold]x\\[/bold]"
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("-1.5") == "-1.5" and csv_cell("-cmd") == "'-cmd"
    assert csv_cell("cat") == "cat"


def test_yaml_loader_limits():
    from robfair.errors import ConfigError
    from robfair.safeio import yaml_loads

    assert yaml_loads("base: &b {lr: 0.1}\nrun: *b\n") == {"base": {"lr": 0.1}, "run": {"lr": 0.1}}  # aliases still work
    with pytest.raises(ConfigError, match="aliases"):
        yaml_loads("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n", max_items=50)


# ---------------------------------------------------------------------------------------------- kill / interrupt
def _env() -> dict:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
               ROBFAIR_NO_MALLOPT="1")
    env.pop("ROBFAIR_PROGRESS", None)
    return env


def _train_argv(run: Path, epochs: int) -> list[str]:
    return ["train", *TINY_MODEL, "--epochs", str(epochs), "--device", "cpu", "--audit-attack", "none",
            "--method", "standard", "--set", "val_per_class=5", "--set", "val_attack=fgsm", "--eps", "0.1",
            "--set", "batch_size=64", "--out", str(run)]


def _start(argv: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from robfair.cli import main; main()", *argv], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _epochs(run: Path) -> list[int]:
    p = run / "metrics.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line)["epoch"])
        except (json.JSONDecodeError, KeyError):
            pass
    return out


PROGRESS = re.compile(r"^\[\s*[\dhms]+\] ")  # the plain progress lines written to stderr without a terminal


def _message_lines(err: str) -> list[str]:
    """stderr less its progress lines: what the boundary said."""
    return [line for line in err.splitlines() if line.strip() and not PROGRESS.match(line)]


def test_train_ctrl_c_exits_130_with_the_resume_command(tmp_path, capsys):
    run = tmp_path / "run"
    proc = _start(_train_argv(run, 12))
    # an epoch's metrics line is written before its last.pt: wait for both, or the interrupt rightly says
    # there is no checkpoint yet (a timing race of the test, not of the trainer)
    _wait_for(lambda: len(_epochs(run)) >= 1 and (run / "checkpoints" / "last.pt").is_file(), proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    lines = _message_lines(err)
    assert proc.returncode == 130, err
    assert len(lines) == 1 and "Traceback" not in err, lines
    assert "resume with: robfair train" in lines[0] and lines[0].endswith("--resume")
    assert not list(run.rglob(".*.tmp"))
    done = _epochs(run)
    assert 1 <= len(done) < 12 and done == list(range(1, len(done) + 1))
    # the printed command continues the run to its end
    import shlex

    cmd = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert cmd[:2] == ["robfair", "train"]
    code, _, err = run_cli(cmd[1:], capsys)
    assert code == 0, err
    assert _epochs(run) == list(range(1, 13))


def test_train_sigkill_then_resume_over_torn_line_and_temp_files(tmp_path, capsys):
    run = tmp_path / "run"
    argv = _train_argv(run, 12)  # 12 tiny epochs: a loaded machine's poller sees epoch 1 long before the last one
    proc = _start(argv)
    _wait_for(lambda: len(_epochs(run)) >= 1, proc)
    proc.kill()
    proc.communicate(timeout=60)
    kept = _epochs(run)
    assert 1 <= len(kept) < 12
    with open(run / "metrics.jsonl", "a") as f:  # what a kill inside the append leaves
        f.write('{"epoch": 99, "step": 1, "tra')
    orphans = [run / "checkpoints" / ".last.pt.k1ll3d.tmp", run / ".metrics.jsonl.x1y2z3.tmp"]
    for o in orphans:
        o.write_bytes(b"\0" * 100_000)
    code, _, err = run_cli(argv + ["--resume"], capsys)
    assert code == 0, err
    assert _epochs(run) == list(range(1, 13))
    assert not any(o.exists() for o in orphans)


def test_first_epoch_never_finished_starts_again(tmp_path, capsys):
    run = tmp_path / "run"
    argv = _train_argv(run, 1)
    proc = _start(argv)
    _wait_for(lambda: (run / "config.yaml").exists(), proc)
    proc.kill()
    proc.communicate(timeout=60)
    (run / "checkpoints").mkdir(exist_ok=True)
    (run / "checkpoints" / ".last.pt.abcdef.tmp").write_bytes(b"half")
    if not _epochs(run):  # killed before the first epoch's line: the folder holds no results
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err
    else:
        code, _, err = run_cli(argv + ["--resume"], capsys)
        assert code == 0, err
    assert _epochs(run) == [1] and (run / "checkpoints" / "best.pt").exists()
    assert not (run / "checkpoints" / ".last.pt.abcdef.tmp").exists()


def test_torn_only_line_resumes(tmp_path, capsys):
    """A crash inside the first epoch's metrics line: nothing is finished; --resume starts it over."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "metrics.jsonl").write_text('{"epoch": 1, "st')
    argv = _train_argv(run, 1)
    code, _, err = run_cli(argv, capsys)
    assert_one_line(code, _, err, 2, "--resume")
    code, _, err = run_cli(argv + ["--resume"], capsys)
    assert code == 0, err
    assert _epochs(run) == [1]


def _index_rows(index: Path) -> list[dict]:
    from robfair.experiments.store import Store

    if not index.exists():
        return []
    try:
        with Store(index) as s:
            return s.rows()
    except Exception:  # noqa: BLE001 - being created right now
        return []


@pytest.mark.parametrize("presses", [1, 2], ids=["ctrl-c", "ctrl-c-twice"])
def test_sweep_ctrl_c_releases_its_claims(tmp_path, presses):
    out = tmp_path / "study"
    study = _tiny_study(out)
    study["base"]["epochs"] = 200
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    proc = _start(["sweep", str(path), "--workers", "1", "--threads", "1"], start_new_session=True)
    run_dirs = lambda: [p for p in out.glob("*") if p.is_dir() and (p / "metrics.jsonl").exists()]  # noqa: E731
    _wait_for(lambda: any(_epochs(r) for r in run_dirs()), proc, timeout=240)
    for _ in range(presses):  # the terminal sends SIGINT to the whole foreground process group
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)
    o, err = proc.communicate(timeout=180)
    lines = _message_lines(err)
    assert proc.returncode == 130, (o[-1500:], err[-1500:])
    assert len(lines) == 1 and "Traceback" not in err and "robfair sweep" in lines[0], lines
    rows = _index_rows(out / "index.sqlite")
    assert rows and all(r["status"] != "running" for r in rows), rows
    assert all(r["pid"] is None for r in rows)


def test_interrupt_lines_say_what_was_kept(tmp_path):
    from robfair.cli import _resume_hint

    ck = tmp_path / "last.pt"
    ck.write_bytes(b"a checkpoint")  # a checkpoint is named only when it exists (tests/cli/test_hostile_files.py)
    assert _resume_hint(["train", "--out", "r"], ck).endswith("resume with: robfair train --out r --resume")
    assert _resume_hint(["train", "--out", "r", "--resume"], ck).endswith("robfair train --out r --resume")
    assert "nothing was written" in _resume_hint(["audit", "-m", "x.pt"])
    assert "kept" in _resume_hint(["demo"]) and "nothing was written" not in _resume_hint(["demo"])
    assert "continue with: robfair sweep s.yaml" in _resume_hint(["sweep", "s.yaml"])
    assert "resume with: robfair certify -m x --out c.json" in _resume_hint(["certify", "-m", "x", "--out", "c.json"], ck)
