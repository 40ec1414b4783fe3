"""teleop.json_input: every malformed JSON input is a one-line ValueError (fuzzer findings)."""

from __future__ import annotations

import pytest

from teleop import json_input


@pytest.mark.parametrize("text, reason", [
    ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ("[" + "1" * 5000 + "]", "invalid JSON"),
    (b'{"a": "caf\xe9"}', "not UTF-8"),
    ("{", "invalid JSON"),
])
def test_loads_turns_every_failure_into_a_one_line_value_error(text, reason):
    with pytest.raises(ValueError, match=reason) as err:
        json_input.loads(text)
    assert type(err.value) is ValueError and "\n" not in str(err.value)


def test_loads_parses_good_json():
    assert json_input.loads(b'{"a": [1, 2.5]}') == {"a": [1, 2.5]}


@pytest.mark.parametrize("value", [10 ** 400, float("inf"), float("nan"), True, "1", None])
def test_finite_float_refuses_what_is_not_a_finite_number(value):
    with pytest.raises(ValueError, match="rate"):
        json_input.finite_float(value, "rate")


def test_finite_float_converts_numbers():
    assert json_input.finite_float(3, "x") == 3.0 and json_input.finite_float(-2.5) == -2.5
