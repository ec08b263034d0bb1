"""What Spark says reaches an analyst without a path (issue 33): ``spark_errors.scrub``."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from veil.engines.spark_errors import scrub


def test_every_spelling_of_a_tables_path_is_written_as_an_ellipsis(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "clinic"
    message = (
        f"[FAILED_READ_FILE] file:{folder}/dana_hiv.parquet; also {folder}/dana_hiv.parquet, "
        f"file://{folder}/x.parquet, {folder} and people.csv at {tmp_path}/people.csv"
    )
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        said = scrub(
            message, [f"{folder}/*.parquet", "people.csv"], [f"file:{folder}/dana_hiv.parquet"]
        )
    assert "dana_hiv" not in said
    assert str(tmp_path) not in said
    assert "people.csv" not in said
    assert said.startswith("[FAILED_READ_FILE] …;")
    assert [r.getMessage() for r in caplog.records] == [
        f"a message about a file table, as Spark wrote it: {message}"
    ]


def test_a_message_naming_no_path_is_unchanged_and_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = "[UNRESOLVED_COLUMN] `income` cannot be resolved; did you mean `age`? (see docs/errors)"
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        assert scrub(text, [os.sep, "/"], ["file:/"]) == text  # a root path is never "…"
    assert not caplog.records


def test_an_analysis_error_about_a_file_reaches_the_analyst_without_it(tmp_path: Path) -> None:
    errors = pytest.importorskip("pyspark.errors", reason="pyspark is not installed")
    from veil.engines.spark_errors import translate
    from veil.errors import SchemaError

    path = f"{tmp_path}/clinic/dana_hiv.parquet"
    exc = errors.AnalysisException(message=f"[PATH_NOT_FOUND] Path does not exist: file:{path}")
    said = translate(exc, errors, lambda text: scrub(text, [f"{tmp_path}/clinic/*.parquet"], []))
    assert isinstance(said, SchemaError)
    assert str(said) == (
        "the query does not fit the table's columns: [PATH_NOT_FOUND] Path does not exist: …"
    )
