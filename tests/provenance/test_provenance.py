"""Where a result came from (robfair.provenance): versions, git commit, device."""

import platform
import re
import subprocess
from pathlib import Path

import numpy as np
import torch

import robfair
from robfair import provenance


def test_run_info_names_versions_device_and_processes():
    info = provenance.run_info(torch.device("cpu"), 2)
    assert info["versions"] == {"robfair": robfair.__version__, "torch": str(torch.__version__),
                                "numpy": str(np.__version__), "python": platform.python_version()}
    assert info["device"] == "cpu" and info["world_size"] == 2
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4}", info["started"])


def test_git_commit_is_the_checkout_head_or_none():
    here = Path(provenance.__file__).parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        head = None
    expected = head.stdout.strip() if head is not None and head.returncode == 0 else None
    assert provenance.git_commit() == expected
    if expected is not None:
        assert re.fullmatch(r"[0-9a-f]{40}", expected)


def test_a_failing_git_gives_none_not_its_output(monkeypatch):
    """``git rev-parse HEAD`` in a repository without commits prints "HEAD" and fails: no commit."""
    done = subprocess.CompletedProcess(["git"], 128, stdout="HEAD\n", stderr="fatal: ambiguous argument 'HEAD'")
    monkeypatch.setattr(provenance.subprocess, "run", lambda *a, **k: done)
    assert provenance.git_commit() is None
    monkeypatch.setattr(provenance.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(FileNotFoundError("git")))
    assert provenance.git_commit() is None
