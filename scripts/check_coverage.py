"""Fail when a package's branch coverage is below its floor (``make test`` runs it).

Usage: ``python scripts/check_coverage.py COVERAGE_JSON PACKAGE=PERCENT ...``, e.g.
``python scripts/check_coverage.py build/coverage/coverage.json veil.noise=95``.

``PACKAGE`` is a package (``veil.noise``: its files and subpackages), a module
(``veil.session``), or a prefix ending in ``*`` that names a family of modules at the package
root (``veil.autobounds*``: ``veil.autobounds``, ``veil.autobounds_target``… and anything
below them).

``COVERAGE_JSON`` is what ``coverage json`` (or pytest-cov's ``--cov-report=json:…``) wrote
from a run with branch coverage on. A package's coverage is coverage.py's own percentage
summed over the package's files, subpackages included: (lines run + branch outcomes taken) /
(lines + branch outcomes) — the number ``coverage report`` shows with ``--branch`` and that its
``fail_under`` checks, only per package (``fail_under`` is global). The branch outcomes alone
are printed beside it. Prints one line per package and the whole of veil; exits 1 when any
package is below its floor, 2 on bad arguments or a run without branch data.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import PurePosixPath


@dataclass
class Tally:
    statements: int = 0
    covered_lines: int = 0
    branches: int = 0
    covered_branches: int = 0

    def add(self, summary: dict[str, int]) -> None:
        self.statements += summary["num_statements"]
        self.covered_lines += summary["covered_lines"]
        self.branches += summary["num_branches"]
        self.covered_branches += summary["covered_branches"]

    @property
    def percent(self) -> Fraction:
        total = self.statements + self.branches
        done = self.covered_lines + self.covered_branches
        return Fraction(100) if total == 0 else Fraction(100 * done, total)

    @property
    def branch_percent(self) -> Fraction:
        if self.branches == 0:
            return Fraction(100)
        return Fraction(100 * self.covered_branches, self.branches)


def module_of(path: str) -> str:
    """``src/veil/noise/exact.py`` → ``veil.noise.exact`` (``__init__.py`` → its package)."""
    parts = list(PurePosixPath(path.replace("\\", "/")).with_suffix("").parts)
    if "veil" not in parts:
        raise ValueError(f"{path!r} is not a file of the veil package")
    parts = parts[len(parts) - 1 - parts[::-1].index("veil") :]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def covers(package: str, module: str) -> bool:
    """Whether ``module`` counts in ``package``: the package itself, a module below it, or —
    for a ``prefix*`` — any module whose dotted name starts with the prefix."""
    if package.endswith("*"):
        return module.startswith(package[:-1])
    return module == package or module.startswith(package + ".")


def parse_floors(args: list[str]) -> dict[str, Fraction]:
    floors: dict[str, Fraction] = {}
    for arg in args:
        package, sep, percent = arg.partition("=")
        name = package.removesuffix("*")
        if (
            not sep
            or not (name == "veil" or name.startswith("veil."))
            or not all(part.isidentifier() for part in name.split("."))
        ):
            raise ValueError(
                "expected PACKAGE=PERCENT (e.g. veil.noise=95, veil.session=90, "
                f"veil.autobounds*=90), got {arg!r}"
            )
        try:
            floors[package] = Fraction(percent)
        except ValueError:
            raise ValueError(f"{arg!r}: {percent!r} is not a percentage") from None
    return floors


def tally(report: dict[str, object], packages: list[str]) -> tuple[dict[str, Tally], Tally]:
    files = report.get("files")
    meta = report.get("meta")
    if not isinstance(files, dict) or not isinstance(meta, dict):
        raise ValueError("not a coverage JSON report (no 'files' or 'meta')")
    if not meta.get("branch_coverage"):
        raise ValueError("the coverage run measured no branches: run it with --cov-branch")
    per_package = {p: Tally() for p in packages}
    whole = Tally()
    for path, data in files.items():
        module = module_of(path)
        summary = data["summary"]
        whole.add(summary)
        for package in packages:
            if covers(package, module):
                per_package[package].add(summary)
    return per_package, whole


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        floors = parse_floors(argv[1:])
        with open(argv[0], encoding="utf-8") as handle:
            report = json.load(handle)
        per_package, whole = tally(report, list(floors))
    except (OSError, ValueError, KeyError) as exc:
        print(f"check_coverage: {exc}", file=sys.stderr)
        return 2
    failed = []
    print("branch coverage (lines + branch outcomes; branch outcomes alone):")
    for package, floor in floors.items():
        t = per_package[package]
        if t.statements == 0:
            print(f"  {package}: no file measured", file=sys.stderr)
            failed.append(package)
            continue
        ok = t.percent >= floor
        verdict = "ok" if ok else f"BELOW the floor of {float(floor):g} %"
        print(
            f"  {package:<18} {float(t.percent):6.2f} %  ({float(t.branch_percent):6.2f} % of "
            f"{t.branches} branch outcomes)  {verdict}"
        )
        if not ok:
            failed.append(package)
    print(
        f"  {'veil (all)':<18} {float(whole.percent):6.2f} %  ({float(whole.branch_percent):6.2f}"
        f" % of {whole.branches} branch outcomes)"
    )
    if failed:
        print(f"check_coverage: below the floor: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
