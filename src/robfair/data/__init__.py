"""Datasets as tensors: ``load_dataset("cifar10:~/data", split="test")`` -> :class:`Dataset`.

``robfair datasets`` (``describe_datasets()``) lists the names, default locations and formats.
Every format reads local files only; nothing is downloaded.
"""

from __future__ import annotations

from . import celeba, cifar, cifar_jpeg, digits, idx, imagefolder, npz, svhn, utkface  # noqa: F401  (register the loaders)
from .base import Dataset, stratified_split
from .coerce import as_dataset, check_class_order, parse_class_map, subsample, with_class_order
from .registry import (DATASETS, DatasetInfo, data_home, describe_datasets, load_dataset, register_dataset,
                       split_options, with_options)

__all__ = [
    "DATASETS",
    "as_dataset",
    "check_class_order",
    "parse_class_map",
    "subsample",
    "with_class_order",
    "Dataset",
    "DatasetInfo",
    "data_home",
    "describe_datasets",
    "load_dataset",
    "register_dataset",
    "split_options",
    "stratified_split",
    "with_options",
]
