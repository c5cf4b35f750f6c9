"""Where a result came from: package versions, the git commit of the code, the device.

    info = run_info(device, world_size)     # the ``run_info`` block of a run's config.yaml

Read-only facts about the environment, gathered once when a run starts; nothing here changes it.
"""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import __version__


def git_commit() -> str | None:
    """The commit of the robfair source tree in use, or None (not a git checkout, no git, timeout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def versions() -> dict[str, str]:
    """robfair's, torch's, numpy's and Python's versions."""
    return {"robfair": __version__, "torch": str(torch.__version__), "numpy": str(np.__version__),
            "python": platform.python_version()}


def run_info(device: torch.device, world_size: int) -> dict[str, Any]:
    """The provenance of a training run: versions, git commit, device, number of processes, start time."""
    return {
        "versions": versions(),
        "git_commit": git_commit(),
        "device": str(device),
        "world_size": world_size,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
