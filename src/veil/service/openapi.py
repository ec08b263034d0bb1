"""The service's OpenAPI document, committed as ``openapi.json`` beside this file.

``python -m veil.service.openapi`` rewrites it from the app (a test checks the two agree)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from veil.service.app import OPENAPI_PATH, create_app
from veil.service.config import ServiceConfig

__all__ = ["document", "main", "render"]


def document() -> dict[str, Any]:
    """The OpenAPI document of the app (built over a scratch ledger: it depends on no data)."""
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(ServiceConfig(ledger=f"sqlite:///{Path(tmp) / 'ledger.db'}"))
        try:
            return app.openapi()
        finally:
            app.state.veil.close()


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main() -> None:
    OPENAPI_PATH.write_text(render(document()), encoding="utf-8")


if __name__ == "__main__":
    main()
