"""GitHub Actions expressions (`${{ ... }}` and job/step `if:`), evaluated for tests.

The subset the project's workflows use, with GitHub's semantics: literals ('text' with '' for a
quote, numbers, true, false, null), property paths (`github.event.pull_request.number`,
`needs.x.outputs.y`; a missing property is null), `!`, `==` and `!=` (strings compared ignoring
case, as GitHub does), `&&` and `||` returning an operand (as in JavaScript), parentheses, and the
functions `startsWith`, `format`, `fromJSON`, `always`, `cancelled`, `success`, `failure`.
An `if:` without `${{` is an expression, and a job's `if:` without a status function is
`success() && (...)`, as GitHub documents.

Docs: https://docs.github.com/en/actions/reference/workflows-and-actions/expressions
"""

from __future__ import annotations

import json
import re
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+(?:\.\d+)?)|(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||[!().,\[\]])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
STATUS_FUNCTIONS = ("always(", "cancelled(", "success(", "failure(")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"cannot read the expression at {text[pos : pos + 20]!r}")
        kind = match.lastgroup
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "", -0.0)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    return a == b


class _Parser:
    def __init__(self, text: str, context: dict, status: str) -> None:
        self.tokens, self.i, self.context, self.status = _tokens(text), 0, context, status

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.i]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expected {expected!r}, got {token[1]!r}")
        self.i += 1
        return token

    def parse(self) -> Any:
        value = self.or_()
        if self.i != len(self.tokens):
            raise ValueError(f"unexpected {self.peek()!r}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "||":
            self.take()
            right = self.and_()
            value = value if _truthy(value) else right
        return value

    def and_(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            value = right if _truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.peek() in ("==", "!="):
            op = self.take()[1]
            right = self.unary()
            value = _equal(value, right) if op == "==" else not _equal(value, right)
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not _truthy(self.unary())
        return self.primary()

    def primary(self) -> Any:
        kind, text = self.take()
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if self.peek() == "(":
            return self.call(text)
        value: Any = self.context.get(text)
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
            else:
                key = self.or_()
                self.take("]")
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def call(self, name: str) -> Any:
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.or_())
            if self.peek() == ",":
                self.take()
        self.take(")")
        if name == "startsWith":
            return isinstance(args[0], str) and isinstance(args[1], str) and args[0].lower().startswith(args[1].lower())
        if name == "format":
            return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))]), args[0])
        if name == "fromJSON":
            return json.loads(args[0])
        if name == "always":
            return True
        if name == "cancelled":
            return self.status == "cancelled"
        if name == "success":
            return self.status == "success"
        if name == "failure":
            return self.status == "failure"
        raise ValueError(f"function {name} is not in this evaluator's subset")


def evaluate(text: str, context: dict, status: str = "success") -> Any:
    """The value of one expression (without `${{ }}`) in `context` (github, needs, inputs, vars, env, steps)."""
    return _Parser(text, context, status).parse()


def substitute(text: str, context: dict) -> str:
    """`text` with each `${{ expr }}` replaced by its value as GitHub writes it into a string."""

    def one(match: re.Match) -> str:
        value = evaluate(match.group(1), context)
        return "" if value is None else ("true" if value is True else "false" if value is False else str(value))

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(text), flags=re.DOTALL)


def job_runs(job: dict, context: dict, needs_status: str = "success") -> bool:
    """Whether GitHub starts `job`: its `if:` (success() implied without a status function);
    `needs_status` is what its needed jobs ended as (a skipped need fails an implied success())."""
    condition = str(job.get("if", "")).strip()
    if condition.startswith("${{") and condition.endswith("}}"):
        condition = condition[3:-2]
    if not condition:
        return needs_status == "success"
    if not any(f in condition for f in STATUS_FUNCTIONS):
        condition = f"success() && ({condition})"
    return _truthy(evaluate(condition, context, needs_status))
