"""What :func:`robfair.audit` does with its inputs first: the data as a :class:`~robfair.data.Dataset`,
the model wrapped for its normalization, the labels in the model's class order.

It sits in the audit package because it needs both floors below it: the data's coercion
(:mod:`robfair.data.coerce`) and the models' normalization, class names and guarded forward.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from ..data import Dataset
from ..data.coerce import default_names, as_dataset, check_class_order, class_order, with_class_order
from ..errors import DataError
from ..models.parts import with_normalization
from ..models.sources import model_classes
from ..models.validate import guarded


def _widen_to_model(model: Any, ds: Dataset) -> Dataset:
    """Unnamed classes counted from the labels: a model with more outputs than the largest label + 1
    gets that many classes (classes absent from these samples are simply empty)."""
    try:
        dev = next(iter(model.parameters())).device
    except (StopIteration, AttributeError, RuntimeError):
        dev = torch.device("cpu")
    was_training = model.training
    model.eval()  # never a train-mode forward: it would update BatchNorm statistics
    try:
        with torch.no_grad():
            out = guarded(model)(ds.images(slice(0, 1)).to(dev))
        k = int(out.shape[-1]) if isinstance(out, torch.Tensor) and out.ndim == 2 else ds.num_classes
    except (Exception, SystemExit):  # noqa: BLE001 - the audit's own model check names what the model did
        return ds
    finally:
        model.train(was_training)
    if k <= ds.num_classes:
        return ds
    return Dataset(x=ds.x, y=ds.y, classes=[str(i) for i in range(k)], g=ds.g, groups=ds.groups, name=ds.name)


def audit_inputs(model: Any, data: Any, *, mean: Any = None, std: Any = None,
                 classes: Sequence[str] | None = None) -> tuple[Any, Dataset]:
    """What :func:`robfair.audit` does first: ``data`` as a :class:`Dataset` (:func:`as_dataset`),
    ``model`` wrapped in ``Normalized`` when ``mean``/``std`` (or a preset name) are given, and the
    labels put in the model's class order: ``classes`` states that order (labels are re-indexed by
    name); without it, class names stored with the model must equal the dataset's."""
    if isinstance(data, Dataset) and len(data) == 0:
        raise DataError("the dataset is empty; check the path and the split")
    ds = as_dataset(data, classes=None if isinstance(data, Dataset) else classes)
    model = with_normalization(model, mean, std, channels=ds.in_shape[0])
    if not isinstance(data, Dataset) and classes is None and default_names(ds.classes):
        ds = _widen_to_model(model, ds)
    if classes is not None:
        ds = with_class_order(ds, list(classes))
    else:
        check_class_order(model_classes(model), ds.classes)
    return model, ds


def audit_class_order(model: Any, ds: Dataset, classes: Sequence[str] | None) -> dict[str, Any]:
    """:func:`class_order` of an audit after :func:`audit_inputs` (``classes``: what the caller passed)."""
    return class_order(model_classes(model), ds.classes, stated=classes is not None)
