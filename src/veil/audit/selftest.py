"""``veil audit selftest``: check an installation — veil's mechanisms must PASS their audits and
the positive controls (known-broken mechanisms) must FAIL them.

Controls: numpy's float Laplace (reachability, Mironov 2012), an exact Laplace at 70 % of the
scale ε needs (the ε bound), a discrete Gaussian calibrated for ten times the claimed δ (the δ
bound), and — when ``php`` is on the PATH — the PHP seed's ``laplaceNoise`` (``rand()``, float
inverse CDF) and its inverted exponential mechanism (conformance), run as programs through
:func:`veil.audit.mechanisms.command`. The controls are samplers written to be wrong; the
``numpy`` one uses numpy's PRNG on purpose (it is the flaw being detected).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from veil.audit.mechanisms import BUILTINS, MechanismAudit, builtin, command, mechanism
from veil.errors import InternalError
from veil.random import RandomSource, system_source

__all__ = ["CONTROLS", "Check", "lines", "run"]

CONTROLS = Path(__file__).parent / "controls"

# A δ of 1e-2 claimed as 1e-3 shows only in the far tail: at 40 000 outputs per side the split-
# sample bound catches it 17 times in 20 (seeded runs), at 100 000 200 times in 200. The control
# always gets at least this many, so a small ``samples`` cannot turn it into a spurious PASS.
DELTA_CONTROL_SAMPLES = 100_000


@dataclass(frozen=True)
class Check:
    """One line of the selftest: what was audited, the verdict expected and the one found."""

    name: str
    expected: str
    audit: MechanismAudit | None  # None: skipped
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.audit is None or self.audit.verdict == self.expected


def float_laplace(samples: int, source: RandomSource | None = None) -> MechanismAudit:
    """``x + Laplace(1/ε)`` in numpy floats, by numpy's own formula (``Generator.laplace``:
    ``±b·log(2U)`` from a 53-bit uniform ``U``), the flaw the Python seed ships: must FAIL by
    reachability. The uniforms come from :mod:`veil.random` like every random bit veil reads;
    the flaw is the floating-point arithmetic, not the generator."""
    src = source if source is not None else system_source()

    def draw(x: float, n: int) -> np.ndarray:
        words = np.frombuffer(src.random_bytes(8 * n), dtype=np.uint64)
        u = ((words >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
        low = u < 0.5
        noise = np.where(low, np.log(2.0 * np.where(low, u, 0.25)), 0.0)
        noise -= np.where(low, 0.0, np.log(2.0 - 2.0 * np.where(low, 0.75, u)))
        return x + noise

    return mechanism(draw, epsilon=1.0, samples=samples, batch=True, name="numpy float laplace")


def laplace_70(samples: int, source: RandomSource | None = None) -> MechanismAudit:
    """An exact discrete Laplace at 70 % of the scale ε = 1 needs: must FAIL the ε bound."""
    from veil.noise import samplers

    return mechanism(
        lambda x, n: x + samplers.discrete_laplace(Fraction(7, 10), n, source=source),
        epsilon=1.0, samples=samples, batch=True, name="laplace at 70 % scale",
    )  # fmt: skip


def gaussian_10_delta(samples: int, source: RandomSource | None = None) -> MechanismAudit:
    """A discrete Gaussian calibrated for (1, 1e-2) claimed (1, 1e-3): must FAIL the δ bound."""
    from veil import mechanisms as mech
    from veil.noise import samplers

    sigma2 = mech.discrete_gaussian(
        0, sensitivity=1, epsilon=1, delta=1e-2, source=source
    ).noise_scale
    if sigma2 is None:
        raise InternalError("a discrete Gaussian release has no σ²: this is a bug")
    return mechanism(
        lambda x, n: x + samplers.discrete_gaussian(sigma2, n, source=source),
        epsilon=1.0, delta=1e-3, samples=samples, batch=True, name="gaussian with 10×δ",
    )  # fmt: skip


def wrapping_int64_sum(samples: int, source: RandomSource | None = None) -> MechanismAudit:
    """A SUM in numpy ``int64`` with correct noise that wraps on overflow, on the crafted
    neighbours that expose it (:mod:`veil.audit.query_controls`): must FAIL the ε bound."""
    from veil.audit.query_controls import overflow_pairs, wrapping_sum

    return mechanism(
        wrapping_sum(Fraction(1), source=source), neighbours=overflow_pairs(), epsilon=1.0,
        samples=samples, batch=True, name="int64 sum that wraps",
    )  # fmt: skip


def php_laplace(samples: int) -> MechanismAudit:
    """The PHP seed's ``laplaceNoise`` as a program: must FAIL (reachability)."""
    script = str(CONTROLS / "laplace_rand.php")
    return command(["php", script, "{input}", "{count}"], epsilon=1.0, samples=samples)


def php_exponential(samples: int) -> MechanismAudit:
    """The PHP seed's inverted exponential mechanism: must FAIL on conformance."""
    script = str(CONTROLS / "exponential_inverted.php")
    return command(
        ["php", script, "{input}", "{count}"], epsilon=1.0, samples=samples,
        claim_scores=[3.0, 2.0, 1.0],
    )  # fmt: skip


def run(
    samples: int = 200_000,
    *,
    source: RandomSource | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[Check]:
    """Every check, ``samples`` outputs per side (the exponential mechanism and the PHP
    programs, which draw one output per call or per line, use a fiftieth and a tenth, the
    wrapping sum a fiftieth; the δ control twice as many, at least ``DELTA_CONTROL_SAMPLES``).
    veil's mechanisms are audited at confidence 0.999 (a spurious FAIL at most 0.15 % each,
    bounds and conformance together), the controls at 0.95."""
    few, some = max(samples // 50, 1000), max(samples // 10, 1000)
    php = shutil.which("php") is not None
    plan: list[tuple[str, str, Callable[[], MechanismAudit] | None, str]] = []
    for name in BUILTINS:
        n = few if name == "exponential" else samples
        delta = 1e-6 if "gaussian" in name else 0.0

        def audit(name: str = name, n: int = n, delta: float = delta) -> MechanismAudit:
            return builtin(
                name, epsilon=1.0, delta=delta, samples=n, confidence=0.999, source=source
            )

        plan.append((f"veil {name}", "PASS", audit, ""))
    plan += [
        ("numpy float laplace", "FAIL", lambda: float_laplace(samples, source), ""),
        ("laplace at 70 % scale", "FAIL", lambda: laplace_70(samples, source), ""),
        (
            "gaussian with 10×δ",
            "FAIL",
            lambda: gaussian_10_delta(max(samples * 2, DELTA_CONTROL_SAMPLES), source),
            "",
        ),
        ("int64 sum that wraps", "FAIL", lambda: wrapping_int64_sum(few, source), ""),
    ]
    skip = "skipped: php is not on the PATH"
    plan += [
        ("php seed laplaceNoise", "FAIL", (lambda: php_laplace(some)) if php else None, skip),
        ("php seed exponential", "FAIL", (lambda: php_exponential(some)) if php else None, skip),
    ]
    checks = []
    for i, (name, expected, fn, note) in enumerate(plan):
        checks.append(Check(name, expected, fn() if fn is not None else None, note))
        if progress is not None:
            progress(i + 1, len(plan))
    return checks


def lines(checks: list[Check]) -> list[str]:
    """The selftest as a table, then its overall result."""
    out = [f"{'check':<24} {'expected':<9} {'verdict':<13} {'ε lower bound':>13}  notes"]
    for c in checks:
        if c.audit is None:
            out.append(f"{c.name:<24} {c.expected:<9} {'-':<13} {'-':>13}  {c.note}")
            continue
        eps = max(p.bound.epsilon for p in c.audit.pairs)
        why = "; ".join(c.audit.failures)[:70] or c.audit.pairs[0].bound.event
        mark = "" if c.ok else "  <-- UNEXPECTED"
        out.append(f"{c.name:<24} {c.expected:<9} {c.audit.verdict:<13} {eps:>13.4g}  {why}{mark}")
    bad = [c.name for c in checks if not c.ok]
    out += ["", "selftest: " + ("OK" if not bad else f"UNEXPECTED verdicts: {', '.join(bad)}")]
    out.append("Passing an audit does not prove privacy.")
    return out
