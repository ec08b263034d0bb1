"""Noise drawn while the engine reads (issue 15): where every key is public, the additive noise
does not depend on the data, and ``Session.run`` draws it on a worker thread during the engine's
run (``veil.release.draw.draw_early``, ``veil._background``).

What must hold: the release is exactly the one drawn after the engine (the same draws, in the
same order, from the same source — on the bulk path and on the group-by-group one, with the
quantile choices drawn after); nothing is drawn early where the draws depend on the data; an
early draw that does not fit its measurement is an internal error; a failure of the draws, or
of the engine while they run, is the failure channel's (charged, withheld); and the worker
survives a fork and the interpreter's exit.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
import time
from fractions import Fraction
from functools import partial

import numpy as np
import pyarrow as pa
import pytest

import support
import veil
from support import SeededSource
from veil import _background
from veil.accounting import Budget
from veil.engines.fake import FakeEngine
from veil.errors import InternalError, SchemaError
from veil.plan import Aggregate, AggregateCall, ColumnBounds, Field, GroupKey, Scan, aggregate_of
from veil.release.draw import draw_early, early_draws, measure
from veil.release.exact import exact_stats

TABLE = Scan(
    "t",
    (Field("user_id", "integer"), Field("s", "string"), Field("a", "integer"), Field("x", "real")),
)


compiled = partial(support.compiled, table=TABLE, bounds=(ColumnBounds("x", 0, 10),))


COUNT_AVG = (AggregateCall("n", "count"), AggregateCall("m", "avg", "x"))
KEYS = (GroupKey("s", domain=("x", "y", "z")), GroupKey("a", domain=tuple(range(-20, 20))))


def engine_table(agg: Aggregate, rng: np.random.Generator) -> pa.Table:
    """Half of the product's groups, in a shuffled order, as an engine returns them."""
    every = [(s, a) for s in ("x", "y", "z") for a in range(-20, 20)]
    present = [every[i] for i in rng.permutation(len(every))[: len(every) // 2]]
    counts = [int(c) for c in rng.integers(1, 30, len(present))]
    data: dict[str, pa.Array] = {
        "__k0": pa.array([p[0] for p in present]),
        "__k1": pa.array([p[1] for p in present]),
        "__n": pa.array(counts, pa.int64()),
    }
    sums = [m for m in agg.measurements if m.statistic == "sum"]
    for i, m in enumerate(sums):
        values = [int(rng.integers(-c * m.limit, c * m.limit + 1)) for c in counts]
        data[f"__m{i}"] = pa.array(values, pa.decimal128(38, 0))
    return pa.table(data)


def statistic_columns(agg: Aggregate) -> dict[str, str]:
    sums = [m.name for m in agg.measurements if m.statistic == "sum"]
    return {"count": "__n", **{name: f"__m{i}" for i, name in enumerate(sums)}}


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "group by group"])
@pytest.mark.parametrize("budget", [Budget(epsilon=1), Budget(rho=Fraction(1, 2))])
def test_the_early_draws_release_what_drawing_after_the_engine_releases(
    bulk: bool, budget: Budget
) -> None:
    agg = compiled(KEYS, COUNT_AVG, budget)
    table = engine_table(agg, np.random.default_rng(4))
    stats = exact_stats(agg, table, statistic_columns(agg), ["__k0", "__k1"])
    exact = stats if bulk else {k: dict(v) for k, v in stats.items()}
    for seed in range(5):
        after, early = SeededSource(f"after-{seed}"), SeededSource(f"after-{seed}")
        drawn = draw_early(agg, early)
        assert drawn is not None
        assert early.bytes_drawn > 0  # drawn before the statistics are read
        expected = measure(agg, exact, {}, after, private=False)
        got = measure(agg, exact, {}, early, private=False, early=drawn)
        assert got == expected
        assert early.bytes_drawn == after.bytes_drawn  # nothing drawn twice, nothing skipped
        assert len(got.groups) == 120  # every public group, the empty ones too


def test_the_quantile_choices_are_drawn_after_the_early_noise_as_before() -> None:
    aggregates = (*COUNT_AVG, AggregateCall("q", "quantile", "x", quantile=Fraction(1, 2)))
    agg = compiled(KEYS[:1], aggregates, Budget(epsilon=1))
    draws = early_draws(agg)
    assert draws is not None
    assert {m.statistic for m, _ in draws} == {"count", "sum"}  # not the quantile's choice
    rng = np.random.default_rng(9)
    table = pa.table(
        {
            "__k0": pa.array(["y", "x"]),
            "__n": pa.array([5, 7], pa.int64()),
            **{
                col: pa.array([int(rng.integers(0, 40)), 3], pa.decimal128(38, 0))
                for name, col in statistic_columns(agg).items()
                if name != "count"
            },
        }
    )
    stats = exact_stats(agg, table, statistic_columns(agg), ["__k0"])
    after, early = SeededSource("quantile"), SeededSource("quantile")
    expected = measure(agg, stats, {}, after, private=False)
    got = measure(agg, stats, {}, early, private=False, early=draw_early(agg, early))
    assert got == expected
    assert early.bytes_drawn == after.bytes_drawn


def test_nothing_is_drawn_early_where_the_draws_depend_on_the_data() -> None:
    unknown = compiled((GroupKey("s"),), COUNT_AVG, Budget(epsilon=1, delta=Fraction(1, 10**6)))
    assert unknown.selection is not None  # which groups are visited depends on the data
    source = SeededSource("unknown")
    assert early_draws(unknown) is None
    assert draw_early(unknown, source) is None
    assert source.bytes_drawn == 0
    s = veil.Session.local(
        tables={"t": pa.table({"uid": [1, 2, 3], "x": [1.0, 20.0, 300.0]})},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=10),
    )
    plan = s.explain(
        "SELECT BIN(x, 0, 10, 100, 1000) AS b, SUM(x) AS s FROM t GROUP BY b",
        epsilon=1,
        bounds={"x": (0, 1000)},
    ).plan
    stratified = aggregate_of(plan)
    assert any(m.strata for m in stratified.measurements)  # drawn bin by bin
    assert early_draws(stratified) is None


def test_an_early_draw_that_does_not_fit_its_measurement_is_an_internal_error() -> None:
    agg = compiled(KEYS, COUNT_AVG, Budget(epsilon=1))
    table = engine_table(agg, np.random.default_rng(4))
    stats = exact_stats(agg, table, statistic_columns(agg), ["__k0", "__k1"])
    drawn = draw_early(agg, SeededSource("fit"))
    assert drawn is not None
    name = next(iter(drawn))
    shorter = {**drawn, name: drawn[name][:-1]}
    missing = {k: v for k, v in drawn.items() if k != name}
    for wrong in (shorter, missing):
        with pytest.raises(InternalError, match="drawn early"):
            measure(agg, stats, {}, SeededSource("fit"), early=wrong)
    unknown = compiled((GroupKey("s"),), COUNT_AVG, Budget(epsilon=1, delta=Fraction(1, 10**6)))
    with pytest.raises(InternalError, match="drawn early"):
        measure(unknown, {}, {}, SeededSource("fit"), early=drawn)


# -- in the session ---------------------------------------------------------------------------

Q = "SELECT state, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state"
STATES = ("CA", "NY", "TX", "WA")


def people(n: int = 500) -> pa.Table:
    rng = np.random.default_rng(3)
    return pa.table(
        {
            "user_id": np.arange(n),
            "state": rng.choice(list(STATES[:3]), n),
            "income": rng.uniform(0, 1000, n),
        }
    )


class ThreadsSeen(SeededSource):
    """A deterministic source that notes which thread asked for each of its draws."""

    def __init__(self, seed: str, fail_after: int | None = None, slow: float = 0.0) -> None:
        super().__init__(seed)
        self.threads: list[str] = []
        self.fail_after = fail_after
        self.slow = slow  # seconds each draw on a worker takes first
        self.running = 0  # draws begun and not yet returned

    def random_bytes(self, n: int) -> bytes:
        self.running += 1
        try:
            self.threads.append(threading.current_thread().name)
            if self.slow and threading.current_thread() is not threading.main_thread():
                time.sleep(self.slow)
            if self.fail_after is not None and len(self.threads) > self.fail_after:
                raise OSError("the source ran dry: bytes 'abc'")
            return super().random_bytes(n)
        finally:
            self.running -= 1


def session(engine: FakeEngine, source: SeededSource) -> veil.Session:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=10))
    return veil.Session(
        engine,
        ledger=ledger,
        analyst="alice",
        dataset="people",
        privacy_unit="user_id",
        domains={"state": STATES},
        source=source,
    )


def test_the_session_draws_the_noise_on_the_worker_and_releases_the_same_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    overlapped = ThreadsSeen("session")
    got = session(FakeEngine({"people": people()}), overlapped).sql(
        Q, epsilon=1, bounds={"income": (0, 1000)}
    )
    # the salt on the caller's thread, before the engine; the noise on the worker
    main = threading.current_thread().name
    assert overlapped.threads[0] == main
    assert overlapped.threads[1:]
    assert all(t.startswith("veil-overlap") for t in overlapped.threads[1:])
    monkeypatch.setattr("veil.session.early_draws", lambda agg: None)  # drawn after, in line
    inline = ThreadsSeen("session")
    expected = session(FakeEngine({"people": people()}), inline).sql(
        Q, epsilon=1, bounds={"income": (0, 1000)}
    )
    assert set(inline.threads) == {main}
    assert got.to_arrow().equals(expected.to_arrow())
    assert inline.bytes_drawn == overlapped.bytes_drawn


def test_a_failure_of_the_early_draws_is_charged_and_withheld() -> None:
    source = ThreadsSeen("dry", fail_after=1)  # the salt, then nothing
    s = session(FakeEngine({"people": people()}), source)
    with pytest.raises(veil.QueryFailedError, match="the charge stays") as info:
        s.sql(Q, epsilon=1, bounds={"income": (0, 1000)})
    assert "abc" not in str(info.value)
    assert info.value.__cause__ is None
    assert info.value.__context__ is None
    assert s.remaining() == veil.Budget(epsilon=9)


def test_an_engine_failure_while_the_noise_is_drawn_waits_for_the_draws() -> None:
    # the engine fails at once while each worker draw takes 50 ms: the query returns only
    # once every draw it started has returned, all of them made (the bytes of a query that
    # succeeds), so the caller may use its source again at once
    answered = ThreadsSeen("engine fails")
    session(FakeEngine({"people": people()}), answered).sql(
        Q, epsilon=1, bounds={"income": (0, 1000)}
    )
    source = ThreadsSeen("engine fails", slow=0.05)
    engine = FakeEngine({"people": people()}, fail=SchemaError("could not convert 'abc'"))
    s = session(engine, source)
    with pytest.raises(veil.QueryFailedError, match="the charge stays") as info:
        s.sql(Q, epsilon=1, bounds={"income": (0, 1000)})
    assert "abc" not in str(info.value)
    assert source.running == 0
    assert source.bytes_drawn == answered.bytes_drawn > 8  # the salt and the discarded noise
    assert s.remaining() == veil.Budget(epsilon=9)


def test_a_failure_to_start_the_draws_refunds_before_the_engine_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # submitted before the engine is asked to read: a failure there is the protocol's
    # "after reserving, before reading" — refunded, and the engine never runs
    def refuse(*args: object) -> object:
        raise RuntimeError("no thread can be started")

    monkeypatch.setattr("veil.session.submit", refuse)
    engine = FakeEngine({"people": people()})
    s = session(engine, ThreadsSeen("no thread"))
    with pytest.raises(RuntimeError, match="no thread"):
        s.sql(Q, epsilon=1, bounds={"income": (0, 1000)})
    assert engine.calls == []
    assert s.remaining() == veil.Budget(epsilon=10)


# -- the worker -------------------------------------------------------------------------------


def _in_child(queue: multiprocessing.Queue[int]) -> None:
    queue.put(_background.submit(int, "41").result() + 1)


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("veil-overlap")]


@pytest.mark.system
def test_the_workers_stop_before_a_fork_and_are_made_again_on_both_sides() -> None:
    assert _background.submit(sum, (1, 2)).result() == 3  # the parent's worker exists
    assert _workers()
    context = multiprocessing.get_context("fork")
    queue: multiprocessing.Queue[int] = context.Queue()
    child = context.Process(target=_in_child, args=(queue,))
    child.start()
    assert not _workers()  # stopped before the fork: none was copied into the child
    child.join(timeout=60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == 42
    assert _background.submit(sum, (3, 4)).result() == 7  # and made again here
    assert _workers()


@pytest.mark.system
def test_work_submitted_at_the_interpreters_exit_runs_in_line() -> None:
    code = (
        "import atexit, threading\n"
        "from veil import _background\n"
        "_background.submit(int, '1').result()\n"
        "def late():\n"
        "    f = _background.submit(threading.current_thread)\n"
        "    print('ran', f.result() is threading.main_thread(), flush=True)\n"
        "    g = _background.submit(int, 'x')\n"
        "    print('raised', type(g.exception()).__name__, flush=True)\n"
        "atexit.register(late)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split("\n")[:2] == ["ran True", "raised ValueError"]


def test_settle_waits_for_a_failed_future_without_raising() -> None:
    failed = _background.submit(int, "not a number")
    _background.settle(failed)
    assert failed.done()
    assert isinstance(failed.exception(), ValueError)
    _background.settle(None)


def test_a_short_job_does_not_wait_behind_a_long_one() -> None:
    # one query's large noise (a million public keys) must not hold back another thread's
    # small one: a job submitted while another runs gets a thread of its own
    release = threading.Event()
    long = _background.submit(release.wait, 60)
    try:
        assert _background.submit(int, "7").result(timeout=30) == 7
        assert not long.done()
    finally:
        release.set()
    assert long.result(timeout=30) is True
