"""Check the built wheel and sdist beyond ``twine check``: the wheel ships the package, its
``py.typed`` marker and the service's OpenAPI document, and no tests; the sdist carries the
licence and the tests.

    python scripts/check_dist.py dist/
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path


def problems(dist: Path) -> list[str]:
    wheels = sorted(dist.glob("veil-*.whl"))
    sdists = sorted(dist.glob("veil-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"expected one wheel and one sdist in {dist}, found {wheels + sdists}"]
    found = []
    names = zipfile.ZipFile(wheels[0]).namelist()
    for needed in ("veil/__init__.py", "veil/py.typed", "veil/service/openapi.json"):
        if needed not in names:
            found.append(f"the wheel lacks {needed}")
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        found.append("the wheel lacks its LICENSE")
    stray = [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/")) or "/tests/" in n]
    if stray:
        found.append(f"the wheel ships files that are not the package: {stray[:5]}")
    with tarfile.open(sdists[0]) as sdist:
        members = sdist.getnames()
    root = members[0].split("/")[0]
    for needed in ("LICENSE", "pyproject.toml", "src/veil/py.typed", "tests/conftest.py"):
        if f"{root}/{needed}" not in members:
            found.append(f"the sdist lacks {needed}")
    if any("/.venv" in m or m.endswith(".db") for m in members):
        found.append("the sdist carries a virtual environment or a database")
    return found


def main() -> None:
    found = problems(Path(sys.argv[1]))
    for problem in found:
        print(f"check_dist: {problem}", file=sys.stderr)
    if found:
        raise SystemExit(1)
    print("check_dist: the wheel and the sdist are complete")


if __name__ == "__main__":
    main()
