"""Survey weights declared by the data owner: a catalog dataset's ``weights`` column (with its
bounds) weights every query's COUNT(*), SUM and AVG; ``weights=False`` opts out; a weights
column without owner bounds, or with a negative lower bound, is refused when it is added."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_support import invoke
from veil import Budget, Catalog, Session
from veil.catalog import Source
from veil.errors import BoundsError, UnsupportedQueryError

SQL = "SELECT region, COUNT(*) AS n, AVG(hours) AS h FROM survey GROUP BY region"


@pytest.fixture
def survey(tmp_path: Path) -> Path:
    path = tmp_path / "survey.parquet"
    n = 4000
    pq.write_table(
        pa.table(
            {
                "region": ["north", "south"] * (n // 2),
                "hours": [float(20 + (i * 7) % 30) for i in range(n)],
                "coeff": [0.5 + (i % 4) for i in range(n)],  # 0.5, 1.5, 2.5, 3.5
            }
        ),
        path,
    )
    return path


def add(tmp_path: Path, survey: Path, **extra: object) -> Catalog:
    c = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    options: dict[str, object] = {
        "source": Source("file", path=str(survey)),
        "bounds": {"hours": (0, 60), "coeff": (0, 4)},
        "domains": {"region": ["north", "south"]},
        "weights": "coeff",
    }
    options.update(extra)
    c.add_dataset("survey", **options)  # type: ignore[arg-type]
    c.ledger.grant("alice", "survey", Budget(epsilon=5))
    return c


def test_the_owners_weights_weight_every_query_and_can_be_opted_out_of(
    tmp_path: Path, survey: Path
) -> None:
    c = add(tmp_path, survey)
    assert c.dataset("survey").public()["weights"] == "coeff"
    with Session.from_catalog(c, "survey", analyst="alice") as s:
        e = s.explain(SQL, epsilon=1)
        assert "n = COUNT(*) weighted by coeff" in str(e)
        r = s.sql(SQL, epsilon=1)
        total = sum(row[1] for row in r.rows)
        # Σ coeff over 4000 rows = 1000 · (0.5 + 1.5 + 2.5 + 3.5) = 8000 (the count is 4000)
        assert abs(total - 8000) < 200
        plain = s.sql(SQL, epsilon=1, weights=False)
        assert abs(sum(row[1] for row in plain.rows) - 4000) < 200
        # a MEDIAN cannot be weighted: refused at no cost, and fine with weights=False
        before = s.remaining()
        with pytest.raises(UnsupportedQueryError, match="weights=False"):
            s.sql("SELECT MEDIAN(hours) AS m FROM survey", epsilon=1)
        assert s.remaining() == before


def test_a_builder_query_is_weighted_like_the_session(tmp_path: Path, survey: Path) -> None:
    c = add(tmp_path, survey)
    with Session.from_catalog(c, "survey", analyst="alice") as s:
        q = s.query("survey").group_by("region").count("n")
        assert "n = COUNT(*) weighted by coeff" in str(q.explain(epsilon=1))
        assert "weighted" not in str(q.explain(epsilon=1, weights=False))
        r = q.run(epsilon=1, weights=False, source=None)
        assert abs(sum(row[1] for row in r.rows) - 4000) < 200


def test_an_analyst_may_not_widen_the_owners_weights_bounds(tmp_path: Path, survey: Path) -> None:
    c = add(tmp_path, survey)
    with Session.from_catalog(c, "survey", analyst="alice") as s:
        with pytest.raises(BoundsError, match="widen the owner's"):
            s.sql(SQL, epsilon=1, bounds={"coeff": (0, 10)})
        assert s.remaining() == Budget(epsilon=5)


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        ({"hours": (0, 60)}, r"bounds for the weights column 'coeff' are required"),
        ({"hours": (0, 60), "coeff": (-1, 4)}, r"lower bound must be at least 0"),
    ],
)
def test_weights_without_owner_bounds_from_zero_are_refused_when_added(
    tmp_path: Path, survey: Path, bounds: dict[str, tuple[float, float]], match: str
) -> None:
    with pytest.raises(BoundsError, match=match):
        add(tmp_path, survey, bounds=bounds)


def test_veil_catalog_add_and_load_take_the_weights_column(tmp_path: Path, survey: Path) -> None:
    ledger = f"sqlite:///{tmp_path / 'cli.db'}"
    code, out, err = invoke(
        "catalog", "add", "survey", "--ledger", ledger, "--path", str(survey),
        "--bounds", "hours=0:60", "--bounds", "coeff=0:4", "--weights", "coeff",
        "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["dataset"]["weights"] == "coeff"
    code, _, err = invoke(
        "catalog", "add", "other", "--ledger", ledger, "--path", str(survey),
        "--bounds", "coeff=-1:4", "--weights", "coeff",
    )  # fmt: skip
    assert code != 0
    assert "--bounds coeff=0:4" in " ".join(err.split())
    config = tmp_path / "veil.toml"
    config.write_text(
        f'[ledger]\nurl = "sqlite:///{tmp_path / "toml.db"}"\n\n[[datasets]]\nname = "survey"\n'
        f'source = {{ kind = "file", path = "{survey}" }}\n'
        'bounds = { hours = [0, 60], coeff = [0, 4] }\nweights = "coeff"\n',
        encoding="utf-8",
    )
    code, out, err = invoke("catalog", "load", str(config), "--format", "json")
    assert code == 0, err
    assert Catalog(f"sqlite:///{tmp_path / 'toml.db'}").dataset("survey").weights == "coeff"
