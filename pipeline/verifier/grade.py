"""Grade one agent submission against the expected outcome of a benchmark item.

The verifier is the reward of the environment, so it is exact (one stable reason code per failure),
tolerant only where a clinician would be (number formatting, units with a known conversion, ISO
date spellings, case and whitespace, list order when order does not matter), and not gameable by
abstaining: abstaining on an answerable item always fails, and with a trajectory an abstention
counts only after the agent read the evidence (`evidence.py`). Bad submissions produce a Grade,
never an exception; only a malformed `Expected` raises ValueError.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from pipeline.noise.types import Outcome
from pipeline.tasks.template import ANSWER_TYPES, AnswerSpec
from pipeline.verifier.evidence import ToolCall, as_tool_calls, has_evidence
from pipeline.verifier.parse import (
    Moment,
    Number,
    Unparseable,
    as_text,
    normalise_text,
    parse_bool,
    parse_datetime,
    parse_list,
    parse_number,
)
from pipeline.verifier.units import UnitConversion, find_route, same_unit

REASONS = ("correct", "wrong_value", "wrong_unit", "unparseable", "wrong_length", "abstained_on_answerable",
           "answered_on_unanswerable", "abstention_without_evidence", "invalid_status")
_STATUS = {"answered": "answered", "answer": "answered",
           "abstained": "abstained", "abstain": "abstained", "abstention": "abstained"}
RELATIVE = 1e-6  # the floor of every number tolerance, relative to the larger magnitude (as in same_answer)


@dataclass(frozen=True)
class Grade:
    correct: bool
    reward: float  # 1.0 if correct else 0.0
    reason: str  # one of REASONS
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"correct": self.correct, "reward": self.reward, "reason": self.reason, "detail": self.detail}


def _grade(reason: str, detail: str = "") -> Grade:
    return Grade(reason == "correct", 1.0 if reason == "correct" else 0.0, reason, detail[:300])


@dataclass(frozen=True)
class Submission:
    answer: Any = None
    status: str = "answered"  # "answered" | "abstained"
    unit: str | None = None

    @classmethod
    def coerce(cls, obj: Any) -> Submission:
        """A Submission, a dict {"answer", "status", "unit"} (missing keys default), or a bare answer value."""
        if isinstance(obj, Submission):
            return obj
        if isinstance(obj, Mapping):
            status = obj.get("status")
            return cls(answer=obj.get("answer", obj.get("value")), status="answered" if status is None else status,
                       unit=obj.get("unit"))
        return cls(answer=obj)


@dataclass(frozen=True)
class Expected:
    outcome: Outcome  # what a robust agent should return
    spec: AnswerSpec  # answer type, tolerance, ordered ...
    recoverable: bool = True  # clean items and recoverable noise: abstaining is a failure
    conversions: tuple[UnitConversion, ...] = ()  # analyte-specific conversions allowed for this item
    evidence_tables: tuple[str, ...] = ()  # reading one of these counts as checking the evidence
    entity_ids: tuple[int, ...] = ()  # ids named in the question; empty = population question

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise the containers once, here
        if isinstance(self.evidence_tables, str):
            set_(self, "evidence_tables", (self.evidence_tables,))
        if isinstance(self.entity_ids, int):
            set_(self, "entity_ids", (self.entity_ids,))
        try:
            set_(self, "conversions", tuple(UnitConversion.from_dict(c) for c in self.conversions))
            set_(self, "evidence_tables", tuple(str(t) for t in self.evidence_tables))
            set_(self, "entity_ids", tuple(int(i) for i in self.entity_ids))
        except TypeError as err:
            raise ValueError(f"malformed Expected: {err}") from err
        if not isinstance(self.outcome, Outcome) or not isinstance(self.spec, AnswerSpec):
            raise ValueError("Expected needs an Outcome and an AnswerSpec")
        if self.spec.type not in ANSWER_TYPES or (self.spec.type == "list" and self.spec.item_type == "list"):
            raise ValueError(f"unknown answer type {self.spec.type!r} (item type {self.spec.item_type!r})")
        if not isinstance(self.spec.tolerance, int | float) or not self.spec.tolerance >= 0:
            raise ValueError(f"tolerance must be a non-negative number, got {self.spec.tolerance!r}")
        if self.outcome.kind == "abstain":
            if self.recoverable:
                raise ValueError("an abstain outcome is not recoverable; pass recoverable=False")
            return
        if self.outcome.kind != "answer":
            raise ValueError(f"outcome kind must be 'answer' or 'abstain', got {self.outcome.kind!r}")
        _expected_items(self)  # raises ValueError if the gold value does not read as its type

    @property
    def unit(self) -> str | None:
        return self.outcome.unit if self.outcome.unit is not None else self.spec.unit

    def to_dict(self) -> dict[str, Any]:
        return {"outcome": self.outcome.to_dict(), "spec": self.spec.to_dict(), "recoverable": self.recoverable,
                "conversions": [c.to_dict() for c in self.conversions],
                "evidence_tables": list(self.evidence_tables), "entity_ids": list(self.entity_ids)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Expected:
        try:
            outcome = d["outcome"] if isinstance(d["outcome"], Outcome) else Outcome.from_dict(d["outcome"])
            spec = d["spec"] if isinstance(d["spec"], AnswerSpec) else AnswerSpec(**d["spec"])
            recoverable = d.get("recoverable")
            return cls(outcome, spec, outcome.kind == "answer" if recoverable is None else bool(recoverable),
                       tuple(d.get("conversions") or ()), tuple(d.get("evidence_tables") or ()),
                       tuple(d.get("entity_ids") or ()))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"malformed Expected: {err!r}") from err

    @classmethod
    def for_label(cls, outcome: Outcome, spec: AnswerSpec, label: str | None, unit: str | None = None,
                  **kwargs: Any) -> Expected:
        """An Expected whose conversions are `clinical.CONVERSIONS` for the analyte `label` in its stored unit
        (`unit`, else the outcome's or spec's unit), added to any `conversions` passed."""
        from pipeline.noise.clinical import conversions_for

        stored = unit or outcome.unit or spec.unit
        extra = tuple(UnitConversion.from_dict(c) for c in conversions_for(label, stored))
        return cls(outcome, spec, conversions=tuple(kwargs.pop("conversions", ())) + extra, **kwargs)


# -- comparing one value

class _Fail(Exception):
    """A submitted item that fails before comparison (reason: unparseable or wrong_unit)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class _Num:
    """A submitted number in the expected unit; `exact` when it was not converted; `allowance` for the
    rounding of a value written in another unit."""

    value: float
    exact: Decimal | None
    allowance: float = 0.0


def _clamp(exponent: int) -> int:
    return max(-300, min(300, exponent))


class _Numbers:
    """number / integer answers: tolerance, units and conversions."""

    def __init__(self, spec: AnswerSpec, unit: str | None, conversions: tuple[UnitConversion, ...], integer: bool):
        self.tolerance = float(spec.tolerance)
        self.unit = unit
        self.conversions = conversions
        self.exact = integer and not spec.tolerance
        self.key: Callable[[Any], Any] | None = None

    def expect(self, value: Any) -> Number:
        return parse_number(value)

    def to_unit(self, n: Number, unit: str | None) -> _Num:
        if n.unit is not None and unit is not None and not same_unit(n.unit, unit):
            raise _Fail("wrong_unit", f"the answer says {n.unit!r} but the unit field says {unit!r}")
        written = n.unit or unit
        value = float(n.value)
        if self.unit is None or written is None or same_unit(written, self.unit):
            return _Num(value, n.value)
        route = find_route(written, self.unit, self.conversions)
        if route is None:
            raise _Fail("wrong_unit", f"{written!r} is not {self.unit!r} and no conversion between them is known")
        converted = route.apply(value)
        if not math.isfinite(converted):
            raise _Fail("unparseable", "not a finite number after unit conversion")
        # Half a unit of the last digit written, but never coarser than the unit's usual reporting precision
        # (or three significant digits): answering "0 days" or "1 g" must not buy a wide tolerance.
        if route.decimals is not None:
            cap = 10.0 ** _clamp(-route.decimals)
        else:
            cap = 10.0 ** _clamp(n.value.adjusted() - 2) if n.value else 0.0
        allowance = 0.5 * min(10.0 ** _clamp(n.exponent), cap) * abs(route.scale)
        return _Num(converted, None, allowance)

    def submit(self, value: Any, unit: str | None) -> _Num:
        try:
            return self.to_unit(parse_number(value), unit)
        except Unparseable as err:
            raise _Fail("unparseable", str(err)) from err

    def same(self, e: Number, s: _Num) -> bool:
        if self.exact and s.exact is not None:
            return s.exact == e.value
        a, b = float(e.value), s.value
        return abs(a - b) <= max(self.tolerance, RELATIVE * max(abs(a), abs(b), 1.0)) + s.allowance


@dataclass(frozen=True)
class _Text:
    norm: str
    bare: str | None = None  # without a trailing unit equal to the expected unit
    number: _Num | Number | None = None
    numeric_only: bool = False  # the unit field names another (convertible) unit: only the number counts


_TRAILING_UNIT = re.compile(r"(?P<body>.*?\S)\s*(?P<unit>(?:[^\W\d_]|[%°$])[^\d]*)", re.S)


class _Strings:
    """string answers: case/whitespace-insensitive; a string with a unit (a dose "1000" mg) also matches
    "1000 mg" and, when it is a number, "1 g"."""

    def __init__(self, spec: AnswerSpec, unit: str | None, conversions: tuple[UnitConversion, ...]):
        self.unit = unit
        self.numbers = _Numbers(spec, unit, conversions, integer=False)
        self.key: Callable[[Any], Any] | None = (lambda t: t.norm) if unit is None else None

    def expect(self, value: Any) -> _Text:
        text = as_text(value)
        number = None
        if self.unit is not None:
            try:
                number = parse_number(text)
            except Unparseable:
                number = None
            number = number if number is not None and number.unit is None else None
        return _Text(normalise_text(text), number=number)

    def submit(self, value: Any, unit: str | None) -> _Text:
        try:
            text = as_text(value)
        except Unparseable as err:
            raise _Fail("unparseable", str(err)) from err
        norm = normalise_text(text)
        if self.unit is None:
            return _Text(norm)
        bare = None
        m = _TRAILING_UNIT.fullmatch(text) if len(text) <= 200 else None
        if m is not None and same_unit(m["unit"].strip(), self.unit):
            bare = normalise_text(m["body"])
        number: _Num | None = None
        try:
            number = self.numbers.to_unit(parse_number(text), unit)
        except (Unparseable, _Fail):
            number = None
        if unit is not None and not same_unit(unit, self.unit):
            if number is None:
                raise _Fail("wrong_unit", f"unit {unit!r} is not {self.unit!r}")
            return _Text(norm, number=number, numeric_only=True)
        return _Text(norm, bare, number)

    def same(self, e: _Text, s: _Text) -> bool:
        if isinstance(e.number, Number) and isinstance(s.number, _Num) and self.numbers.same(e.number, s.number):
            return True
        return not s.numeric_only and e.norm in (s.norm, s.bare)


class _Booleans:
    def __init__(self) -> None:
        self.key: Callable[[Any], Any] | None = bool

    def expect(self, value: Any) -> bool:
        return parse_bool(value)

    def submit(self, value: Any, unit: str | None) -> bool:
        try:
            return parse_bool(value)
        except Unparseable as err:
            raise _Fail("unparseable", str(err)) from err

    def same(self, e: bool, s: bool) -> bool:
        return e == s


class _Datetimes:
    """A date-only gold value matches any submission on that day; a datetime needs the same minute (and
    the same second when the gold seconds are not zero)."""

    def __init__(self) -> None:
        self.key: Callable[[Any], Any] | None = None

    def expect(self, value: Any) -> Moment:
        return parse_datetime(value)

    def submit(self, value: Any, unit: str | None) -> Moment:
        try:
            return parse_datetime(value)
        except Unparseable as err:
            raise _Fail("unparseable", str(err)) from err

    def same(self, e: Moment, s: Moment) -> bool:
        if e.day != s.day:
            return False
        if e.clock is None:
            return True
        if s.clock is None:
            return False
        return (e.clock.hour, e.clock.minute) == (s.clock.hour, s.clock.minute) and (
            e.clock.second == 0 or e.clock.second == s.clock.second)


_Comparator = _Numbers | _Strings | _Booleans | _Datetimes


def _comparator(kind: str, expected: Expected) -> _Comparator:
    if kind in ("number", "integer"):
        return _Numbers(expected.spec, expected.unit, expected.conversions, integer=kind == "integer")
    if kind == "string":
        return _Strings(expected.spec, expected.unit, expected.conversions)
    if kind == "boolean":
        return _Booleans()
    if kind == "datetime":
        return _Datetimes()
    raise ValueError(f"unknown answer type {kind!r}")


def _expected_items(expected: Expected) -> tuple[_Comparator, list[Any]]:
    """The comparator and the parsed gold value(s); ValueError when the gold value is malformed."""
    spec, value = expected.spec, expected.outcome.value
    kind = spec.item_type if spec.type == "list" else spec.type
    cmp = _comparator(kind, expected)
    if spec.type == "list" and not isinstance(value, list | tuple):
        raise ValueError(f"a list answer needs a list gold value, got {value!r}")
    try:
        return cmp, [cmp.expect(v) for v in (value if spec.type == "list" else [value])]
    except Unparseable as err:
        raise ValueError(f"malformed gold value {value!r} for type {kind!r}: {err}") from err


# -- lists

def _matching(n: int, ok: Callable[[int, int], bool]) -> bool:
    """Is there a perfect matching of gold items to submitted items? (augmenting paths, found breadth-first)"""
    owner: list[int] = [-1] * n  # submitted item -> gold item
    for start in range(n):
        parent: dict[int, int] = {}  # submitted item -> the gold item that reached it
        frontier, found = [start], -1
        while frontier and found < 0:
            nxt = []
            for i in frontier:
                for j in range(n):
                    if j not in parent and ok(i, j):
                        parent[j] = i
                        if owner[j] < 0:
                            found = j
                            break
                        nxt.append(owner[j])
                if found >= 0:
                    break
            frontier = nxt
        if found < 0:
            return False
        j = found
        while True:  # flip the path back to `start`
            i = parent[j]
            previous = next((k for k in range(n) if owner[k] == i), -1)
            owner[j] = i
            if i == start:
                break
            j = previous
    return True


def _segments(text: str, golds: list[str], ordered: bool) -> list[str] | None:
    """A comma-separated text cut so that every piece is one gold string, for gold items that contain
    commas ("Acute kidney failure, unspecified, Hyperlipidemia, unspecified"); None if no cut works."""
    pieces = text.split(",")
    span = max(g.count(",") for g in golds) + 1  # a piece joins at most this many comma-separated parts
    if len(pieces) > 50 * len(golds) + span:
        return None
    remaining = Counter(golds)

    def fits(piece: str, position: int) -> bool:
        if ordered:
            return position < len(golds) and golds[position] == piece
        return remaining[piece] > 0

    def cut(i: int, out: list[str]) -> list[str] | None:
        if i == len(pieces):
            return out if len(out) == len(golds) else None
        for j in range(i + 1, min(i + span, len(pieces)) + 1):
            raw = ",".join(pieces[i:j])
            piece = normalise_text(raw)
            if fits(piece, len(out)):
                remaining[piece] -= 1
                found = cut(j, [*out, raw])
                remaining[piece] += 1
                if found is not None:
                    return found
        return None

    return cut(0, [])


def _grade_items(cmp: _Comparator, golds: list[Any], items: list[Any], unit: str | None, ordered: bool) -> Grade:
    if len(items) != len(golds):
        return _grade("wrong_length", f"expected {len(golds)} items, got {len(items)}")
    subs = []
    for i, item in enumerate(items):
        try:
            subs.append(cmp.submit(item, unit))
        except _Fail as fail:
            return _grade(fail.reason, f"item {i + 1}: {fail.detail}")
    if ordered:
        for i, (e, s) in enumerate(zip(golds, subs, strict=True)):
            if not cmp.same(e, s):
                return _grade("wrong_value", f"item {i + 1} differs")
        return _grade("correct")
    key = cmp.key
    if key is not None:
        same = Counter(map(key, golds)) == Counter(map(key, subs))
    else:
        same = _matching(len(golds), lambda i, j: cmp.same(golds[i], subs[j]))
    return _grade("correct" if same else "wrong_value", "" if same else "the items differ (order ignored)")


def _grade_list(expected: Expected, cmp: _Comparator, golds: list[Any], sub: Submission, unit: str | None) -> Grade:
    spec = expected.spec
    if spec.ordered and isinstance(sub.answer, set | frozenset):
        return _grade("unparseable", "a set has no order")
    try:
        items, sep = parse_list(sub.answer, spec.item_type)
    except Unparseable as err:
        return _grade("unparseable", str(err))
    result = _grade_items(cmp, golds, items, unit, spec.ordered)
    if result.correct or sep != "," or not isinstance(cmp, _Strings) or cmp.unit is not None:
        return result
    gold_texts = [g.norm for g in golds]
    if not any("," in g for g in gold_texts):
        return result
    segments = _segments(str(sub.answer), gold_texts, spec.ordered)
    return result if segments is None else _grade_items(cmp, golds, segments, unit, spec.ordered)


# -- grade

def _unit_field(unit: Any) -> str | None:
    if unit is None:
        return None
    text = unit.strip() if isinstance(unit, str) else str(unit)
    return text or None


def _compare(expected: Expected, sub: Submission) -> Grade:
    cmp, golds = _expected_items(expected)
    unit = _unit_field(sub.unit)
    if expected.spec.type == "list":
        return _grade_list(expected, cmp, golds, sub, unit)
    answer = sub.answer
    if isinstance(answer, list | tuple) and len(answer) == 1:  # ["5"] for 5
        answer = answer[0]
    try:
        s = cmp.submit(answer, unit)
    except _Fail as fail:
        return _grade(fail.reason, fail.detail)
    if cmp.same(golds[0], s):
        return _grade("correct")
    return _grade("wrong_value", f"expected {expected.outcome.value!r}"[:120])


def grade(expected: Expected | Mapping[str, Any], submission: Submission | Mapping[str, Any] | Any,
          trajectory: Sequence[Mapping[str, Any]] | Sequence[ToolCall] | None = None) -> Grade:
    """Grade a submission; see the module docstring. `trajectory` (chat messages or ToolCalls) switches on
    the evidence requirement for abstentions."""
    if not isinstance(expected, Expected):
        if not isinstance(expected, Mapping):
            raise ValueError(f"expected must be an Expected or its dict, got {type(expected).__name__}")
        expected = Expected.from_dict(expected)
    sub = Submission.coerce(submission)
    status = _STATUS.get(sub.status.strip().casefold()) if isinstance(sub.status, str) else None
    if status is None:
        return _grade("invalid_status", f"status {str(sub.status)[:40]!r} is not answered/abstained")
    if status == "abstained" and sub.answer is not None:
        return _grade("invalid_status", "an abstention must not carry an answer")
    if expected.outcome.kind == "abstain":
        if status == "answered":
            return _grade("answered_on_unanswerable", f"expected an abstention ({expected.outcome.reason})")
        if trajectory is not None and not has_evidence(as_tool_calls(trajectory), expected.evidence_tables,
                                                       expected.entity_ids):
            return _grade("abstention_without_evidence",
                          f"no successful query read {', '.join(expected.evidence_tables) or 'the data'}"
                          + (f" for {', '.join(map(str, expected.entity_ids))}" if expected.entity_ids else ""))
        return _grade("correct")
    if status == "abstained":
        return _grade("abstained_on_answerable", "the item is answerable")
    try:
        return _compare(expected, sub)
    except (ValueError, TypeError, ArithmeticError, RecursionError) as err:  # a safety net: never raise on input
        return _grade("unparseable", f"{type(err).__name__}: {err}")
