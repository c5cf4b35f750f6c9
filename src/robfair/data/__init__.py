"""Datasets as tensors: ``load_dataset("cifar10:~/data", split="test")`` -> :class:`Dataset`.

``robfair datasets`` (``describe_datasets()``) lists the names, default locations and formats.
Every format reads local files only; nothing is downloaded.

Every module of this package is imported here, so a new dataset is one new file whose loader is
decorated with ``@register_dataset("name", help=..., location=..., formats=...)``.
"""

from __future__ import annotations

from ..registry import import_submodules
from .augment import random_crop_flip
from .dataset import Dataset, stratified_split
from .coerce import as_dataset, check_class_order, class_order, parse_class_map, subsample, with_class_order
from .loading import (DATASETS, DatasetInfo, data_home, describe_datasets, load_dataset, register_dataset,
                       split_options, with_options)

import_submodules(__name__, __path__)

__all__ = [
    "DATASETS",
    "as_dataset",
    "check_class_order",
    "class_order",
    "parse_class_map",
    "random_crop_flip",
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
