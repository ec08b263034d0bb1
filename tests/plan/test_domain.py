"""Declared domains written a column at a time (veil.plan.domain) and the fingerprints that
splice them in: byte for byte the canonical form's JSON, as written value by value."""

from __future__ import annotations

import hashlib
import json

import pytest

from veil.plan import Aggregate, AggregateCall, Field, GroupKey, Scan, canonical, fingerprint
from veil.plan.canonical import measurement_fingerprint
from veil.plan.domain import MEMO_SIZE, domain_digest, domain_json, int64_values
from veil.plan.nodes import KeyValue

INTS = [*range(-5, 200_000, 3), 2**63 - 1, -(2**63)]
TEXTS = [*(f"s{i}é" for i in range(100_000)), "", "\u2028", "x\x7f"]


def plan(domain: list[KeyValue], kind: str = "integer", column: str = "k") -> Aggregate:
    return Aggregate(
        Scan("t", (Field("user_id", "integer"), Field(column, kind))),
        keys=(GroupKey(column, domain=tuple(domain)),),
        aggregates=(AggregateCall("n", "count"),),
        privacy_unit="user_id",
    )


def value_by_value(domain: tuple[KeyValue, ...]) -> bytes:
    typed = [[type(v).__name__, v] for v in domain]
    return json.dumps(typed, separators=(",", ":"), ensure_ascii=False).encode()


def canonical_sha256(p: Aggregate) -> str:
    """The fingerprint's definition: the SHA-256 of the canonical form's sorted JSON."""
    text = json.dumps(canonical(p), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


DOMAINS: dict[str, tuple[list[KeyValue], str]] = {
    "64-bit ints": (INTS, "integer"),
    "an int beyond 64 bits": ([1, 2**64], "integer"),
    "texts": (TEXTS, "string"),
    "texts JSON escapes": (['a"b', "c\\d", "e\n", "f\x00"], "string"),
    "mixed": ([1, 1.5, "1", None], "integer"),
    "floats": ([0.0, -0.5, 2.0, float("inf"), float("nan")], "real"),
    "booleans": ([True, False], "boolean"),
    "one int": ([7], "integer"),
}


@pytest.mark.parametrize("name", list(DOMAINS))
def test_a_domain_is_written_as_json_writes_it_value_by_value(name: str) -> None:
    domain = tuple(DOMAINS[name][0])
    assert domain_json(domain) == value_by_value(domain)


@pytest.mark.parametrize("name", list(DOMAINS))
def test_the_fingerprint_of_a_domain_is_the_sha256_of_the_canonical_json(name: str) -> None:
    domain, kind = DOMAINS[name]
    assert fingerprint(plan(domain, kind)) == canonical_sha256(plan(domain, kind))


def test_fingerprints_of_large_domains_are_those_of_the_value_by_value_release() -> None:
    # computed by the release that wrote every value through json.dumps (veil at 76e194c):
    # the cache keys of answers it committed still find them, in any process
    ints, texts = plan(INTS), plan(TEXTS, "string")
    assert fingerprint(ints) == "3c47c864354e1a86d2982b644b9b32a03aa52b48322b7e3598458f22821fa074"
    assert (
        measurement_fingerprint(ints)
        == "0669caf9a7a04407f17ea2ea6a5f9d020b79ca3492d11d378c0ed66dc3dbc14c"
    )
    assert fingerprint(texts) == "125250a8247d7023b934184b366c467f8d579eddd09d724b40331466524dfa46"
    assert (
        measurement_fingerprint(texts)
        == "cffab5f9a2548d88597965ef62304e51e5b17609c0a6ab24ce41bb63cf72feb6"
    )


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ([1, 2], [True, 2]),
        ([1, 2], [1.0, 2]),
        ([True, 2], [1.0, 2]),
        ([0.0, 1.5], [-0.0, 1.5]),
        ([1, 2], ["1", "2"]),
        ([1, 2], [2, 1]),
        (INTS, [*INTS[:-1], 2**63]),
    ],
)
def test_domains_that_differ_have_different_fingerprints(
    one: list[KeyValue], other: list[KeyValue]
) -> None:
    assert fingerprint(plan(one)) != fingerprint(plan(other))
    assert measurement_fingerprint(plan(one)) != measurement_fingerprint(plan(other))


def test_equal_domains_in_different_objects_have_one_fingerprint() -> None:
    assert fingerprint(plan(list(INTS))) == fingerprint(plan(list(INTS)))
    assert measurement_fingerprint(plan(TEXTS, "string")) == measurement_fingerprint(
        plan(list(TEXTS), "string")
    )


def test_zero_and_negative_zero_are_written_apart_though_they_compare_equal() -> None:
    zero, negative = (0.0, 1.5), (-0.0, 1.5)
    assert zero == negative
    assert domain_json(zero) == b'[["float",0.0],["float",1.5]]'
    assert domain_json(negative) == b'[["float",-0.0],["float",1.5]]'
    assert domain_json(zero) == b'[["float",0.0],["float",1.5]]'  # remembered by object


def test_a_name_like_the_placeholder_falls_back_to_the_whole_form() -> None:
    p = plan([1, 2], column="<veil: the JSON of declared domain 0>")
    assert fingerprint(p) == canonical_sha256(p)


def test_two_declared_domains_are_each_spliced_in_place() -> None:
    p = Aggregate(
        Scan("t", (Field("user_id", "integer"), Field("a", "integer"), Field("b", "string"))),
        keys=(GroupKey("b", domain=tuple(TEXTS)), GroupKey("a", domain=tuple(INTS))),
        aggregates=(AggregateCall("n", "count"),),
        privacy_unit="user_id",
    )
    assert fingerprint(p) == canonical_sha256(p)


def test_int64_values_are_the_ints_of_a_domain_of_64_bit_ints_only() -> None:
    assert int64_values((3, -2)).tolist() == [3, -2]  # type: ignore[union-attr]
    assert int64_values((True, 2)) is None  # a boolean is its own key
    assert int64_values((1.0, 2)) is None
    assert int64_values((1, 2**63)) is None


def test_the_memo_forgets_the_least_recent_domains_and_still_answers() -> None:
    domains = [tuple(range(i, i + 3)) for i in range(MEMO_SIZE + 2)]
    written = [domain_json(d) for d in domains]
    assert [domain_json(d) for d in domains] == written == [value_by_value(d) for d in domains]


def test_the_digest_of_a_domain_tells_apart_what_compares_equal() -> None:
    digests = {domain_digest(d) for d in ((1, 2), (True, 2), (1.0, 2), (0.0, 2), (-0.0, 2))}
    assert len(digests) == 5
    assert domain_digest(tuple(INTS)) == domain_digest(tuple(INTS))
    assert domain_digest((1, 2)) == hashlib.sha256(b'[["int",1],["int",2]]').digest()
