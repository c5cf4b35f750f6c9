"""Shared test set-up: single-threaded torch (the CI machine has 2 cores; the tests are tiny)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import torch  # noqa: E402

torch.set_num_threads(1)
