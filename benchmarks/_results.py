"""Where a benchmark's figures go: ``benchmarks/results/<name>.json``.

Each file holds the last run's figures (what the README quotes), the date, the machine's load
average during the run (1-minute, at its start and its end) and its number of CPUs — no host
name, no path. History lives in the repository's log of these files.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


class Run:
    """The figures of one run, written by :meth:`write`."""

    def __init__(self, name: str) -> None:
        self.path = RESULTS / f"{name}.json"
        self.load_start = os.getloadavg()[0]
        self.figures: dict[str, Any] = {}

    def add(self, key: str, value: Any) -> None:
        self.figures[key] = value

    def write(self, path: Path | None = None) -> Path:
        target = path or self.path
        out = {
            "when": time.strftime("%Y-%m-%d", time.gmtime()),
            "cpus": os.cpu_count(),
            "load_average": [round(self.load_start, 2), round(os.getloadavg()[0], 2)],
            **self.figures,
        }
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        print(f"figures written to {target.name}")
        return target
