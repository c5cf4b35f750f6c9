import pytest
import torch


@pytest.fixture(scope="session")
def digits():
    from robfair.data import load_dataset

    return load_dataset("digits", "train")


@pytest.fixture(autouse=True)
def _few_threads():
    # the test machine is shared: keep each test on one thread (also makes CPU results reproducible)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
