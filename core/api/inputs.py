"""Input validation every request shares: the one place that decides which text,
JSON and instants may reach PostgreSQL, the cron arithmetic and the workers.

* Text: no NUL (PostgreSQL text and jsonb refuse it) and no unpaired UTF-16
  surrogate (`"\\ud800"` in JSON decodes to one; it cannot be encoded as UTF-8,
  so psycopg would fail). Checked in query parameters and form fields
  (config/middleware.py), in every string of a JSON body, keys included
  (StrictJSONParser), and in the JSON the console accepts (loads_json).
* JSON: at most MAX_JSON_DEPTH levels of nesting (a deeper document would
  exhaust the parser's or the database driver's recursion), numbers finite
  (`NaN`, `Infinity` and `1e999` are not JSON values PostgreSQL stores).
  JSON text (API bodies, the console's JSON fields) goes through loads_json; a
  value that is already Python (a service's argument, whoever the caller) through
  check_json_value: the same rules.
* Instants: aware, and between MIN_INSTANT and MAX_INSTANT, so converting one to
  any zone, and the cron arithmetic around it, stays inside datetime's range.

Each failure names the field it is about.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any

from rest_framework import exceptions, parsers

from core.errors import AppError

MAX_JSON_DEPTH = 32
# dispatch/timing/cron.py computes up to the year 9000; a year of margin past the last
# accepted instant keeps its look-ahead (next occurrence, yearly schedules) in range.
MIN_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
MAX_INSTANT = datetime(8999, 12, 31, 23, 59, 59, tzinfo=UTC)
RANGE_TEXT = "1970-01-01T00:00:00Z..8999-12-31T23:59:59Z"

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
# JSON strings (escapes included) are skipped when counting nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


class InvalidInput(AppError):
    """Bad input, about one field; the API answers it as 400 `invalid` (core/api/errors.py)."""

    code = "invalid"
    status = 400

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(
            f"{field}: {reason}" if field else reason,
            detail={field or "non_field_errors": [reason]},
        )
        self.field = field
        self.reason = reason


def text_problem(value: str) -> str | None:
    """Why `value` cannot be stored as text, or None."""
    bad = _BAD_CHAR.search(value)
    if bad is None:
        return None
    if bad.group() == "\x00":
        return "contains a NUL character"
    return "contains an unpaired UTF-16 surrogate (not valid Unicode text)"


def check_text(value: str, field: str) -> str:
    problem = text_problem(value)
    if problem:
        raise InvalidInput(field, problem)
    return value


NOT_FINITE = "is not a finite number (NaN and Infinity cannot be stored)"
DEEPER = f"is nested deeper than {MAX_JSON_DEPTH} levels"


def json_value_problem(value: Any, field: str = "") -> tuple[str, str] | None:
    """(path, reason) for the first part of `value` that PostgreSQL's jsonb cannot store:
    a string or key that is not storable text, a non-finite float, nesting past
    MAX_JSON_DEPTH, or a value that is not JSON at all; None when it can store it.

    The rule for a value already in Python (a service's caller may never have had
    JSON text); loads_json applies the same rule to text. No recursion: a value
    nested thousands deep is an answer, not a RecursionError.
    """
    # (path, value, how many containers enclose it), in document order.
    stack: list[tuple[str, Any, int]] = [(field, value, 0)]
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return path, problem
        elif isinstance(item, float):
            if not math.isfinite(item):
                return path, NOT_FINITE
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                # The whole value is refused: named like loads_json names it.
                return field, DEEPER
            pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
            children: list[tuple[str, Any, int]] = []
            for key, child in pairs:
                key = str(key)
                # A path is shown (a page, a JSON answer): a lone surrogate in a key
                # would make it unencodable, so it is shown as its escape.
                shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
                child_path = f"{path}.{shown}" if path else shown
                if isinstance(item, Mapping):
                    # The key itself is stored too; report it under the path it starts.
                    problem = text_problem(key)
                    if problem:
                        return child_path, problem
                children.append((child_path, child, depth + 1))
            stack.extend(reversed(children))
        elif item is not None and not isinstance(item, int):  # bool is an int
            return path, f"is not a JSON value (a {type(item).__name__})"
    return None


def check_json_value(value: Any, field: str = "") -> Any:
    """`value`, or InvalidInput naming the first part of it jsonb cannot store."""
    problem = json_value_problem(value, field)
    if problem:
        raise InvalidInput(*problem)
    return value


# Every byte but the brackets, deleted before json_depth counts (a 1,000-job batch is
# 160 KB: walking each byte in Python cost more than parsing it).
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(raw: bytes) -> int:
    """How deeply `raw` nests arrays and objects (strings ignored), without recursion."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for char in brackets:
        if char in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in b"]}":
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]} is out of range")
    return value


def loads_json(raw: str | bytes, field: str = "") -> Any:
    """Parse JSON the platform can store: bounded depth, finite numbers, storable text.

    Raises InvalidInput naming `field` (or the offending path inside it).
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if json_depth(data) > MAX_JSON_DEPTH:
        raise InvalidInput(field, DEEPER)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(field, "is not valid UTF-8 text") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as exc:
        raise InvalidInput(field, f"is not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # a non-finite number, or an integer past Python's digit limit
        raise InvalidInput(field, f"is not valid JSON ({exc})") from None
    if b"\\u" not in data:
        # Strict JSON refuses raw control characters in strings and UTF-8 cannot carry
        # a surrogate: only a backslash-u escape decodes to a NUL or an unpaired
        # surrogate, so a document without one needs no walk through its strings.
        return value
    return check_json_value(value, field)


class StrictJSONParser(parsers.JSONParser):
    """The API's JSON parser: loads_json's rules, errors in the API's shape.

    Malformed JSON stays a ParseError (400 `malformed`); storable-but-wrong
    content is a ValidationError naming the field (400 `invalid`).
    """

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Any = None
    ) -> Any:
        raw = stream.read() if stream is not None else b""
        try:
            return loads_json(raw)
        except InvalidInput as exc:
            if exc.reason.startswith(("is not valid JSON", "is not valid UTF-8")):
                raise exceptions.ParseError(f"JSON parse error - {exc.reason}") from None
            raise exceptions.ValidationError(exc.detail) from None


def check_instant(value: datetime, field: str) -> datetime:
    """`value` as a UTC instant inside the supported range; InvalidInput naming `field` otherwise."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(field, "must carry a zone offset or Z, e.g. 2026-12-01T10:00:00Z")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(field, f"must be between {RANGE_TEXT}") from None
    if not MIN_INSTANT <= utc <= MAX_INSTANT:
        raise InvalidInput(field, f"must be between {RANGE_TEXT}")
    return utc


def parse_instant(raw: str, field: str) -> datetime:
    """An ISO 8601 instant with an offset (or Z), inside the supported range."""
    check_text(raw, field)
    try:
        value = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(
            field, "must be an ISO 8601 instant, e.g. 2026-03-29T00:00:00Z"
        ) from None
    return check_instant(value, field)


def query_problem(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, reason) for the first query parameter or form field that is not storable text."""
    getlist = getattr(params, "getlist", None)
    for key in params:
        problem = text_problem(str(key))
        if problem:
            return repr(str(key))[1:-1], problem
        values = getlist(key) if getlist else [params[key]]
        for value in values:
            problem = text_problem(value) if isinstance(value, str) else None
            if problem:
                return str(key), problem
    return None
