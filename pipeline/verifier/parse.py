"""Reading a submitted value as the answer type asks: numbers (with a unit), datetimes, booleans, strings, lists.

Submissions come from language models, so the readers accept the forms a clinician would write
("4.1 mEq/L", "$1,234.50", "2150-03-04T12:30Z", "yes") and nothing looser: a hedge ("about 5",
"5 or 6") or trailing prose is unparseable rather than read generously, so it cannot earn credit.
Every reader raises `Unparseable` (a ValueError) and nothing else on bad input.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from numbers import Rational, Real
from typing import Any

MAX_TEXT = 100_000  # longer submissions are not read at all (keeps regexes and JSON linear and cheap)


class Unparseable(ValueError):
    """The submission cannot be read as the answer type."""


def _scalar(value: Any) -> Any:
    """numpy / polars-style scalars -> Python values (anything with a no-argument `.item()`)."""
    if type(value).__module__.split(".")[0] == "numpy" and hasattr(value, "item"):
        try:
            return value.item()
        except (TypeError, ValueError) as err:
            raise Unparseable(f"cannot read {type(value).__name__}") from err
    return value


def _text(value: str) -> str:
    if len(value) > MAX_TEXT:
        raise Unparseable(f"text of {len(value)} characters is too long")
    return unicodedata.normalize("NFKC", value).replace("\u2212", "-").strip()


# -- numbers

@dataclass(frozen=True)
class Number:
    """A finite number as written: exact value, the exponent of its last written digit, and its unit text."""

    value: Decimal
    exponent: int  # "4.10" -> -2, "88" -> 0, "1.2e3" -> 2
    unit: str | None = None

    def __float__(self) -> float:
        return float(self.value)


_NUMBER = re.compile(
    r"(?P<cur>\$|US\$)?\s*"
    r"(?P<num>[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?(?:[eE][+-]?\d+)?|[+-]?\.\d+(?:[eE][+-]?\d+)?)"
    r"(?P<rest>.*)", re.S)
_UNIT_CHARS = re.compile(r"(?:[^\W\d_]|[%°/$])[\w%°/^*.\-()\[\]$# ]*")
_DIGIT_START = re.compile(r"(?:^|[\s/])[+-]?\.?\d")  # a word or "/"-part that is a number: "or 6", "/80"
_HEDGES = frozenset({"or", "to", "and", "than", "approximately", "approx", "about", "around", "roughly", "nearly",
                     "almost", "over", "under", "above", "below", "between", "least", "most", "more", "less", "plus",
                     "minus", "range", "maybe", "probably", "likely", "estimated", "est", "not", "no", "unknown"})


def unit_text(rest: str) -> str | None:
    """The unit written after a number, or Unparseable when it is not a unit (prose, a hedge, another number)."""
    rest = rest.strip().rstrip(".").rstrip()  # "4.1 mg." / "4.1."
    if not rest:
        return None
    if len(rest) > 40 or not _UNIT_CHARS.fullmatch(rest):
        raise Unparseable(f"{rest!r} after the number is not a unit")
    if _DIGIT_START.search(rest) or any(t.casefold().strip(".") in _HEDGES
                                        for t in rest.replace("(", " ").replace(")", " ").split()):
        raise Unparseable(f"{rest!r} after the number is not a unit")
    if any(c in rest for c in "<>=~?!;:,\"'{}|\\±≈"):
        raise Unparseable(f"{rest!r} after the number is not a unit")
    return rest


def _finite(value: Decimal, exponent: int, unit: str | None) -> Number:
    if not value.is_finite() or not math.isfinite(float(value)):
        raise Unparseable("not a finite number")
    return Number(value, exponent, unit)


def parse_number(value: Any) -> Number:
    """int, float, Decimal, numpy scalars, or text such as "4.1", "4.1 mEq/L", " 1,234.5 ", "98.6°F", "$12"."""
    value = _scalar(value)
    if isinstance(value, bool) or value is None:
        raise Unparseable(f"{value!r} is not a number")
    if isinstance(value, int):
        return _finite(Decimal(value), 0, None)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unparseable("not a finite number")
        d = Decimal(repr(value))
        return _finite(d, int(d.as_tuple().exponent), None)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise Unparseable("not a finite number")
        return _finite(value, int(value.as_tuple().exponent), None)
    if isinstance(value, Rational | Real):
        try:
            return parse_number(float(value))
        except (OverflowError, ValueError, TypeError) as err:
            raise Unparseable(f"{value!r} is not a finite number") from err
    if not isinstance(value, str):
        raise Unparseable(f"a {type(value).__name__} is not a number")
    text = _text(value)
    m = _NUMBER.fullmatch(text)
    if m is None:
        raise Unparseable(f"{text[:60]!r} is not a number")
    try:
        d = Decimal(m["num"].replace(",", ""))
    except InvalidOperation as err:
        raise Unparseable(f"{m['num']!r} is not a number") from err
    unit = unit_text(m["rest"])
    if m["cur"]:
        if unit is not None and unit.casefold() not in ("usd", "dollars", "dollar"):
            raise Unparseable(f"a $ amount with another unit {unit!r}")
        unit = "USD"
    return _finite(d, int(d.as_tuple().exponent), unit)


# -- booleans

_TRUE = frozenset({"yes", "y", "true", "t", "1"})
_FALSE = frozenset({"no", "n", "false", "f", "0"})


def parse_bool(value: Any) -> bool:
    value = _scalar(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = _text(value).casefold().rstrip(".")
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
    raise Unparseable(f"{str(value)[:60]!r} is not yes/no")


# -- datetimes

@dataclass(frozen=True)
class Moment:
    """A calendar date with an optional time of day (None for a date-only value)."""

    day: date
    clock: time | None = None


_DATETIME = re.compile(
    r"(?P<y>\d{4})(?P<sep>[-/.])(?P<m>\d{1,2})(?P=sep)(?P<d>\d{1,2})"
    r"(?:(?:[Tt]|\s+)(?P<H>\d{1,2}):(?P<M>\d{2})(?::(?P<S>\d{2})(?:[.,](?P<f>\d{1,9}))?)?)?"
    r"\s*(?P<tz>[Zz]|UTC|utc|[+-]00(?::?00)?)?")


def parse_datetime(value: Any) -> Moment:
    """datetime/date objects or ISO-like text ("2150-03-04 12:30:00", "2150-03-04T12:30Z", "2150/03/04")."""
    if type(value).__name__ == "datetime64":  # numpy: its .item() may be an int of nanoseconds
        value = str(value)
    value = _scalar(value)
    if isinstance(value, datetime):
        offset = value.utcoffset()
        if offset not in (None, timedelta(0)):
            raise Unparseable("a time zone other than UTC")
        return Moment(value.date(), value.time().replace(tzinfo=None))
    if isinstance(value, date):
        return Moment(value)
    if not isinstance(value, str):
        raise Unparseable(f"a {type(value).__name__} is not a date")
    m = _DATETIME.fullmatch(_text(value))
    if m is None:
        raise Unparseable(f"{value[:60]!r} is not an ISO date or datetime")
    try:
        day = date(int(m["y"]), int(m["m"]), int(m["d"]))
        if m["H"] is None:
            return Moment(day)
        micro = int((m["f"] or "0")[:6].ljust(6, "0"))
        return Moment(day, time(int(m["H"]), int(m["M"]), int(m["S"] or 0), micro))
    except ValueError as err:
        raise Unparseable(f"{value[:60]!r}: {err}") from err


# -- strings

def normalise_text(value: str) -> str:
    """Case- and whitespace-insensitive form: NFKC, casefolded, runs of whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", value).casefold().split())


def as_text(value: Any) -> str:
    """A scalar submission as text (numbers as written: 5 and 5.0 -> "5"); containers are Unparseable."""
    value = _scalar(value)
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise Unparseable(f"text of {len(value)} characters is too long")
        text = value.strip()
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            text = text[1:-1]  # a JSON-quoted string
        return text
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Unparseable("not a finite number")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, Decimal) and value.is_finite() and value == value.to_integral_value():
        return str(int(value))
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    raise Unparseable(f"a {type(value).__name__} is not text")


# -- lists

_BULLET = re.compile(r"^(?:[-*•]|\d+[.)])\s+")


def parse_list(value: Any, item_type: str) -> tuple[list[Any], str | None]:
    """The items of a list submission and the separator used when it was text ("," ";" "\\n" or None).

    Accepts lists/tuples (sets when order does not matter; the caller decides), array-likes with
    `.tolist()`, a JSON array, or text separated by newlines, else semicolons, else commas. A single
    scalar is a one-item list.
    """
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        try:
            value = value.tolist()
        except (TypeError, ValueError) as err:
            raise Unparseable(f"cannot read {type(value).__name__}") from err
    if isinstance(value, list | tuple):
        return list(value), None
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr), None
    if isinstance(value, dict) or value is None:
        raise Unparseable(f"a {type(value).__name__} is not a list")
    if not isinstance(value, str):
        return [value], None
    text = _text(value)
    if text.startswith("[") and text.endswith("]"):
        try:
            items = json.loads(text)
        except (ValueError, RecursionError):
            items = None  # not JSON after all ("[MICU] ..."): read it as separated text
        if isinstance(items, list):
            return items, None
    if not text:
        return [], None
    sep = "\n" if "\n" in text else ";" if ";" in text else ","
    parts = [p.strip() for p in text.split(sep)]
    if sep == "\n" and item_type == "string":
        parts = [_BULLET.sub("", p) for p in parts]
    return [p for p in parts if p], sep
