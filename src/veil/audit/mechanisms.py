"""Black-box audits of a mechanism against its claimed (ε, δ), by sampling.

:func:`mechanism` runs a function (or, through :func:`command`, any program) many times on each
input of neighbouring pairs, and bounds its privacy loss from below with the split-sample,
Clopper–Pearson statistics of :mod:`veil.audit.query_stats` (DP-Sniper / DP-Auditorium style,
with Mironov's float-granularity reachability events). :func:`builtin` audits veil's own
mechanisms (:mod:`veil.mechanisms`) and adds their conformance check: every output lies
on the grid the mechanism claims.

Verdicts (exit codes 0/1/2):

- FAIL: on some pair the ε lower bound exceeds the claimed ε, or the δ lower bound at the claimed
  ε exceeds the claimed δ (each at ``confidence``: a correct mechanism FAILs with probability at
  most ``1 − confidence`` per pair — the false-alarm rate), or a conformance check failed.
- INCONCLUSIVE: the samples are too few for the claim to be tested meaningfully — the smallest
  violation they could show (:func:`veil.audit.query_stats.detectable`) exceeds twice ε.
- PASS: otherwise (no violation seen, and a violation of 2ε or more would have been seen with an
  event of probability 1/2).

Passing an audit does not prove privacy: it only fails to find a violation with these samples
and these events.
"""

from __future__ import annotations

import math
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.audit.fit import noise_fit
from veil.audit.histograms import Histogram, histogram
from veil.audit.query_stats import (
    EXIT_CODES,
    Bound,
    Verdict,
    binomial_lower,
    binomial_upper,
    detectable,
    epsilon_lower_bound,
)
from veil.errors import InvalidArgumentError
from veil.random import RandomSource

__all__ = [
    "BUILTINS",
    "NOT_PROOF",
    "MechanismAudit",
    "PairAudit",
    "builtin",
    "categorical_conformance",
    "command",
    "exponential_pmf",
    "mechanism",
]

NOT_PROOF = (
    "Passing an audit does not prove privacy: it only failed to find a violation with these "
    "samples and these events."
)
BUILTINS = (
    "laplace",
    "discrete_laplace",
    "gaussian",
    "discrete_gaussian",
    "exponential",
    "randomized_response",
)

# fn(x) -> one output, or fn(x, n) -> n outputs when batch=True
Mechanism = Callable[..., Any]
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class PairAudit:
    """The bound found on one neighbouring pair, with a text histogram of both sides."""

    a: Any
    b: Any
    bound: Bound
    histogram: Histogram | None

    def to_json(self) -> dict[str, Any]:
        return {
            "inputs": [repr(self.a), repr(self.b)],
            "epsilon_lower_bound": self.bound.epsilon,
            "delta_lower_bound": self.bound.delta,
            "event": self.bound.event,
            "p": self.bound.p,
            "q": self.bound.q,
            "samples_per_side": self.bound.samples,
            "histogram": None if self.histogram is None else self.histogram.to_json(),
        }


@dataclass(frozen=True)
class MechanismAudit:
    """The report of :func:`mechanism` (see the module docstring)."""

    name: str
    epsilon: float
    delta: float
    confidence: float
    samples: int
    pairs: tuple[PairAudit, ...]
    detectable: float
    verdict: Verdict
    failures: tuple[str, ...] = field(default=())
    conformance_alarm: float = 0.0  # the conformance checks' own false-alarm rate, in total

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def false_alarm_rate(self) -> float:
        """A bound on the chance a correct mechanism FAILs: 1 − confidence per pair for the ε/δ
        bounds (union bound), plus the conformance checks' rate."""
        return (1 - self.confidence) * len(self.pairs) + self.conformance_alarm

    def to_json(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "claimed": {"epsilon": self.epsilon, "delta": self.delta},
            "confidence": self.confidence,
            "false_alarm_rate": self.false_alarm_rate,
            "samples_per_side": self.samples,
            "smallest_detectable_epsilon": self.detectable,
            "pairs": [p.to_json() for p in self.pairs],
            "failures": list(self.failures),
            "verdict": self.verdict,
            "note": NOT_PROOF,
        }

    def lines(self) -> list[str]:
        out = [
            f"audit of {self.name}: claimed ε = {self.epsilon:g}, δ = {self.delta:g}",
            f"samples: {self.samples} per side per pair; confidence {self.confidence:g} "
            f"(false-alarm rate ≤ {self.false_alarm_rate:.3g} in all)",
            f"power: the smallest violation these samples could show: ε ≈ {self.detectable:.3g}",
        ]
        for p in self.pairs:
            out += [
                "",
                f"inputs {p.a!r} vs {p.b!r}: ε ≥ {p.bound.epsilon:.4g}, "
                f"δ ≥ {p.bound.delta:.3g} at ε = {self.epsilon:g}",
                f"  event: {p.bound.event} (frequency {p.bound.p:.4g} vs {p.bound.q:.4g})",
                *(p.histogram.lines() if p.histogram is not None else ()),
            ]
        out += [f"conformance failure: {f}" for f in self.failures]
        out += ["", f"verdict: {self.verdict}", NOT_PROOF]
        return out


CHUNKS = 16  # progress steps per side of a pair (a batch mechanism is drawn in this many calls)
MIN_CHUNK = 4096  # outputs drawn at once at least (fewer calls of a program or of numpy)


def _draw(
    fn: Mechanism, x: Any, n: int, batch: bool, tick: Callable[[int], None] | None = None
) -> NDArray[np.float64]:
    """``n`` outputs of ``fn`` on ``x``, in up to :data:`CHUNKS` parts of at least
    :data:`MIN_CHUNK`; ``tick(k)`` after each part of ``k`` outputs (the progress bar)."""
    step = max(MIN_CHUNK, math.ceil(n / CHUNKS))
    parts = []
    for start in range(0, n, step):
        k = min(step, n - start)
        raw = fn(x, k) if batch else [fn(x) for _ in range(k)]
        try:
            part = np.asarray(raw, dtype=float).reshape(-1)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"the mechanism's outputs must be numbers (or category codes), got {raw!r:.80}"
            ) from exc
        if part.size != k:
            raise InvalidArgumentError(f"asked the mechanism for {k} outputs, got {part.size}")
        parts.append(part)
        if tick is not None:
            tick(k)
    return np.concatenate(parts) if parts else np.zeros(0)


def _check_claim(epsilon: float, delta: float, samples: int, confidence: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidArgumentError(f"epsilon must be a positive number, got {epsilon!r}")
    if not 0 <= delta < 1:
        raise InvalidArgumentError(f"delta must be in [0, 1), got {delta!r}")
    if samples < 8:
        raise InvalidArgumentError(f"samples must be at least 8 per side, got {samples}")
    if not 0 < confidence < 1:
        raise InvalidArgumentError(f"confidence must be in (0, 1), got {confidence!r}")


def mechanism(
    fn: Mechanism,
    *,
    neighbours: Sequence[tuple[Any, Any]] = ((0, 1),),
    epsilon: float,
    delta: float = 0.0,
    samples: int = 100_000,
    confidence: float = 0.95,
    batch: bool = False,
    name: str = "mechanism",
    conformance: Callable[[Any, NDArray[np.float64]], str | None] | None = None,
    conformance_alarm: float = 0.0,
    progress: Progress | None = None,
) -> MechanismAudit:
    """Audit ``fn`` against the claim that it is (``epsilon``, ``delta``)-DP on each pair of
    ``neighbours``: ``samples`` outputs per input (``fn(x)`` each, or ``fn(x, n)`` returning
    ``n`` outputs when ``batch``), an ε and δ lower bound per pair, a verdict (module docstring).

    ``conformance(input, outputs)`` may return the description of a failed check (e.g. an output off
    the claimed grid), which FAILs the audit whatever the bounds say; ``conformance_alarm`` is
    the total false-alarm rate of those checks.
    Postcondition: a correct mechanism FAILs with probability at most
    ``len(neighbours)·(1 − confidence) + conformance_alarm`` (the report's false-alarm rate).
    """
    _check_claim(epsilon, delta, samples, confidence)
    if not neighbours:
        raise InvalidArgumentError("give at least one neighbouring pair: neighbours=[(0, 1)]")
    pairs, failures = [], []
    drawn, total = [0], 2 * samples * len(neighbours)

    def tick(k: int) -> None:
        drawn[0] += k
        if progress is not None:
            progress(drawn[0], total)

    for a, b in neighbours:
        x = _draw(fn, a, samples, batch, tick)
        y = _draw(fn, b, samples, batch, tick)
        for side, out in ((a, x), (b, y)):
            problem = conformance(side, out) if conformance is not None else None
            if problem is not None:
                failures.append(f"input {side!r}: {problem}")
        bound = epsilon_lower_bound(x, y, epsilon=epsilon, delta=delta, confidence=confidence)
        pairs.append(PairAudit(a, b, bound, histogram(x, y)))
    power = detectable(epsilon, samples, confidence)
    violated = any(p.bound.epsilon > epsilon or p.bound.delta > delta for p in pairs)
    verdict: Verdict = (
        "FAIL" if violated or failures else "INCONCLUSIVE" if power > 2 * epsilon else "PASS"
    )
    return MechanismAudit(
        name, epsilon, delta, confidence, samples, tuple(pairs), power, verdict, tuple(failures),
        conformance_alarm if conformance is not None else 0.0,
    )  # fmt: skip


# ----------------------------------------------------------------------- conformance


def exponential_pmf(scores: Sequence[float], epsilon: float, sensitivity: float) -> list[float]:
    """The exponential mechanism's claimed pmf: ∝ exp(ε·score/(2Δ)), computed stably."""
    top = max(scores)
    weights = [math.exp(epsilon * (s - top) / (2 * sensitivity)) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def categorical_conformance(
    codes: NDArray[np.float64], pmf: Sequence[float], confidence: float
) -> str | None:
    """Whether category codes 0..k−1 follow ``pmf``: each category's frequency is tested with a
    two-sided exact Clopper–Pearson interval at confidence ``1 − (1 − confidence)/(2k)``
    (Bonferroni over 2k one-sided bounds), so a conforming sampler fails with probability at
    most ``1 − confidence``. Returns the failed check, or None."""
    k, n = len(pmf), len(codes)
    off = np.flatnonzero((codes != np.round(codes)) | (codes < 0) | (codes >= k))
    if off.size:
        return f"output {codes[off[0]]!r} is not a category code 0..{k - 1}"
    each = 1 - (1 - confidence) / (2 * k)
    for i, p in enumerate(pmf):
        hits = int((codes == i).sum())
        lo, hi = binomial_lower(hits, n, each), binomial_upper(hits, n, each)
        if not lo <= p <= hi:
            return (
                f"category {i} came out {hits / n:.4f} of the time, the claimed pmf says {p:.4f} "
                f"(exact {confidence:g} interval [{lo:.4f}, {hi:.4f}]): the outputs do not "
                "follow the claimed distribution"
            )
    return None


# ----------------------------------------------------------------------- veil's mechanisms


def _on_grid(k: int) -> Callable[[Any, NDArray[np.float64]], str | None]:
    """The reachability check of a grid mechanism: every output is a multiple of 2^k."""
    step = math.ldexp(1.0, k)

    def check(_: Any, out: NDArray[np.float64]) -> str | None:
        off = np.flatnonzero(~np.isfinite(out) | (np.mod(out, step) != 0))
        if off.size:
            return f"{off.size} outputs off the claimed grid 2^{k} (first: {out[off[0]]!r})"
        return None

    return check


def _noise_pmf(gaussian: bool, noise_scale: Fraction) -> tuple[Any, float]:
    """The exact pmf (as floats) of veil's integer noise and its scale: discrete Laplace of
    scale t, P(k) = (1 − r)/(1 + r)·r^|k| with r = e^{−1/t}; discrete Gaussian of variance
    parameter σ², P(k) ∝ e^{−k²/(2σ²)} normalised over ±(40σ + 10) (the rest is < 1e-300)."""
    if not gaussian:
        t = float(noise_scale)
        r = math.exp(-1 / t)
        return (lambda k: (1 - r) / (1 + r) * r ** np.abs(k)), t
    sigma = math.sqrt(float(noise_scale))
    reach = int(40 * sigma + 10)
    z = float(np.exp(-(np.arange(-reach, reach + 1, dtype=float) ** 2) / (2 * sigma**2)).sum())
    return (lambda k: np.exp(-(np.asarray(k, dtype=float) ** 2) / (2 * sigma**2)) / z), sigma


def builtin(
    name: str,
    *,
    epsilon: float,
    delta: float = 0.0,
    sensitivity: float = 1.0,
    samples: int = 100_000,
    confidence: float = 0.95,
    source: RandomSource | None = None,
    progress: Progress | None = None,
) -> MechanismAudit:
    """Audit veil's mechanism ``name`` (one of :data:`BUILTINS`) at its claimed parameters, on
    the neighbouring inputs 0 and ``sensitivity`` (additive mechanisms), scores
    ``[0, Δ, 2Δ]`` against ``[Δ, 0, 2Δ]`` (exponential: each score moves by Δ) and categories
    0 and 1 of three (randomized response).

    The additive mechanisms are run once per input through :mod:`veil.mechanisms` — the
    real calibration, grid and checks — and the ``samples`` releases are then drawn as that
    release's own noise (the same exact sampler at the same scale, one batch), so 10⁶ releases
    take a second; the exponential mechanism is called once per release.
    """
    from veil import mechanisms as mech
    from veil.noise import samplers
    from veil.noise.grid import from_grid, to_grid

    _check_claim(epsilon, delta, samples, confidence)
    if name not in BUILTINS:
        raise InvalidArgumentError(f"unknown mechanism {name!r}; choose one of {list(BUILTINS)}")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise InvalidArgumentError(f"sensitivity must be a positive number, got {sensitivity!r}")
    gaussian = name in ("gaussian", "discrete_gaussian")
    if gaussian and delta <= 0:
        raise InvalidArgumentError(f"the {name} mechanism needs --delta (e.g. 1e-6)")
    if not gaussian and delta:
        raise InvalidArgumentError(f"the {name} mechanism is pure ε-DP: drop --delta")
    sens = Fraction(sensitivity)
    conformance = None
    label = f"veil {name}"

    if name == "exponential":

        def choose(x: tuple[int, ...]) -> int:
            return int(mech.exponential(list(x), sensitivity=sens, epsilon=epsilon, source=source))

        d = int(sensitivity) if sensitivity == int(sensitivity) else sensitivity
        pair = ((0, d, 2 * d), (d, 0, 2 * d))

        def follows(x: tuple[int, ...], out: NDArray[np.float64]) -> str | None:
            pmf = exponential_pmf(x, epsilon, sensitivity)
            return categorical_conformance(out, pmf, 1 - (1 - confidence) / 4)

        return mechanism(
            choose, neighbours=[pair], epsilon=epsilon, samples=samples,
            confidence=confidence, name=label, conformance=follows,
            conformance_alarm=(1 - confidence) / 2, progress=progress,
        )  # fmt: skip
    if name == "randomized_response":

        def respond(x: int, n: int) -> Any:
            values = np.full(n, x, dtype=np.int64)
            rel = mech.randomized_response(
                values, categories=[0, 1, 2], epsilon=epsilon, source=source
            )
            return rel.value.astype(float)

        return mechanism(
            respond, neighbours=[(0, 1)], epsilon=epsilon, samples=samples,
            confidence=confidence, batch=True, name=label, progress=progress,
        )  # fmt: skip

    kwargs: dict[str, Any] = (
        {"epsilon": epsilon, "delta": delta} if gaussian else {"epsilon": epsilon}
    )
    release = getattr(mech, name)

    def run(x: Any, n: int) -> NDArray[np.float64]:
        rel = release(x, sensitivity=sens, source=source, **kwargs)
        scale = rel.noise_scale
        draw = samplers.discrete_gaussian if gaussian else samplers.discrete_laplace
        noise = draw(scale, n, source=source)
        if rel.grid is None:
            return (int(x) + noise).astype(float)
        units = to_grid(np.asarray([x], dtype=float), rel.grid)
        return np.asarray(from_grid(units + noise, rel.grid), dtype=float)

    integer = name.startswith("discrete")
    inputs: tuple[Any, Any] = (0, int(sensitivity)) if integer else (0.0, float(sensitivity))
    if integer and sensitivity != int(sensitivity):
        raise InvalidArgumentError(f"{name} needs an integer sensitivity, got {sensitivity!r}")
    probe = release(inputs[0], sensitivity=sens, source=source, **kwargs)
    on_grid = _on_grid(int(probe.grid)) if probe.grid is not None else None
    step = math.ldexp(1.0, probe.grid) if probe.grid is not None else 1.0
    pmf, scale = _noise_pmf(gaussian, Fraction(probe.noise_scale))
    check_level = 1 - (1 - confidence) / 4  # per input: α/2 for the two conformance checks

    def conforms(x: Any, out: NDArray[np.float64]) -> str | None:
        """The grid (reachability), then the noise in grid units against its exact pmf."""
        problem = on_grid(x, out) if on_grid is not None else None
        if problem is not None:
            return problem
        units = to_grid(np.asarray([x], dtype=float), probe.grid)[0] if probe.grid else int(x)
        noise = np.round(out / step).astype(np.int64) - int(units)
        return noise_fit(noise, pmf, scale, check_level)

    conformance = conforms
    return mechanism(
        run, neighbours=[inputs], epsilon=epsilon, delta=delta, samples=samples,
        confidence=confidence, batch=True, name=label, conformance=conformance,
        conformance_alarm=(1 - confidence) / 2, progress=progress,
    )  # fmt: skip


# ----------------------------------------------------------------------- black-box programs


def _parse_lines(text: str, argv: Sequence[str]) -> list[float]:
    out = []
    for line in text.split():
        try:
            out.append(float(line))
        except ValueError:
            raise InvalidArgumentError(
                f"the program {shlex.join(argv)!r} printed {line!r:.60}, not a number; "
                "it must print one number per line"
            ) from None
    return out


def command(
    argv: Sequence[str],
    *,
    neighbours: Sequence[tuple[str, str]] = (("0", "1"),),
    epsilon: float,
    delta: float = 0.0,
    samples: int = 10_000,
    confidence: float = 0.95,
    timeout: float = 600.0,
    claim_scores: Sequence[float] | None = None,
    sensitivity: float = 1.0,
    progress: Progress | None = None,
) -> MechanismAudit:
    """Audit a program: ``argv`` with ``{input}`` replaced by one neighbouring input. The batch
    convention: when ``argv`` also holds ``{count}``, it is replaced by the number of outputs
    wanted and the program prints that many numbers, one per line, in one run; otherwise it is
    run once per output and prints one number. Category outputs are printed as their codes.

    ``claim_scores``: the program claims to be the exponential mechanism over these scores
    (``{input}`` is then the scores, comma-separated, and each output the chosen index); its
    outputs are also tested against that pmf (:func:`categorical_conformance`), and the
    neighbours default to the scores and the scores with the first one lowered by
    ``sensitivity``.
    """
    if not any("{input}" in arg for arg in argv):
        raise InvalidArgumentError(
            "the command must hold the placeholder {input} where the input goes, "
            "e.g. veil audit command --epsilon 1 -- php noise.php {input}"
        )
    batch = any("{count}" in arg for arg in argv)

    def run(x: str, n: int = 1) -> list[float]:
        args = [a.replace("{input}", str(x)).replace("{count}", str(n)) for a in argv]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InvalidArgumentError(f"could not run {shlex.join(args)!r}: {exc}") from exc
        if done.returncode != 0:
            raise InvalidArgumentError(
                f"{shlex.join(args)!r} exited with {done.returncode}: {done.stderr.strip():.200}"
            )
        values = _parse_lines(done.stdout, args)
        return values

    def one(x: str) -> float:
        values = run(x)
        if len(values) != 1:
            raise InvalidArgumentError(
                f"without {{count}} the program must print exactly one number, got {len(values)}"
            )
        return values[0]

    fn: Mechanism = run if batch else one
    conformance = None
    if claim_scores is not None:
        scores = [float(v) for v in claim_scores]
        if len(scores) < 2:
            raise InvalidArgumentError(f"give at least two scores, got {claim_scores!r}")
        lowered = [scores[0] - sensitivity, *scores[1:]]
        neighbours = [(",".join(f"{v:g}" for v in scores), ",".join(f"{v:g}" for v in lowered))]

        def follows(x: str, out: NDArray[np.float64]) -> str | None:
            pmf = exponential_pmf([float(v) for v in x.split(",")], epsilon, sensitivity)
            return categorical_conformance(out, pmf, 1 - (1 - confidence) / 4)

        conformance = follows
    return mechanism(
        fn, neighbours=neighbours, epsilon=epsilon, delta=delta, samples=samples,
        confidence=confidence, batch=batch, name=shlex.join(argv), conformance=conformance,
        conformance_alarm=(1 - confidence) / 2 if conformance is not None else 0.0,
        progress=progress,
    )  # fmt: skip
