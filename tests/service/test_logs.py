"""The operator's log (veil.service.logs): its lines, its file, its configuration."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from service_support import SQL, Service
from veil.errors import InvalidArgumentError
from veil.service import logs
from veil.service.config import LogSettings, ServiceConfig


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("veil.test").makeRecord(
        "veil.test", logging.ERROR, __file__, 1, message, (), None, extra=extra
    )
    logs.RequestFilter().filter(record)
    return record


def test_a_line_carries_the_requests_fields_and_the_records_veil_extras() -> None:
    _record_log, token = logs.begin("req-1")
    try:
        logs.note(analyst="alice", dataset="people")
        logs.note(outcome="answered", fingerprint=None)  # None: not known, nothing set
        line = json.loads(logs.JsonFormatter().format(_record("a\nb", veil_query="SELECT 1")))
    finally:
        logs.end(token)
    assert line["message"] == "a\nb"
    assert (line["level"], line["logger"], line["pid"]) == ("ERROR", "veil.test", os.getpid())
    assert line["request_id"] == "req-1"
    assert (line["analyst"], line["dataset"], line["outcome"]) == ("alice", "people", "answered")
    assert "fingerprint" not in line
    assert line["query"] == "SELECT 1"
    assert line["time"].endswith("+00:00")
    outside = json.loads(logs.JsonFormatter().format(_record("later")))
    assert "request_id" not in outside


def test_a_proxys_id_is_kept_only_when_plain() -> None:
    for proposed, kept in (("abc-1.2:3_x", True), ("a b", False), ("x" * 65, False), (None, False)):
        record, token = logs.begin(proposed)
        logs.end(token)
        assert (record.request_id == proposed) == kept
        assert len(record.request_id) == 16 or kept


def test_the_exception_is_in_the_line_as_a_traceback() -> None:
    try:
        raise ValueError("the engine said 42")
    except ValueError:
        record = logging.getLogger("veil.test").makeRecord(
            "veil.test", logging.ERROR, __file__, 1, "failed", (), __import__("sys").exc_info()
        )
    line = json.loads(logs.JsonFormatter().format(record))
    assert "Traceback" in line["exception"]
    assert line["exception"].endswith("ValueError: the engine said 42")
    text = logs.TextFormatter().format(record)
    assert text.splitlines()[0].endswith("ERROR veil.test failed")
    assert text.endswith("ValueError: the engine said 42")


def test_the_file_handler_appends_whole_lines_and_reopens_after_rotation(tmp_path: Path) -> None:
    path = tmp_path / "veil.jsonl"
    now = [0.0]
    handler = logs.LineHandler(str(path), clock=lambda: now[0])
    handler.setFormatter(logs.JsonFormatter())
    long = "x" * 100_000  # one write, not split at a buffer's size
    handler.emit(_record(long))
    path.rename(tmp_path / "veil.jsonl.1")  # logrotate's rename
    handler.emit(_record("soon after"))  # within the check's interval: the old file still
    now[0] += logs.REOPEN_CHECK_S
    handler.emit(_record("after"))
    handler.close()
    rotated = [
        json.loads(x)["message"] for x in (tmp_path / "veil.jsonl.1").read_text().splitlines()
    ]
    assert rotated == [long, "soon after"]
    (fresh,) = path.read_text().splitlines()
    assert json.loads(fresh)["message"] == "after"


def test_the_config_names_level_file_and_format(tmp_path: Path) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(
        'ledger = "sqlite:///l.db"\n[logging]\nlevel = "WARNING"\nfile = "logs/veil.jsonl"\n'
        'format = "text"\n'
    )
    settings = ServiceConfig.load(config).logging
    assert settings == LogSettings("warning", str(tmp_path / "logs" / "veil.jsonl"), "text")


@pytest.mark.parametrize(
    ("table", "match"),
    [
        ('level = "loud"', r"\[logging\] level must be one of debug, info.*got 'loud'"),
        ("level = 10", r"\[logging\] level must be one of .*got 10"),
        ('file = ""', r"\[logging\] file must be a file's path"),
        ('format = "xml"', r"\[logging\] format must be one of json, text, got 'xml'"),
        ('destination = "x"', r"\[logging\]: unknown key\(s\) \['destination'\]; known: file"),
    ],
)
def test_a_bad_logging_table_is_refused_by_name(tmp_path: Path, table: str, match: str) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(f'ledger = "sqlite:///l.db"\n[logging]\n{table}\n')
    with pytest.raises(InvalidArgumentError, match=match):
        ServiceConfig.load(config)


def test_the_dict_config_sends_every_logger_through_one_handler(tmp_path: Path) -> None:
    config = logs.log_config("warning", str(tmp_path / "v.log"), "json")
    assert config["root"] == {"level": "WARNING", "handlers": ["veil"]}
    assert config["handlers"]["veil"]["path"] == str(tmp_path / "v.log")
    assert config["formatters"]["veil"]["()"] is logs.JsonFormatter
    assert all(c["handlers"] == [] and c["propagate"] for c in config["loggers"].values())


def test_a_request_answers_its_id_and_logs_its_line(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=logs.ACCESS_LOGGER):
        r = service.client.post(
            "/v1/query",
            json={"dataset": "people", "sql": SQL, "epsilon": 0.5},
            headers=service.headers("alice") | {"X-Request-ID": "lb-42"},
        )
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "lb-42"
    (line,) = [rec for rec in caplog.records if rec.name == logs.ACCESS_LOGGER]
    fields = line.veil_request  # type: ignore[attr-defined]
    assert fields == {
        "request_id": "lb-42",
        "analyst": "alice",
        "dataset": "people",
        "fingerprint": r.json()["fingerprint"],
        "outcome": "answered",
    }
    assert line.veil_status == 200  # type: ignore[attr-defined]
