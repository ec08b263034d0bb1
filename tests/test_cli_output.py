"""How the CLI shows numbers to people: values rounded at their error bar's precision."""

from __future__ import annotations

import math

import pytest

from veil.cli_output import format_cell


@pytest.mark.parametrize(
    ("value", "bar", "shown"),
    [
        (3554.95, 189.2, "3,555 ± 189"),
        (49.19684, 0.0411, "49.197 ± 0.041"),
        (16189, 11.0, "16,189 ± 11"),
        (3005, 6.2, "3,005 ± 6"),
        (12, 0.37, "12 ± 0.37"),
        (2421.88, None, "2,421.88"),
        (1234567, None, "1,234,567"),
        ("North", None, "North"),
        (None, None, "—"),
        (math.nan, 3.0, "—"),
        (0.5, 0.0, "0.5"),
    ],
)
def test_values_are_rounded_where_their_error_bar_makes_digits_meaningless(
    value: object, bar: object, shown: str
) -> None:
    assert format_cell(value, bar) == shown
