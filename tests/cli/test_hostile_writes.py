"""Hostile writes (issue 21 part 2): a result is a set, written whole or not at all, and its outputs
are claimed before anything is computed.

- Two writers at once: two real processes on the same output; the second is refused in one line
  naming the first (``--overwrite`` or not) and the result is the first's, whole.
- A claimed output refuses every command that writes it, before any model is loaded.
- A full disk (a small tmpfs; skipped with the reason where it cannot be mounted) and a file-size
  limit (``RLIMIT_FSIZE``, ``ulimit -f``) in the middle of a set: exit 2, one line naming the output
  and the system's reason, the previous result byte for byte, no temporary or lock file left.
- An interrupt or an I/O error while the set is written, a move that fails while it is put in
  place: the previous set is kept.

The slow model is a user's model file (``--arch``) whose forward waits for a gate file the test
creates, so "the second starts while the first runs" is a fact, not a timing guess.
"""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from _shared import run_cli, wait_for

SRC = str(Path(__file__).resolve().parents[2] / "src")
PROGRESS = re.compile(r"^\[\s*[\dhms]+\] ")  # the plain progress lines written to stderr without a terminal
BUSY = "is being written by another robfair process"

SLOW_ARCH = '''
import os
import time

from torch import nn


class Slow(nn.Module):
    """A linear digits model; while ROBFAIR_TEST_GATE names a file that does not exist yet, its
    forward waits for it (a user's model that is slow until the test lets it go)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10)

    def forward(self, x):
        gate = os.environ.get("ROBFAIR_TEST_GATE")
        while gate and not os.path.exists(gate):
            time.sleep(0.02)
        return self.lin(x.flatten(1))
'''


# ---------------------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    """The slow model (``--model`` / ``--arch`` arguments) and a world with two finished audits."""
    import importlib.util

    import torch

    d = tmp_path_factory.mktemp("writes")
    (d / "slow.py").write_text(SLOW_ARCH)
    spec = importlib.util.spec_from_file_location("robfair_test_slow", d / "slow.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from robfair.data import load_dataset

    torch.manual_seed(0)
    net, train = mod.Slow(), load_dataset("digits", split="train")
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(150):  # fitted, so no command says "near chance" on stderr
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(train.x), train.y).backward()
        opt.step()
    torch.save(net.state_dict(), d / "slow.pt")
    return d


def model(slow: Path) -> list[str]:
    return ["--model", str(slow / "slow.pt"), "--arch", f"{slow / 'slow.py'}:Slow"]


def audit_argv(slow: Path, out: Path, *extra: str) -> list[str]:
    return ["audit", *model(slow), "-d", "digits,limit=64", "--attack", "fgsm", "--eps", "0.1", "--device", "cpu",
            "--probe", "0", "--bootstrap", "0", "--batch-size", "16", "--out", str(out), *extra]


def certify_argv(slow: Path, out: Path, *extra: str) -> list[str]:
    return ["certify", *model(slow), "-d", "digits", "--per-class", "2", "--n0", "10", "--n", "100", "--device", "cpu",
            "--bootstrap", "0", "--out", str(out), *extra]


def env(**extra: str) -> dict:
    e = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
             ROBFAIR_NO_MALLOPT="1", PYTHONDONTWRITEBYTECODE="1", **extra)
    e.pop("ROBFAIR_PROGRESS", None)
    return e


def start(argv: list[str], *, fsize: int | None = None, **extra: str) -> subprocess.Popen:
    """``robfair ARGV`` in a subprocess (``fsize``: its RLIMIT_FSIZE in bytes, ``ulimit -f``)."""
    def limit():
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.Popen([sys.executable, "-c", "from robfair.cli import main; main()", *map(str, argv)],
                            env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=limit if fsize is not None else None)


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def one_line(code: int, out: str, err: str, expected: int, *needles: str) -> str:
    """The promise of the boundary: the exit code, one line on stderr (progress lines aside), no traceback."""
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS.match(line)]
    assert code == expected, f"exit {code} (wanted {expected})\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {lines[:5]}"
    assert "Traceback" not in out + err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), f"{lines[0]!r} does not mention {needle!r}"
    return lines[0]


def tree(root: Path) -> dict[str, object]:
    """Every path below ``root`` (hidden ones too) with its bytes (files) or ``"dir"``."""
    return {str(p.relative_to(root)): "dir" if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def leftovers(root: Path) -> list[str]:
    """Temporary files, staging folders and lock files below ``root``."""
    return [str(p.relative_to(root)) for p in root.rglob(".*") if p.name.endswith((".tmp", "robfair-lock"))]


@contextmanager
def held(path: Path, *, inside: bool = False):
    """Another robfair process holding the claim of ``path``; yields its pid."""
    code = ("import sys; from robfair.safeio import claim_outputs; claim_outputs([sys.argv[1]], inside=sys.argv[2] == '1'); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(path), "1" if inside else "0"], env=env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held", proc.stderr.read()
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.fixture(scope="module")
def world(slow, tmp_path_factory):
    """Two finished audits (a1, a2) of the slow model, without its wait, for the commands that read audits."""
    root = tmp_path_factory.mktemp("world")
    from robfair.cli import main

    for name, eps in (("a1", "0.1"), ("a2", "0.2")):
        with pytest.raises(SystemExit) as exc:
            main(audit_argv(slow, root / name / "audit.json", "--eps", eps))
        assert exc.value.code == 0
    return root


def gated(tmp_path: Path) -> tuple[Path, dict]:
    gate = tmp_path / "gate"
    return gate, {"ROBFAIR_TEST_GATE": str(gate)}


# ---------------------------------------------------------------------------------------------- two writers
def test_two_audits_on_one_out_the_second_is_refused_and_the_first_result_is_whole(slow, tmp_path):
    from robfair.auditing import AuditReport

    out = tmp_path / "race" / "audit.json"
    gate, extra = gated(tmp_path)
    first = start(audit_argv(slow, out, "--seed", "1"), **extra)
    wait_for(lambda: (out.parent / ".audit.json.robfair-lock").exists(), first)
    # the first has claimed its outputs and waits inside the model: the second, --overwrite or not, is refused
    code, o, err = finish(start(audit_argv(slow, out, "--seed", "2", "--overwrite")))
    line = one_line(code, o, err, 2, BUSY, f"pid {first.pid}", "--out")
    assert str(out) in line and first.poll() is None
    gate.touch()
    code, o, err = finish(first)
    assert code == 0, err
    rep = AuditReport.load(out)
    assert rep.meta["seed"] == 1 and rep.outcomes is not None and rep.examples is not None
    assert rep.outcomes.n == 64 and not leftovers(tmp_path)


def test_two_certifies_on_one_out_the_second_is_refused(slow, tmp_path):
    out = tmp_path / "cert" / "certify.json"
    gate, extra = gated(tmp_path)
    first = start(certify_argv(slow, out, "--seed", "1"), **extra)
    wait_for(lambda: (out.parent / ".certify.json.robfair-lock").exists(), first)
    code, o, err = finish(start(certify_argv(slow, out, "--seed", "2", "--overwrite", "--restart")))
    one_line(code, o, err, 2, BUSY, f"pid {first.pid}")
    gate.touch()
    code, o, err = finish(first)
    assert code == 0, err
    assert json.loads(out.read_text())["meta"]["seed"] == 1
    assert (out.parent / "certify_outcomes.csv").is_file() and not leftovers(tmp_path)


def test_a_report_is_refused_while_a_leaderboard_writes_the_same_page(slow, world, tmp_path):
    page = tmp_path / "lb.html"
    gate, extra = gated(tmp_path)
    first = start(["leaderboard", str(slow / "slow.pt"), str(slow / "slow.pt"), "--arch", f"{slow / 'slow.py'}:Slow",
                   "-d", "digits,limit=32", "--eps", "0.1", "--attack", "fgsm", "--device", "cpu", "--probe", "0",
                   "--bootstrap", "0", "--no-figures", "--out", page], **extra)
    wait_for(lambda: (tmp_path / ".lb.html.robfair-lock").exists(), first)
    code, o, err = finish(start(["report", world / "a1", "--out", page, "--overwrite", "--no-figures"]))
    one_line(code, o, err, 2, BUSY, f"pid {first.pid}")
    gate.touch()
    code, o, err = finish(first)
    assert code == 0, err
    assert "leaderboard" in page.read_text() and (tmp_path / "lb.md").is_file() and (tmp_path / "lb_tables").is_dir()
    assert not leftovers(tmp_path)


def test_a_second_train_of_a_run_folder_is_refused_while_the_first_trains(tmp_path):
    run = tmp_path / "run"
    argv = ["train", "--model", "mlp", "--set", "model_kwargs={hidden: [8]}", "--epochs", "1000", "--device", "cpu",
            "--audit-attack", "none", "--method", "standard", "--set", "val_per_class=5", "--set", "val_attack=fgsm",
            "--eps", "0.1", "--out", run]
    first = start(argv)
    wait_for(lambda: (run / ".robfair-lock").exists(), first)
    # once an epoch is done a second plain train is told the folder holds results; a second --resume is
    # what would train over the first: it is refused by the claim
    code, o, err = finish(start(argv + ["--resume"]))
    one_line(code, o, err, 2, BUSY, f"pid {first.pid}", "--out")
    assert first.poll() is None, "the first run ended before the second was refused; the test proves nothing"
    first.send_signal(signal.SIGINT)
    code, o, err = finish(first)
    assert code == 130 and "--resume" in err
    assert not (run / ".robfair-lock").exists()  # given back: the run resumes


# ---------------------------------------------------------------------------------------------- a claimed output
AUDIT = "audit {model} -d digits --attack fgsm --eps 0.1 --probe 0"
CERTIFY = "certify {model} -d digits --n 10"
CLAIMED = {  # name: (argv with {w} the world and {s} the slow model's folder, the claimed path, claimed inside)
    "audit --out --overwrite": (AUDIT + " --out {w}/new/audit.json --overwrite", "new/audit.json", False),
    "audit --plot": (AUDIT + " --plot {w}/bars.png", "bars.png", False),
    "audit --out sidecar": (AUDIT + " --out {w}/x.json", "x.outcomes.npz", False),
    "certify --out": (CERTIFY + " --out {w}/c.json", "c.json", False),
    "certify resume checkpoint": (CERTIFY + " --out {w}/d.json", ".d.partial.npz", False),
    "certify --html": (CERTIFY + " --html {w}/c.html", "c.html", False),
    "report": ("report {w}/a1 --out {w}/r.html --overwrite", "r.html", False),
    "report CSV folder": ("report {w}/a1 --out {w}/r.html", "r_tables", False),
    "leaderboard": ("leaderboard {s}/slow.pt {s}/slow.pt --arch {s}/slow.py:Slow -d digits --eps 0.1 --out {w}/l.html",
                    "l.md", False),
    "compare": ("compare {w}/a1 {w}/a2 --out {w}/cmp.md --overwrite", "cmp.md", False),
    "theory": ("theory gaussian --out {w}/t.json", "t.json", False),
    "train": ("train --model mlp --epochs 1 --audit-attack none --out {w}/run", "run", True),
    "demo": ("demo --out {w}/demo --epochs 1", "demo", True),
}


def _import_every_module() -> None:
    """Import all of robfair first: a module imported for the first time while the loaders are patched
    would keep the patched function (``from ..models import load_any``) for the tests after this one."""
    import pkgutil

    import robfair

    for info in pkgutil.walk_packages(robfair.__path__, "robfair."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:  # an optional extra's module (fairlearn, tensorboard, ...) absent here
            pass


@pytest.mark.parametrize("case", list(CLAIMED))
def test_a_claimed_output_refuses_every_command_before_it_computes(case, slow, world, capsys, monkeypatch):
    template, claimed, inside = CLAIMED[case]
    _import_every_module()
    argv = template.format(w=world, s=slow, model=" ".join(model(slow))).split()
    loaded = []
    for name in ("robfair.models.load_any", "robfair.data.load_dataset"):
        monkeypatch.setattr(name, lambda *a, **k: loaded.append(1) or pytest.fail("loaded before the claim"))
    with held(world / claimed, inside=inside) as pid:
        before = tree(world)
        code, out, err = run_cli(argv, capsys)
        after = tree(world)
    one_line(code, out, err, 2, BUSY, f"pid {pid}")
    assert after == before, f"files changed: {set(after) ^ set(before)}"
    assert not loaded and not leftovers(world)


def test_an_output_written_between_the_check_and_the_claim_is_not_overwritten(world, capsys, monkeypatch, tmp_path):
    """The check runs again under the claim: a writer that finished in between keeps its result."""
    import robfair.safeio as S

    out = tmp_path / "t.json"
    real = S.claim_outputs

    def finished_meanwhile(paths, *a, **k):
        out.write_text('{"theirs": true}\n')  # another process wrote it and gave its claim back
        return real(paths, *a, **k)

    monkeypatch.setattr(S, "claim_outputs", finished_meanwhile)
    code, o, err = run_cli(["theory", "gaussian", "--out", out], capsys)
    one_line(code, o, err, 2, "already exists", "--overwrite")
    assert out.read_text() == '{"theirs": true}\n' and not leftovers(tmp_path)


def test_two_spellings_of_one_output_share_one_claim(tmp_path):
    """Through a symbolic link to its folder or with ``..``, an output is the same output."""
    from robfair.errors import ConfigError
    from robfair.safeio import claim_outputs

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with held(tmp_path / "real" / "a.json") as pid:
        for spelling in (tmp_path / "link" / "a.json", tmp_path / "link" / ".." / "real" / "a.json"):
            with pytest.raises(ConfigError, match=f"{BUSY} \\(pid {pid}"):
                claim_outputs([spelling], "--out")
        with claim_outputs([tmp_path / "real" / "b.json"]):  # another output of the folder is free
            pass


def test_the_lock_of_a_killed_writer_holds_nothing_and_its_temporaries_go(tmp_path):
    from robfair.safeio import claim_outputs, lock_file

    out = tmp_path / "audit.json"
    code = ("import sys, time; from robfair.safeio import claim_outputs; claim_outputs([sys.argv[1]]); "
            "print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], env=env(), stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.kill()  # SIGKILL: nothing of robfair runs; the kernel drops the lock
    proc.wait(timeout=60)
    assert lock_file(out).exists()
    orphans = [tmp_path / ".audit.json.k1ll3d00.tmp", tmp_path / ".audit.json.set-k1ll3d00.tmp"]
    orphans[0].write_bytes(b"half")
    orphans[1].mkdir()
    (orphans[1] / "audit.json").write_text("{")
    keep = tmp_path / ".audit.json.png.abcdefgh.tmp"  # another output's temporary: not this claim's to remove
    keep.write_bytes(b"x")
    with claim_outputs([out]):
        assert not any(o.exists() for o in orphans) and keep.exists()
    assert not lock_file(out).exists()


# ---------------------------------------------------------------------------------------------- a full disk
def pages(n: int, page: int = 4096) -> int:
    return -(-n // page)


def set_files(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def leave_free(disk: Path, nbytes: int) -> None:
    """Fill ``disk`` with a file of zeros until ``nbytes`` are left (written, not sparse)."""
    st = os.statvfs(disk)
    fill = st.f_bavail * st.f_frsize - nbytes
    assert fill > 0, "the disk is too small for the test"
    with open(disk / "filler", "wb") as f:
        chunk = b"\0" * (1 << 16)
        while fill > 0:
            fill -= f.write(chunk[:fill])


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs (needs root, or the right to mount); skipped with the reason where it cannot be mounted."""
    import shutil

    mnt = tmp_path / "disk"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine: the full-disk test needs a small tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({(r.stderr or r.stdout).strip()[:200]}): the full-disk test "
                    "needs root or the right to mount")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


#: command -> (argv of the old result, argv of the new one (seed / radius / title differ), the set's primary file,
#: how many outputs it claims (one lock file each, one page on a tmpfs))
def _sets(slow: Path, world: Path, d: Path) -> dict[str, tuple[list, list, Path, int]]:
    cert = lambda seed: certify_argv(slow, d / "c" / "certify.json", "--seed", seed, "--html",  # noqa: E731
                                     d / "c" / "page.html", "--overwrite")
    rep = lambda title: ["report", world / "a1", "--out", d / "r" / "r.html", "--no-figures", "--bootstrap", "0",  # noqa: E731
                         "--title", title, "--overwrite"]
    return {
        "audit": (audit_argv(slow, d / "a" / "audit.json"), audit_argv(slow, d / "a" / "audit.json", "--eps", "0.2",
                                                                      "--overwrite"), d / "a" / "audit.json", 3),
        "certify": (cert("1"), cert("2"), d / "c" / "certify.json", 4),
        "report": (rep("old"), rep("new"), d / "r" / "r.html", 3),
    }


#: what a failed write keeps on purpose: certify's resume checkpoint (the samples certified so far; the
#: run again resumes from it)
KEPT = {"certify": ".certify.partial.npz"}


def kept_aside(command: str, folder: Path) -> dict[str, object]:
    """The folder's files less what the command keeps on purpose after a failure (which must be there)."""
    files = tree(folder)
    if command in KEPT:
        assert files.pop(KEPT[command], None) is not None, f"{KEPT[command]} was not kept"
    return files


def old_result(command: str, slow: Path, world: Path, folder: Path, capsys):
    """``command``'s old result, written below ``folder``: (the new one's argv, its primary file, its
    number of lock files, the old files' sizes and bytes)."""
    old_argv, new_argv, primary, locks = _sets(slow, world, folder)[command]
    code, _, err = run_cli(old_argv, capsys)
    assert code == 0, err
    return new_argv, primary, locks, set_files(primary.parent), tree(primary.parent)


@pytest.mark.parametrize("command", ["audit", "certify", "report"])
def test_a_full_disk_mid_set_names_the_path_and_keeps_the_old_result(command, slow, world, small_disk, capsys):
    new_argv, primary, locks, sizes, before = old_result(command, slow, world, small_disk, capsys)
    # room for every member but the primary's second half (and the lock files): the write fails mid-set
    others = sum(pages(n) for name, n in sizes.items() if name != primary.name)
    leave_free(small_disk, 4096 * (others + locks + pages(sizes[primary.name]) // 2))
    code, out, err = run_cli(new_argv, capsys)
    line = one_line(code, out, err, 2, "No space left on device", "the disk is full", "cannot write")
    named = line.split("cannot write ", 1)[1].split(":", 1)[0]
    assert Path(named).parent == primary.parent and Path(named).name in sizes, line
    assert kept_aside(command, primary.parent) == before and not leftovers(small_disk)
    (small_disk / "filler").unlink()  # space freed: the same command now writes the new set
    code, out, err = run_cli(new_argv, capsys)
    assert code == 0, err
    assert tree(primary.parent) != before and set(set_files(primary.parent)) == set(sizes)


@pytest.mark.parametrize("command", ["audit", "certify", "report"])
def test_a_file_size_limit_mid_set_names_the_path_and_keeps_the_old_result(command, slow, world, tmp_path, capsys):
    """``ulimit -f`` between the sizes of the members: the primary, written last, does not fit."""
    new_argv, primary, _, sizes, before = old_result(command, slow, world, tmp_path, capsys)
    biggest_other = max(n for name, n in sizes.items() if name != primary.name)
    assert sizes[primary.name] > 2 * biggest_other, sizes
    code, out, err = finish(start(new_argv, fsize=(biggest_other + sizes[primary.name]) // 2))
    one_line(code, out, err, 2, f"cannot write {primary}", "File too large", "ulimit -f")
    assert kept_aside(command, primary.parent) == before and not leftovers(tmp_path)


# ---------------------------------------------------------------------------------------------- interrupted writes
@pytest.fixture
def old_audit(slow, tmp_path, capsys):
    """A finished audit set (with its plot) and its bytes."""
    out = tmp_path / "a" / "audit.json"
    code, _, err = run_cli(audit_argv(slow, out, "--plot", tmp_path / "a" / "bars.png"), capsys)
    assert code == 0, err
    return out, tree(tmp_path)


def test_ctrl_c_while_the_set_is_written_keeps_the_old_set(slow, old_audit, tmp_path, capsys, monkeypatch):
    R = importlib.import_module("robfair.auditing.audit_report")  # robfair.audit is also the function
    out, before = old_audit

    def interrupted(path, obj):  # audit.json, after the plot and the sidecars were staged: Ctrl-C
        Path(path).write_text('{"half": ')
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # the handler raises KeyboardInterrupt here

    monkeypatch.setattr(R, "write_json", interrupted)
    pytest_handler = signal.getsignal(signal.SIGINT)
    try:
        code, o, err = run_cli(audit_argv(slow, out, "--eps", "0.2", "--overwrite", "--plot", out.parent / "bars.png"),
                               capsys)
    finally:
        signal.signal(signal.SIGINT, pytest_handler)  # the boundary ignores further presses after one
    one_line(code, o, err, 130, "interrupted")
    assert tree(tmp_path) == before and not leftovers(tmp_path)


@pytest.mark.parametrize("kind", [errno.EIO, errno.EACCES, errno.ENOSPC])
def test_an_os_error_while_writing_a_member_names_it(kind, slow, old_audit, tmp_path, capsys, monkeypatch):
    """The system's error names no file (``write`` on a full disk, an I/O error): the line names the output."""
    E = importlib.import_module("robfair.auditing.outcomes")
    out, before = old_audit

    def failing(path, arrays):
        with open(path, "wb") as f:
            f.write(b"PK\x03\x04 half an archive")
        raise OSError(kind, os.strerror(kind))

    monkeypatch.setattr(E, "write_npz", failing)
    code, o, err = run_cli(audit_argv(slow, out, "--eps", "0.2", "--overwrite"), capsys)
    one_line(code, o, err, 2, f"cannot write {out.parent / 'outcomes.npz'}: {os.strerror(kind)}", "what was there is kept")
    assert tree(tmp_path) == before and not leftovers(tmp_path)


def test_a_move_that_fails_puts_the_moved_members_back(slow, old_audit, tmp_path, capsys, monkeypatch):
    """The sidecars are in place when audit.json's rename fails: they are put back as they were."""
    import robfair.safeio as S

    out, before = old_audit
    real = os.replace
    moved = []

    def replace(src, dst):
        if Path(dst) == out and Path(src).parent.name.startswith(".") and not moved:
            moved.append(dst)
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(src), None, str(dst))
        return real(src, dst)

    monkeypatch.setattr(S.os, "replace", replace)
    code, o, err = run_cli(audit_argv(slow, out, "--eps", "0.2", "--overwrite", "--plot", out.parent / "bars.png"),
                           capsys)
    one_line(code, o, err, 2, f"cannot write {out}: {os.strerror(errno.EIO)}")
    assert moved and tree(tmp_path) == before and not leftovers(tmp_path)


def test_readers_check_the_sidecars_against_the_digests_in_audit_json(world, tmp_path, caplog):
    """A sidecar that is not the one audit.json was written with (another audit's, or one a hard kill
    left between two renames): outcomes.npz is refused in one line naming both files (its numbers
    would contradict audit.json), examples.npz is not used, with a warning."""
    import shutil

    from robfair.auditing import AuditReport
    from robfair.errors import RobfairError

    for name in ("audit.json", "outcomes.npz", "examples.npz"):
        shutil.copy(world / "a1" / name, tmp_path / name)
    assert AuditReport.load(tmp_path).outcomes is not None
    shutil.copy(world / "a2" / "examples.npz", tmp_path / "examples.npz")  # a2's images beside a1's audit
    rep = AuditReport.load(tmp_path)
    assert rep.examples is None and rep.outcomes is not None and rep.reports
    assert "is not the file" in caplog.text and "examples.npz" in caplog.text
    shutil.copy(world / "a2" / "outcomes.npz", tmp_path / "outcomes.npz")  # and a2's outcomes
    with pytest.raises(RobfairError) as e:
        AuditReport.load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and "outcomes.npz" in msg and "audit.json" in msg and "re-run the audit" in msg


def test_a_report_replaces_its_csv_folder_whole(world, tmp_path, capsys):
    """A CSV an earlier report wrote and this one does not is gone (the folder is one member of the set)."""
    out = tmp_path / "r.html"
    code, _, err = run_cli(["report", world / "a1", "--out", out, "--no-figures", "--bootstrap", "0"], capsys)
    assert code == 0, err
    (tmp_path / "r_tables" / "stale.csv").write_text("from another report\n")
    code, _, err = run_cli(["report", world / "a1", world / "a2", "--out", out, "--no-figures", "--bootstrap", "0",
                            "--overwrite"], capsys)
    assert code == 0, err
    assert not (tmp_path / "r_tables" / "stale.csv").exists() and list((tmp_path / "r_tables").glob("*.csv"))
    assert not leftovers(tmp_path)
