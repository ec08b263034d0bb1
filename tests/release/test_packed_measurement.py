"""The packed cached measurement (issue 15): a long column of 64-bit ints is written as its
bytes in base64 (``PACKED_FORMAT``), read back exactly, decided by the values alone; shorter
columns and other values stay the JSON lists of ``FORMAT`` / ``PRODUCT_FORMAT``, and a packed
column that is not one of its rows at a known width is not served."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pytest

from veil.release.measured import FORMAT, PACKED_FORMAT, PACKED_ROWS, PRODUCT_FORMAT, Measured

N = PACKED_ROWS


def _through_json(m: Measured) -> dict[str, Any]:
    """``m``'s form as the ledger stores and reads it (sorted JSON text)."""
    form: dict[str, Any] = json.loads(json.dumps(m.to_json(), sort_keys=True))
    return form


def _every_index(size: int, counts: Any) -> Measured:
    return Measured.of_columns(size, [np.arange(size, dtype=np.int64)], {"count": counts})


@pytest.mark.parametrize(
    ("low", "high", "width"),
    [
        (-128, 127, 1),
        (-129, 0, 2),
        (0, 128, 2),
        (-(2**15), 2**15 - 1, 2),
        (0, 2**15, 4),
        (-(2**31) - 1, 0, 8),
        (-(2**63), 2**63 - 1, 8),
    ],
)
def test_a_long_int_column_is_packed_at_the_narrowest_width_and_read_back_exactly(
    low: int, high: int, width: int
) -> None:
    counts = np.zeros(N, dtype=np.int64)
    counts[3], counts[-1] = low, high
    m = _every_index(N, counts)
    form = _through_json(m)
    assert form["veil_measured"] == PACKED_FORMAT
    assert form["keys"] == {"product": [N]}
    packed = form["stats"]["count"]
    assert packed["int"] == width
    assert len(base64.b64decode(packed["base64"])) == N * width
    back = Measured.from_json(form)
    assert back is not None
    assert back == m
    assert isinstance(back.stats["count"], np.ndarray)
    assert back.stats["count"].dtype == np.int64
    assert back.stats["count"].tolist() == counts.tolist()
    assert back.groups[3] == ((3,), {"count": low})
    assert back.groups[-1] == ((N - 1,), {"count": high})


def test_the_bytes_are_little_endian_twos_complement() -> None:
    counts = np.zeros(N, dtype=np.int64)
    counts[0], counts[1] = -2, 258
    data = base64.b64decode(_through_json(_every_index(N, counts))["stats"]["count"]["base64"])
    assert data[:4] == bytes([0xFE, 0xFF, 0x02, 0x01])


def test_columns_shorter_than_packed_rows_stay_lists_in_the_earlier_forms() -> None:
    short = _every_index(N - 1, np.arange(N - 1, dtype=np.int64))
    assert _through_json(short)["veil_measured"] == PRODUCT_FORMAT
    assert _through_json(short)["stats"]["count"] == list(range(N - 1))
    unknown = Measured.of_columns(N - 1, [[*range(1, N)]], {"count": [5] * (N - 1)})
    assert _through_json(unknown)["veil_measured"] == FORMAT


def test_the_packing_depends_on_the_values_not_on_their_container() -> None:
    counts = np.arange(N, dtype=np.int64) - 7
    bulk = _every_index(N, counts)
    by_group = Measured(bulk.groups)  # lists of Python ints
    as_objects = _every_index(N, counts.astype(object))  # a wide sum that fits after all
    assert bulk.to_json() == by_group.to_json() == as_objects.to_json()
    assert bulk == by_group == as_objects


@pytest.mark.parametrize(
    "odd", [None, 2**63, -(2**63) - 1], ids=["null", "beyond-64-bits", "below-64-bits"]
)
def test_a_statistic_with_another_value_stays_a_list_beside_packed_ones(odd: int | None) -> None:
    values = [*range(N - 1), odd]
    m = Measured.of_columns(
        N, [np.arange(N, dtype=np.int64)], {"count": np.arange(N, dtype=np.int64), "x": values}
    )
    form = _through_json(m)
    assert form["veil_measured"] == PACKED_FORMAT
    assert form["stats"]["x"] == values
    assert form["stats"]["count"]["int"] == 2
    back = Measured.from_json(form)
    assert back is not None
    assert back == m
    assert back.groups[-1][1] == ({"count": N - 1} if odd is None else {"count": N - 1, "x": odd})


@pytest.mark.parametrize(
    "odd",
    [None, True, 2**63, "3", 1.0],
    ids=["null", "bool", "beyond-64-bits", "text", "float"],
)
def test_a_key_column_with_another_value_stays_a_list(odd: object) -> None:
    keys = [*range(N - 1), odd]
    m = Measured.of_columns(N, [keys], {"count": np.arange(N, dtype=np.int64)})
    form = _through_json(m)
    assert form["veil_measured"] == PACKED_FORMAT
    assert form["keys"] == [keys]
    back = Measured.from_json(form)
    assert back is not None
    assert back == m
    assert back.groups[-1][0] == (odd,)
    assert type(back.groups[-1][0][0]) is type(odd)


def test_key_columns_of_ints_are_packed_and_other_keys_kept() -> None:
    ints = [i * 1000 - 5 for i in range(N)]  # an unknown int key's released values
    texts = [f"k{i}" for i in range(N)]
    m = Measured.of_columns(N, [ints, texts], {"count": [1] * N})
    form = _through_json(m)
    assert form["veil_measured"] == PACKED_FORMAT
    assert form["keys"][0]["int"] == 4
    assert form["keys"][1] == texts
    back = Measured.from_json(form)
    assert back is not None
    assert back == m
    assert back.groups[7] == ((6995, "k7"), {"count": 1})
    assert all(type(v) is int for v, _ in (g[0] for g in back.groups))


def _packed_form() -> dict[str, Any]:
    return _through_json(_every_index(N, np.arange(N, dtype=np.int64)))


def _with_count(**changes: Any) -> dict[str, Any]:
    form = _packed_form()
    form["stats"]["count"] = form["stats"]["count"] | changes
    return form


@pytest.mark.parametrize(
    "form",
    [
        _with_count(int=3),
        _with_count(int=True),
        _with_count(int=2.0),
        _with_count(int="2"),
        _with_count(int=1),  # the bytes of N two-byte values read as 2N one-byte values
        _with_count(base64=base64.b64encode(bytes(2 * N - 2)).decode()),
        _with_count(base64="not base64!"),
        _with_count(base64="é" * 8),
        _with_count(base64=None),
        _packed_form() | {"veil_measured": FORMAT},
        _packed_form() | {"veil_measured": PRODUCT_FORMAT},
        _packed_form() | {"rows": N + 1, "keys": {"product": [N + 1]}},
    ],
    ids=[
        "width-3", "width-bool", "width-float", "width-text", "wrong-width", "short",
        "not-base64", "not-ascii", "no-text", "in-format-2", "in-format-3", "other-rows",
    ],
)  # fmt: skip
def test_a_packed_column_not_of_its_rows_at_a_known_width_is_not_served(
    form: dict[str, Any],
) -> None:
    assert Measured.from_json(_packed_form()) is not None
    assert Measured.from_json(form) is None


def test_a_packed_key_column_that_does_not_read_is_not_served() -> None:
    m = Measured.of_columns(N, [list(range(0, 2 * N, 2))], {"count": [1] * N})
    form = _through_json(m)
    assert Measured.from_json(form) == m
    form["keys"][0]["int"] = 8
    assert Measured.from_json(form) is None
