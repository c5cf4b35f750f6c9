"""robfair.errors.one_line: the one converter from a pydantic ValidationError to a one-line message, as
the training config, method options and study files use it."""

from __future__ import annotations

from typing import Union

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from robfair.errors import ConfigError, one_line


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    attacks: list[str] = []
    eps: float = 0.1


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = "x"
    per_class: Union[int, float] = 10
    epochs: int = Field(1, ge=1)
    grid: dict[str, list[int]] = {}
    audit: Inner = Inner()


def _msg(data, **kw):
    with pytest.raises(ValidationError) as e:
        Outer(**data)
    return one_line(e.value, Outer, **kw)


def test_unknown_keys_name_the_nested_model_and_a_close_match():
    assert _msg({"epoch": 2}) == ("unknown config key 'epoch'; did you mean 'epochs'? valid keys: name, per_class, "
                                  "epochs, grid, audit")
    assert _msg({"audit": {"atacks": []}}, unknown="unknown key '{key}'", valid="valid keys here") == (
        "unknown key 'audit.atacks'; did you mean 'attacks'? valid keys here: attacks, eps")
    assert _msg({"zzz": 1}).endswith("'zzz'; valid keys: name, per_class, epochs, grid, audit")  # no close match


def test_bad_values_name_the_key_the_input_and_the_fix():
    assert _msg({"epochs": 0}) == ("config key 'epochs' = 0 is invalid: Input should be greater than or equal to 1; "
                                   "fix 'epochs' in the config")
    # the union branch pydantic tried is not part of the key; a dict key and a list item are
    assert _msg({"per_class": "many"}).startswith("config key 'per_class' = 'many' is invalid")
    assert _msg({"grid": {"method": 3}}).startswith("config key 'grid.method' = 3 is invalid")
    assert _msg({"audit": {"eps": "x"}}, invalid="key '{key}'", fix="fix it in the study file").startswith(
        "key 'audit.eps' = 'x' is invalid")
    assert "\n" not in _msg({"epochs": 0}) and str(ConfigError(_msg({"epochs": 0}))).count("fix") == 1
