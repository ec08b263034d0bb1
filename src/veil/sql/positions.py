"""Where constructs are in the SQL text: 1-based (line, column) positions for refusals.

sqlglot keeps the character offsets of identifiers, literals and most function names in each
node's ``meta``; clause keywords (JOIN, UNION, WITH…) are found in the token stream.
"""

from __future__ import annotations

import re

import sqlglot
from sqlglot import Token, TokenType, exp
from sqlglot.errors import ParseError

from veil.plan.expressions import DIALECT, offset_position, position

__all__ = ["Locator", "Position", "parse_error"]

Position = tuple[int, int]


class Locator:
    """Positions in one query text."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._tokens: list[Token] | None = None

    def tokens(self) -> list[Token]:
        """The query's tokens (read lazily: only refusals need them)."""
        if self._tokens is None:
            self._tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(self.text)
        return self._tokens

    def pos(self, node: exp.Expression | None) -> Position | None:
        """Where ``node`` starts (for an aggregate call: its function name)."""
        if node is None:
            return None
        if isinstance(node, exp.AggFunc) and not (node.meta and "start" in node.meta):
            return self.function_name(node) or position(node, self.text)
        return position(node, self.text)

    def function_name(self, node: exp.Func) -> Position | None:
        """Where a function call's name is, when sqlglot kept no position for it."""
        begin = self.function_start(node)
        return None if begin is None else offset_position(self.text, begin)

    def function_start(self, node: exp.Func) -> int | None:
        """The offset of the name of a call whose own node carries no offset: the token before
        the nearest "(" before its first argument."""
        begin = self.start(node)
        if begin is None:
            return None
        before = [t for t in self.tokens() if t.start < begin]
        for i in range(len(before) - 1, 0, -1):
            if before[i].token_type == TokenType.L_PAREN:
                return before[i - 1].start
        return None

    def keyword(
        self, kinds: set[TokenType], *, before: int | None = None, after: int = -1
    ) -> Position | None:
        """Position of the last token of ``kinds`` before offset ``before`` (else the first
        after ``after``)."""
        found = [
            t
            for t in self.tokens()
            if t.token_type in kinds and t.start > after and (before is None or t.start < before)
        ]
        if not found:
            return None
        tok = found[-1] if before is not None else found[0]
        return offset_position(self.text, tok.start)

    def start(self, node: exp.Expr) -> int | None:
        """The smallest character offset recorded inside ``node``."""
        starts = [n.meta["start"] for n in node.walk() if n.meta and "start" in n.meta]
        return min(starts) if starts else None

    def text_of(self, node: exp.Expression | None) -> str:
        """``node`` as the query spells it (whitespace included), for messages; sqlglot's own
        rendering when its tokens carry no offsets."""
        if node is None:
            return ""
        spans = [
            (n.meta["start"], n.meta["end"])
            for n in node.walk()
            if n.meta
            and isinstance(n.meta.get("start"), int)
            and isinstance(n.meta.get("end"), int)
        ]
        if not spans:
            return node.sql(dialect=DIALECT)
        begin, end = min(a for a, _ in spans), max(b for _, b in spans)
        if isinstance(node, exp.Func) and not (node.meta and "start" in node.meta):
            begin = self.function_start(node) or begin
        # close the brackets opened inside the span (a call's ")" carries no offset)
        depth = sum(
            (t.token_type == TokenType.L_PAREN) - (t.token_type == TokenType.R_PAREN)
            for t in self.tokens()
            if begin <= t.start <= end
        )
        for t in self.tokens():
            if depth <= 0:
                break
            if t.start > end:
                end = t.end
                depth += (t.token_type == TokenType.L_PAREN) - (t.token_type == TokenType.R_PAREN)
        return self.text[begin : end + 1]

    def name_of(self, node: exp.Expression) -> str:
        """The function name as the query spells it (``VAR_POP``, not sqlglot's name)."""
        meta = node.meta if node.meta else {}
        start, end = meta.get("start"), meta.get("end")
        if isinstance(start, int) and isinstance(end, int):
            return self.text[start : end + 1].upper()
        if isinstance(node, exp.Anonymous):
            return node.name.upper()
        if isinstance(node, exp.Func):
            return node.sql_name()
        return node.key.upper()


def parse_error(err: ParseError) -> tuple[str, Position | None]:
    """A readable message and the start position of the token sqlglot stopped at."""
    detail = err.errors[0] if err.errors else {}
    description = str(detail.get("description") or err).split("\n")[0]
    missing = re.match(r"Required keyword: '\w+' missing for <class '[\w.]*?(\w+)'>", description)
    if missing:
        description = f"incomplete {missing.group(1).upper()}"
    highlight = str(detail.get("highlight") or "")
    line, col = detail.get("line"), detail.get("col")
    pos = None
    if isinstance(line, int) and isinstance(col, int):
        pos = (line, max(1, col - len(highlight) + 1)) if "\n" not in highlight else (line, col)
    near = f" near {highlight!r}" if highlight else ""
    return f"cannot parse the query{near}: {description}", pos
