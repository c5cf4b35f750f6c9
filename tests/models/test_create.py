"""create(): the spec it attaches, the errors it raises, describe_models, check_model_data."""

from __future__ import annotations

import json

import pytest

from robfair.errors import ModelError
from robfair.models import MODELS, check_model_data, create, describe_models


def test_spec_is_plain_json_with_resolved_defaults():
    model = create("MLP", 4, (1, 8, 8), hidden=(16, 8), mean=0.5)
    spec = model.robfair_spec
    assert spec == {
        "name": "mlp",
        "num_classes": 4,
        "in_shape": [1, 8, 8],
        "kwargs": {"hidden": [16, 8], "dropout": 0.0},
        "mean": [0.5],
        "std": None,
    }
    assert json.loads(json.dumps(spec)) == spec
    # the spec rebuilds the same architecture
    again = create(spec["name"], spec["num_classes"], spec["in_shape"], mean=spec["mean"], **spec["kwargs"])
    assert [p.shape for p in again.parameters()] == [p.shape for p in model.parameters()]


def test_unknown_model_lists_valid_names_and_closest():
    with pytest.raises(ModelError, match=r"unknown model 'resnet18'.*did you mean 'preact-resnet18'.*choose one of:.*smallcnn"):
        create("resnet18", 10, (3, 32, 32))


def test_bad_kwarg_names_it_and_the_valid_ones():
    with pytest.raises(ModelError, match=r"model 'smallcnn' has no argument 'depth'; valid arguments: width, hidden"):
        create("smallcnn", 10, (3, 32, 32), depth=3)
    with pytest.raises(ModelError, match=r"no argument 'width'; valid arguments: none"):
        create("cifar-cnn", 10, (3, 32, 32), width=3)


def test_non_plain_kwarg_is_refused():
    with pytest.raises(ModelError, match="model argument 'hidden'"):
        create("mlp", 10, (1, 8, 8), hidden=[object()])


@pytest.mark.parametrize("k", [1, 0, 2.5, True, "10", None])
def test_bad_num_classes(k):
    with pytest.raises(ModelError, match="num_classes must be an integer >= 2"):
        create("mlp", k, (1, 8, 8))


@pytest.mark.parametrize("shape", [(3, 32), (0, 8, 8), (1, 8.0, 8), "abc", 32, (1, 8, 8, 1)])
def test_bad_in_shape(shape):
    with pytest.raises(ModelError, match=r"in_shape must be \(channels, height, width\)"):
        create("smallcnn", 10, shape)


def test_cifar_cnn_too_small_points_to_smallcnn():
    with pytest.raises(ModelError, match="use smallcnn"):
        create("cifar-cnn", 10, (3, 2, 2))


def test_describe_models_rows():
    rows = {r.name: r for r in describe_models()}
    assert set(rows) == set(MODELS.names())
    assert rows["wrn"].defaults == {"depth": 34, "widen": 10, "dropout": 0.0}
    assert rows["cifar-cnn"].defaults == {}
    name, description, defaults = rows["smallcnn"]
    assert description and defaults == {"width": 32, "hidden": 256}


def test_check_model_data():
    model = create("smallcnn", 10, (1, 8, 8))
    check_model_data(model, (1, 8, 8), 10)  # fits: no error
    with pytest.raises(ModelError, match=r"^model expects 1x8x8 images, dataset has 3x32x32; pick the matching --data or retrain$"):
        check_model_data(model, (3, 32, 32), 10)
    with pytest.raises(ModelError, match=r"model predicts 10 classes, dataset has 100; pick the matching --data or retrain"):
        check_model_data(model, [1, 8, 8], 100)
    # checkpoint meta works too
    with pytest.raises(ModelError, match="dataset has 3x32x32"):
        check_model_data({"spec": model.robfair_spec}, (3, 32, 32), 10)
