"""The privacy parameters of a release outside a session (issue 9, the audit's gaps): ``perturb``
and the mechanisms hold ε to the range a query may spend, refuse noise their samplers cannot
draw or a double cannot hold — free, before the reservation — and take ``epsilon=`` as a
:class:`veil.Budget` as sessions do."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

import veil
from veil import mechanisms
from veil.accounting import even_split
from veil.errors import BoundsError, InvalidArgumentError

TABLE = pa.table({"x": [1.0, 2.0, 3.0], "c": ["a", "b", "a"]})
GRANT = veil.Budget(epsilon=10_000, delta="0.25")
BELOW = (
    r"outside the range one release may spend, \[1e-12, 1e4\]: below 1e-12 the noise is too large"
)
ABOVE = (
    r"outside the range one release may spend, \[1e-12, 1e4\]: above 1e4 the noise is negligible"
)


def ledger() -> veil.Ledger:
    led = veil.Ledger("sqlite://")
    led.grant("a", "d", GRANT)
    return led


def charges(led: veil.Ledger) -> list[object]:
    """Every charge event, whatever its status (a refunded reservation is one too)."""
    return [r for r in led.history("a", "d") if r.event == "charge"]


CALLS: list[tuple[str, Callable[..., object]]] = [
    ("laplace", lambda e, **c: mechanisms.laplace(1.5, sensitivity=1, epsilon=e, **c)),
    (
        "discrete_laplace",
        lambda e, **c: mechanisms.discrete_laplace(2, sensitivity=1, epsilon=e, **c),
    ),
    (
        "gaussian",
        lambda e, **c: mechanisms.gaussian(1.5, sensitivity=1, epsilon=e, delta=1e-6, **c),
    ),
    ("exponential", lambda e, **c: mechanisms.exponential([1, 2], sensitivity=1, epsilon=e, **c)),
    (
        "report_noisy_max",
        lambda e, **c: mechanisms.report_noisy_max([1, 2], sensitivity=1, epsilon=e, **c),
    ),
    (
        "randomized_response",
        lambda e, **c: mechanisms.randomized_response(["a"], categories=["a", "b"], epsilon=e, **c),
    ),
    (
        "object form",
        lambda e, **c: veil.LaplaceMechanism(epsilon=e, sensitivity=1).release(1.0, **c),
    ),
    ("perturb", lambda e, **c: veil.perturb(TABLE, epsilon=e, bounds={"x": (0, 10)}, **c)),
]


@pytest.mark.parametrize(("epsilon", "why"), [(1e-300, BELOW), (1e5, ABOVE)])
@pytest.mark.parametrize(("name", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_an_epsilon_outside_the_range_is_refused_before_the_reservation_with_its_side(
    name: str, call: Callable[..., object], epsilon: float, why: str
) -> None:
    led = ledger()
    with pytest.raises(InvalidArgumentError, match=why):
        call(epsilon, ledger=led, analyst="a", dataset="d")
    assert charges(led) == []  # nothing reserved, not even refunded
    assert led.remaining("a", "d") == GRANT


def test_a_query_s_epsilon_above_the_range_is_not_said_to_be_below_it() -> None:
    s = veil.Session.local({"t": TABLE}, budget=veil.Budget(epsilon=1))
    with pytest.raises(InvalidArgumentError, match="above 1e4 the noise is negligible") as info:
        s.sql("SELECT COUNT(*) FROM t", epsilon=1e5)
    assert "below" not in str(info.value)
    with pytest.raises(InvalidArgumentError, match="below 1e-12 the noise is too large"):
        s.sql("SELECT COUNT(*) FROM t", epsilon=1e-13)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (  # the grid 2^989: a noisy value beyond the largest double would come out as -inf
            lambda **c: mechanisms.laplace(1.0, sensitivity=1e300, epsilon=1e-10, **c),
            r"laplace: .*output grid 2\^989.*exceed the largest double.*±inf.*rescale the values",
        ),
        (
            lambda **c: mechanisms.gaussian(1.0, sensitivity=1e300, rho=1e-20, **c),
            r"gaussian: .*output grid 2\^\d+.*±inf",
        ),
        (  # five values at the smallest ε: a scale of 5.2e14 grid steps, beyond 2^48
            lambda **c: mechanisms.laplace([1.0] * 5, sensitivity=1, epsilon=1e-12, **c),
            r"laplace: noise of scale 5\.17e\+14 grid steps is beyond the 2\.81e\+14 the exact "
            "sampler draws",
        ),
        (
            lambda **c: mechanisms.discrete_laplace(1, sensitivity=1e20, epsilon=1, **c),
            r"discrete_laplace: noise of scale 1e\+20 grid steps is beyond",
        ),
        (
            lambda **c: mechanisms.discrete_gaussian(1, sensitivity=1e40, rho=1e-3, **c),
            r"discrete_gaussian: noise of σ² .* grid steps is beyond",
        ),
        (  # each of two columns gets 5e-13
            lambda **c: veil.perturb(
                TABLE, epsilon=1e-12, bounds={"x": (0, 10)}, categories={"c": ["a", "b"]}, **c
            ),
            r"epsilon=1e-12 split over 2 columns leaves each 5e-13, below 1e-12",
        ),
        (  # bounds whose output grid would reach ±inf are beyond the bounds' range first
            lambda **c: veil.perturb(TABLE, epsilon=1, bounds={"x": (0, 1e300)}, **c),
            r"bounds for 'x' are \(0, 1e\+300\): veil supports bounds within ±1e100",
        ),
    ],
)
def test_noise_the_sampler_or_a_double_cannot_hold_is_refused_free(
    call: Callable[..., object], message: str
) -> None:
    led = ledger()
    with pytest.raises((InvalidArgumentError, BoundsError), match=message):
        call(ledger=led, analyst="a", dataset="d")
    assert charges(led) == []
    assert led.remaining("a", "d") == GRANT


PURE = veil.Budget(epsilon="0.5")
PURE_CALLS = [c for c in CALLS if c[0] != "gaussian"]


@pytest.mark.parametrize(("name", "call"), PURE_CALLS, ids=[c[0] for c in PURE_CALLS])
def test_a_pure_mechanism_takes_a_pure_budget_as_epsilon_and_charges_it(
    name: str, call: Callable[..., object]
) -> None:
    led = ledger()
    call(PURE, ledger=led, analyst="a", dataset="d")
    (charge,) = charges(led)
    assert charge.loss == PURE  # type: ignore[attr-defined]
    assert charge.status == "committed"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "budget", [veil.Budget(epsilon=1, delta=1e-6), veil.Budget(rho="0.125")], ids=["approx", "zcdp"]
)
@pytest.mark.parametrize("fn", [mechanisms.gaussian, mechanisms.discrete_gaussian])
def test_the_gaussian_takes_an_approximate_or_zcdp_budget_as_epsilon(
    fn: Callable[..., mechanisms.Release], budget: veil.Budget
) -> None:
    led = ledger() if budget.kind == "approx" else veil.Ledger("sqlite://")
    if budget.kind == "zcdp":
        led.grant("a", "d", veil.Budget(rho=1))
    release = fn(3, sensitivity=1, epsilon=budget, ledger=led, analyst="a", dataset="d")
    assert release.loss == budget
    assert [c.loss for c in charges(led)] == [budget]  # type: ignore[attr-defined]
    numbers = {"rho": budget.rho} if budget.rho else {"epsilon": 1, "delta": 1e-6}
    twin = fn(3, sensitivity=1, **numbers)
    assert release.noise_scale == twin.noise_scale  # calibrated as from the numbers


def test_the_shares_even_split_returns_spend_through_a_mechanism() -> None:
    led = veil.Ledger("sqlite://")
    led.grant("a", "d", veil.Budget(epsilon=1))
    for part in even_split(veil.Budget(epsilon=1), 4):
        mechanisms.laplace(2.0, sensitivity=1, epsilon=part, ledger=led, analyst="a", dataset="d")
    assert led.remaining("a", "d") == veil.Budget(epsilon=0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: mechanisms.laplace(
                1.0, sensitivity=1, epsilon=veil.Budget(epsilon=1, delta=1e-6)
            ),
            r"laplace is pure ε-DP and spends no δ.*epsilon=budget\.eps.*or use gaussian",
        ),
        (
            lambda: mechanisms.exponential([1, 2], sensitivity=1, epsilon=veil.Budget(rho=1)),
            r"exponential is pure ε-DP, but epsilon=Budget\(rho=1\) is a zCDP budget",
        ),
        (
            lambda: mechanisms.gaussian(1.0, sensitivity=1, epsilon=veil.Budget(epsilon=1)),
            r"the Gaussian mechanism cannot satisfy pure ε-DP.*Budget\(rho=…\)",
        ),
        (
            lambda: mechanisms.gaussian(
                1.0, sensitivity=1, epsilon=veil.Budget(epsilon=1, delta=1e-6), delta=1e-7
            ),
            r"is a Budget, which carries its own delta",
        ),
        (
            lambda: veil.perturb(
                TABLE, epsilon=veil.Budget(epsilon=1, delta=1e-6), bounds={"x": (0, 10)}
            ),
            r"perturb is pure ε-DP and spends no δ.*δ stays unspent\)$",
        ),
    ],
)
def test_a_budget_of_a_kind_the_mechanism_cannot_spend_is_refused_saying_what_to_pass(
    call: Callable[[], object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        call()
