"""The audits' pictures: the binned output distributions (text and JSON) and ``--plot FILE.png``
(matplotlib, the ``plot`` extra), checked before any sampling."""

from __future__ import annotations

import builtins
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cli_support import invoke
from support import SeededSource
from veil.audit.histograms import histogram
from veil.audit.mechanisms import builtin
from veil.errors import MissingDependencyError
from veil.plots import check_path

pytestmark = pytest.mark.statistical

PNG = b"\x89PNG\r\n\x1a\n"


def _is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 10_000


def test_integer_outputs_get_bins_of_whole_integers_centred_on_them() -> None:
    x = np.arange(-50, 51, dtype=float)
    h = histogram(x, x + 1)
    assert h is not None
    widths = np.diff(h.edges)
    assert np.all(widths == widths[0])
    assert widths[0] == round(widths[0])
    assert all(e % 1 == 0.5 for e in h.edges)  # half-way between integers
    assert len(h.first) <= 12
    assert math.isclose(sum(h.first), 1.0)
    assert math.isclose(sum(h.second), 1.0)


def test_unreleased_cells_are_counted_apart_and_an_empty_pair_has_no_histogram() -> None:
    x = np.array([1.5, 2.5, np.nan, np.nan])
    h = histogram(x, np.array([1.25, 2.0, 3.0, 4.0]))
    assert h is not None
    assert h.first_missing == 0.5
    assert h.second_missing == 0.0
    assert math.isclose(sum(h.first), 0.5)
    assert math.isclose(sum(h.second), 1.0)
    assert "not released: 0.500 (first input), 0.000 (second input)" in "\n".join(h.lines())
    assert histogram(np.array([np.nan]), np.array([np.nan])) is None


def test_the_binned_shares_are_the_mechanisms_pmf() -> None:
    """Discrete Laplace at ε = 1 from input 0: P(0) = (1 − e⁻¹)/(1 + e⁻¹) = 0.4621; with 100 000
    seeded outputs the bin [−0.5, 0.5) holds it within 0.01 (six standard deviations)."""
    audit = builtin("discrete_laplace", epsilon=1.0, samples=100_000, source=SeededSource("pmf"))
    h = audit.pairs[0].histogram
    assert h is not None
    i = h.edges.index(-0.5)
    assert h.edges[i + 1] == 0.5
    expected = (1 - math.exp(-1)) / (1 + math.exp(-1))
    assert abs(h.first[i] - expected) < 0.01
    assert abs(h.second[i + 1] - expected) < 0.01  # input 1: the same mass one bin up


def test_a_mechanism_audit_draws_its_picture_and_says_where(tmp_path: Path) -> None:
    picture = tmp_path / "laplace.png"
    code, out, _ = invoke(
        "audit", "mechanism", "discrete_laplace", "--epsilon", "1", "-n", "20000",
        "--confidence", "0.999", "--plot", str(picture), "--format", "json",
    )  # fmt: skip
    assert code == 0, out
    report = json.loads(out)
    assert report["plot"] == str(picture)
    assert _is_png(picture)
    shares = report["pairs"][0]["histogram"]
    assert len(shares["edges"]) == len(shares["first"]) + 1


def test_a_query_audit_draws_each_neighbours_worst_cell(pums: Path, tmp_path: Path) -> None:
    picture = tmp_path / "query.png"
    code, out, _ = invoke(
        "audit", "query", "SELECT COUNT(*) AS n FROM pums", "--table", f"pums={pums}",
        "--epsilon", "1", "--releases", "300", "--plot", str(picture),
    )  # fmt: skip
    assert code == 0, out
    assert f"plot: {picture}" in out
    assert _is_png(picture)


@pytest.mark.timeout(60)  # 10⁹ samples would take hours: the refusal comes first
def test_a_bad_plot_path_is_refused_before_any_sampling(tmp_path: Path) -> None:
    for path, message in (
        (tmp_path / "audit.jpg", "must name a .png file"),
        (tmp_path / "missing" / "audit.png", "does not exist; create it first"),
    ):
        code, _, err = invoke(
            "audit", "mechanism", "laplace", "--epsilon", "1", "-n", "1000000000",
            "--plot", str(path),
        )  # fmt: skip
        assert code == 2
        assert message in err
        assert str(path) in err


def test_without_matplotlib_the_error_names_the_plot_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(MissingDependencyError, match=r"pip install 'veil\[plot\]'"):
        check_path(tmp_path / "audit.png")


def test_a_long_audit_reports_its_progress_in_steps_of_outputs() -> None:
    seen: list[tuple[int, int]] = []
    builtin(
        "discrete_laplace", epsilon=1.0, samples=200_000, source=SeededSource("progress"),
        progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert {total for _, total in seen} == {400_000}  # both sides of the one pair
    done = [d for d, _ in seen]
    assert done == sorted(done)
    assert done[-1] == 400_000
    assert len(done) >= 32  # 16 steps per side, not one jump at the end
