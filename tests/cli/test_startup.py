"""Start-up: the CLI's help imports none of the heavy libraries (measured by benchmarks/bench_startup.py)."""

from __future__ import annotations

import subprocess
import sys


def test_help_imports_no_torch_numpy_scipy_or_sklearn():
    code = ("import sys; sys.argv = ['robfair', '--help']\n"
            "from robfair.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'sklearn', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


def test_version_imports_no_torch_and_names_the_installed_torch():
    import importlib.metadata as md

    code = ("import sys; sys.argv = ['robfair', '--version']\n"
            "from robfair.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'numpy', 'scipy', 'sklearn', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[-1] == "[]"
    assert out[0].startswith("robfair ") and f"(torch {md.version('torch')}, Python " in out[0]


def test_training_package_names_resolve_lazily():
    import robfair.training as t

    assert callable(t.train) and t.Trainer.__name__ == "Trainer" and "pgd-at" in [m.name for m in t.METHODS]
    assert {"train", "Trainer", "METHODS", "TrainConfig"} <= set(dir(t))
