"""Carry a branch's README changes into the docs pages cut from the README.

The README's sections became the pages of ``docs/`` (and ``CONTRIBUTING.md``) with their text
unchanged but for heading levels and links. A branch cut before that still edits README.md;
this applies its README hunks to the page that holds the same text:

    python scripts/port_readme.py BASE BRANCH [--dry-run]

``BASE`` is the branch's merge base with main (``git merge-base main BRANCH``). Each hunk is
applied where its old text (context and removed lines) occurs exactly once among the pages —
with less context if the pages' edits touched it, or anchored on its leading context alone when
the trailing context changed. A hunk found nowhere is printed for a person to place; nothing is
guessed. Then ``mkdocs build --strict`` says which README anchors (``#section``) to rewrite as
page links.
"""

from __future__ import annotations

import argparse
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 4


@dataclass
class Hunk:
    head: str
    lines: list[str] = field(default_factory=list)  # each with its " ", "-" or "+" tag

    def side(self, tags: str, trim: int = 0) -> str:
        kept = [line[1:] for line in self.lines if line[:1] in tags]
        return "\n".join(kept[trim : len(kept) - trim] if trim else kept)


def hunks(base: str, branch: str) -> list[Hunk]:
    diff = subprocess.run(
        ["git", "-C", str(ROOT), "diff", f"-U{CONTEXT}", base, branch, "--", "README.md"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found: list[Hunk] = []
    for line in diff.splitlines():
        if line.startswith("@@"):
            found.append(Hunk(line))
        elif found and line[:1] in " +-" and not line.startswith(("---", "+++")):
            found[-1].lines.append(line)
    return found


def _replace_once(texts: dict[Path, str], old: str, new: str) -> Path | None:
    hits = [page for page, text in texts.items() if old and text.count(old) == 1]
    if len(hits) != 1:
        return None
    texts[hits[0]] = texts[hits[0]].replace(old, new)
    return hits[0]


def apply(hunk: Hunk, texts: dict[Path, str]) -> Path | None:
    for trim in range(CONTEXT + 1):
        page = _replace_once(texts, hunk.side(" -", trim), hunk.side(" +", trim))
        if page is not None:
            return page
    tags = [line[:1] for line in hunk.lines]
    changed = [i for i, tag in enumerate(tags) if tag in "+-"]
    first, last = changed[0], changed[-1]
    if any(tag == " " for tag in tags[first : last + 1]):
        return None  # several runs of changes: only the whole hunk is safe
    lead = [line[1:] for line in hunk.lines[:first]]
    run = hunk.lines[first : last + 1]
    for k in range(len(lead), 0, -1):
        old = "\n".join(lead[-k:] + [line[1:] for line in run if line[:1] == "-"])
        new = "\n".join(lead[-k:] + [line[1:] for line in run if line[:1] == "+"])
        page = _replace_once(texts, old, new)
        if page is not None:
            return page
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base")
    parser.add_argument("branch")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    pages = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "CONTRIBUTING.md"]
    texts = {page: page.read_text(encoding="utf-8") for page in pages}
    left = []
    for hunk in hunks(args.base, args.branch):
        page = apply(hunk, texts)
        if page is None:
            left.append(hunk)
        else:
            print(f"{page.relative_to(ROOT)}: {hunk.head}")
    if not args.dry_run:
        for page, text in texts.items():
            if text != page.read_text(encoding="utf-8"):
                page.write_text(text, encoding="utf-8")
    for hunk in left:
        print(f"\nnot placed: {hunk.head}\n" + "\n".join(hunk.lines))
    raise SystemExit(1 if left else 0)


if __name__ == "__main__":
    main()
