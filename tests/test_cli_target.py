"""``--target`` on ``veil explain`` and ``veil query``, ``--curve`` and ``--plot``: on the real
California PUMS sample in ``../shared/data`` (never copied into the repository)."""

from __future__ import annotations

import builtins
import itertools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import veil
from cli_support import invoke

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
COUNT = "SELECT COUNT(*) AS n FROM pums"
BY_SEX = "SELECT sex, COUNT(*) AS n, AVG(income) AS mean_income FROM pums GROUP BY sex"
TYPES = ("--column", "income:DOUBLE", "--column", "sex:INTEGER", "-b", "income=0:200000")


@pytest.fixture(scope="module")
def pums() -> str:
    path = DATA / "pums_california_1000.csv"
    if not path.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path.name} is missing from ../shared/data")
    return f"pums={path}"


@pytest.fixture
def ledger(tmp_path: Path) -> str:
    """A ledger granting analyst 'cli' ε = 1/20 on dataset 'pums'."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = invoke(
        "budget", "grant", "--ledger", url, "-a", "cli", "--dataset", "pums", "-e", "1/20"
    )
    assert code == 0, err
    return url


def _json(*args: str) -> dict[str, Any]:
    code, out, err = invoke(*args, "--format", "json")
    assert code == 0, err
    payload: dict[str, Any] = json.loads(out)
    return payload


def _remaining(url: str) -> str:
    (row,) = _json("budget", "show", "--ledger", url)["budgets"]
    text: str = row["remaining"]["exact"]["epsilon"]
    return text


def test_a_count_target_of_50_yields_the_smallest_epsilon_whose_released_bars_are_within_it(
    pums: str,
) -> None:
    chosen = _json("explain", COUNT, "-t", pums, "--target", "n=±50")["target"]
    eps = Fraction(chosen["epsilon_exact"])
    assert chosen["targets"][0]["expected_bar"] <= 50
    assert chosen["targets"][0]["met"]
    # released at that ε: every bar within ±50; at 1 % less: beyond it
    at = _json("query", COUNT, "-t", pums, "-e", str(eps))
    assert at["error_bars"][0][0] <= 50
    below = _json("query", COUNT, "-t", pums, "-e", str(eps * Fraction(99, 100)))
    assert below["error_bars"][0][0] > 50
    # and `veil query --target` runs at exactly that cost
    ran = _json("query", COUNT, "-t", pums, "--target", "n=+-50")
    assert Fraction(ran["cost"]["exact"]["epsilon"]) == eps
    assert ran["error_bars"][0][0] <= 50
    assert ran["target"]["epsilon_exact"] == str(eps)


def test_every_target_of_a_grouped_query_is_met_and_the_assumptions_are_said(pums: str) -> None:
    args = ("-t", pums, *TYPES, "--target", "n=±20", "--target", "mean_income=±5%")
    more = ("--reference", "mean_income=40000", "--min-group-size", "400", "--delta", "1e-6")
    chosen = _json("explain", BY_SEX, *args, *more)["target"]
    bars = {t["column"]: t for t in chosen["targets"]}
    assert bars["n"]["expected_bar"] <= 20
    assert bars["mean_income"]["limit"] == pytest.approx(2000)
    assert bars["mean_income"]["expected_bar"] <= 2000
    assert any("min_group_size" in a for a in chosen["assumptions"])
    assert any("reference value 40000" in a for a in chosen["assumptions"])
    ran = _json("query", BY_SEX, *args, *more)
    col = ran["columns"].index("n")
    assert all(row[col] <= 20 for row in ran["error_bars"])
    code, out, _ = invoke("explain", BY_SEX, *args, *more)
    assert code == 0
    assert "smallest ε meeting every target" in out
    assert "accuracy targets" in out


def test_level_applies_to_targets_stating_none_and_a_stated_one_wins(pums: str) -> None:
    def eps(*extra: str) -> Fraction:
        got = _json("explain", COUNT, "-t", pums, *extra)["target"]
        return Fraction(got["epsilon_exact"])

    at95 = eps("--target", "n=±20")
    at80 = eps("--target", "n=±20", "--level", "80%")
    assert at80 < at95
    assert eps("--target", "n=±20@95%", "--level", "0.8") == at95


def test_targets_beyond_the_grant_are_refused_free_naming_the_epsilon_they_need(
    pums: str, ledger: str
) -> None:
    before = _remaining(ledger)
    for command in ("explain", "query"):
        code, out, err = invoke(command, COUNT, "-t", pums, "--ledger", ledger, "--target", "n=±5")
        assert code == 2, (command, out)
        assert out == ""
        assert "need ε=0.53" in err  # the ε they need
        assert "remaining budget is ε=0.05" in err
        assert "loosen the --target values" in err
        assert "nothing was charged" in err
    assert _remaining(ledger) == before


def test_a_target_met_within_the_grant_charges_exactly_the_chosen_epsilon(
    pums: str, ledger: str
) -> None:
    ran = _json("query", COUNT, "-t", pums, "--ledger", ledger, "--target", "n=±100")
    eps = Fraction(ran["target"]["epsilon_exact"])
    assert Fraction(ran["cost"]["exact"]["epsilon"]) == eps
    assert Fraction(_remaining(ledger)) == Fraction(1, 20) - eps


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--target", "n=50"), "--target 'n=50': malformed target 'n=50'; write it as"),
        (("--target", "n=±abc"), "the half-width 'abc' is not a number"),
        (("--target", "n=±-5"), "must be a positive finite number"),
        (("--target", "n=±5", "--target", "n=±9"), "two targets for 'n'"),
        (("--target", "n=±5", "--level", "150"), "--level '150' is not a level"),
        (("--target", "n=±5", "--min-group-size", "0"), "--min-group-size 0 must be a positive"),
        (("--target", "n=±5%"), "pass --reference n=1000 (say)"),
        (("--target", "n=±5%", "--reference", "n=zero"), "--reference expects COLUMN=VALUE"),
        (("--target", "n=±5", "--reference", "n=10"), "--reference n=… names no relative target"),
        (("--reference", "n=10", "-e", "1"), "--reference qualifies a relative target"),
        (("--level", "0.9", "-e", "1"), "--level qualifies accuracy targets or curves"),
        (("--target", "n=±5", "-e", "1"), "give --target or --epsilon 1, not both"),
        ((), "Missing option '--epsilon' (or accuracy targets"),
        (("--target", "x=±5"), "target for unknown column 'x'"),
    ],
)
def test_bad_target_options_are_refused_in_the_cli_s_syntax(
    pums: str, args: tuple[str, ...], message: str
) -> None:
    for command in ("explain", "query"):
        code, out, err = invoke(command, COUNT, "-t", pums, *args)
        assert code == 2, (command, out)
        assert message in err, err
        assert "pass references=" not in err
        assert "min_group_size=1" not in err


def test_targets_on_avg_need_a_public_group_size_and_quantiles_are_refused(pums: str) -> None:
    code, _, err = invoke("explain", BY_SEX, "-t", pums, *TYPES, "--target", "mean_income=±500")
    assert code == 2
    assert "state a public assumption: --min-group-size 100 (say)" in err
    q = "SELECT MEDIAN(income) AS med FROM pums"
    code, _, err = invoke("explain", q, "-t", pums, *TYPES, "--target", "med=±500")
    assert code == 2
    assert "its error bar is a rank statement" in err


def test_the_curve_is_free_nonincreasing_and_agrees_with_explain(pums: str) -> None:
    args = ("explain", BY_SEX, "-t", pums, *TYPES, "--delta", "1e-6", "--curve")
    got = _json(*args, "-e", "1/2")
    curve = got["curve"]
    assert curve["epsilons"] == [float(Fraction(1, 2) * 2**k) for k in range(-3, 4)]
    assert list(curve["columns"]) == ["n"]  # AVG left out without --min-group-size
    assert any("--min-group-size" in n for n in got["curve_notes"])
    bars = curve["columns"]["n"]["bars"]
    assert all(a >= b for a, b in itertools.pairwise(bars))
    assert bars[0] > bars[-1]
    assert got["expected_error_bars"]["n"] == f"± {bars[3]:g}"  # the row at the given ε
    with_avg = _json(*args, "-e", "1/2", "--min-group-size", "400")["curve"]
    assert list(with_avg["columns"]) == ["n", "mean_income"]
    code, out, _ = invoke(*args, "--target", "n=±20")
    assert code == 0
    assert "expected error bars versus ε" in out
    assert "◀" in out


def _is_png(path: Path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


def test_plot_writes_a_png_of_the_curve(pums: str, tmp_path: Path) -> None:
    picture = tmp_path / "acc.png"
    got = _json("explain", COUNT, "-t", pums, "--target", "n=±50", "--plot", str(picture))
    assert got["plot"] == str(picture)
    assert _is_png(picture)


def test_a_bad_plot_path_is_refused_before_any_work(pums: str, tmp_path: Path) -> None:
    for path, message in (
        (tmp_path / "acc.jpg", "must name a .png file"),
        (tmp_path / "missing" / "acc.png", "does not exist; create it first"),
    ):
        code, _, err = invoke("explain", COUNT, "-t", pums, "-e", "1", "--plot", str(path))
        assert code == 2
        assert message in err


def test_without_matplotlib_the_error_names_the_plot_extra(
    pums: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    picture = tmp_path / "acc.png"
    code, _, err = invoke("explain", COUNT, "-t", pums, "--target", "n=±50", "--plot", str(picture))
    assert code == 2
    assert "pip install 'veil[plot]'" in err
    assert not picture.exists()


def test_the_cli_choice_is_the_python_one(pums: str) -> None:
    path = pums.split("=", 1)[1]
    with veil.Session.local({"pums": path}, budget=veil.Budget(epsilon=10)) as s:
        py = veil.accuracy.choose_epsilon(s, COUNT, "n=±50")
    cli = _json("explain", COUNT, "-t", pums, "--target", "n=±50")["target"]
    assert Fraction(cli["epsilon_exact"]) == py.epsilon


def test_the_choice_and_the_refusal_are_the_same_on_neighbouring_datasets(
    pums: str, tmp_path: Path
) -> None:
    """Removing one person's row changes neither the chosen ε, nor the bars, nor a refusal's
    words: the search reads no data."""
    lines = Path(pums.split("=", 1)[1]).read_text(encoding="utf-8").splitlines(keepends=True)
    neighbour = tmp_path / "neighbour.csv"
    neighbour.write_text("".join([lines[0], *lines[2:]]), encoding="utf-8")  # one row fewer
    args = (*TYPES, "--delta", "1e-6", "--target", "n=±20", "--target", "mean_income=±5%",
            "--reference", "mean_income=40000", "--min-group-size", "400")  # fmt: skip
    seen = []
    for table in (pums, f"pums={neighbour}"):
        got = _json("explain", BY_SEX, "-t", table, *args)
        seen.append((got["target"], got["cost"], got["expected_error_bars"], got["sql"]))
        tight = ("--target", "n=±5%")  # no public reference: refused, free
        code, out, err = invoke("explain", BY_SEX, "-t", table, *TYPES, "--delta", "1e-6", *tight)
        seen.append((code, out, err))
    assert seen[0] == seen[2]
    assert seen[1] == seen[3]
    assert seen[1][0] == 2
    assert "needs a public reference value" in seen[1][2]


@pytest.mark.filterwarnings("ignore:epsilon=.* protects little")  # the search's probes
def test_a_weighted_avg_target_takes_the_total_weight_and_is_the_python_choice(pums: str) -> None:
    # PUMS has no weights column: age (0–100) stands in for one; --min-group-size states the
    # group's total weight, and the CLI's choice is the Python one
    q = "SELECT AVG(income) AS m FROM pums"
    args = ("--column", "age:DOUBLE", "--bounds", "age=0:100", "--weights", "age")
    cli = _json("explain", q, "-t", pums, *TYPES, *args, "--target", "m=±500",
                "--min-group-size", "20000")["target"]  # fmt: skip
    path = pums.split("=", 1)[1]
    with veil.Session.local(
        {"pums": path},
        budget=veil.Budget(epsilon=100),
        bounds={"income": (0, 200000)},
        schema={"pums": {"income": "DOUBLE", "sex": "INTEGER", "age": "DOUBLE"}},
    ) as s:
        py = veil.accuracy.choose_epsilon(
            s, q, "m=±500", min_group_size=20000, bounds={"age": (0, 100)}, weights="age"
        )
    assert Fraction(cli["epsilon_exact"]) == py.epsilon
    assert any("total weight is 20000" in a for a in py.assumptions)
    code, _, err = invoke("explain", q, "-t", pums, *TYPES, *args, "--target", "m=±500")
    assert code == 2
    assert "total weight" in err
    assert "--min-group-size 100000 (say)" in err
