"""Fixtures of the report tests (helpers live in reportkit.py)."""

import pytest


@pytest.fixture
def evil_classes():
    return ["<script>alert(1)</script>", "cat & dog", "$x^2$", "ok"]
