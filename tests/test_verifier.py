"""Property tests of the answer verifier (pipeline.verifier): tolerant where clinicians are, exact elsewhere,
never raising on submissions, and not gameable by abstaining."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline.noise.clinical import CONVERSIONS, LIMITS
from pipeline.noise.types import Outcome
from pipeline.tasks.template import AnswerSpec
from pipeline.verifier import (
    Expected,
    Grade,
    Submission,
    ToolCall,
    UnitConversion,
    grade,
    tool_calls_from_messages,
)
from pipeline.verifier.grade import REASONS

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def answer(value: Any, type_: str = "number", unit: str | None = None, tolerance: float = 0.0,
           **spec: Any) -> Expected:
    return Expected(Outcome.answer(value, unit), AnswerSpec(type=type_, tolerance=tolerance, **spec))


def abstain(tables: tuple[str, ...] = ("labevents",), ids: tuple[int, ...] = (10001,)) -> Expected:
    return Expected(Outcome.abstain("missing_evidence"), AnswerSpec(type="number"), recoverable=False,
                    evidence_tables=tables, entity_ids=ids)


def passes(expected: Expected, submission: Any, trajectory: Any = None) -> bool:
    result = grade(expected, submission, trajectory)
    assert isinstance(result, Grade) and result.reason in REASONS
    assert result.correct == (result.reason == "correct") and result.reward == float(result.correct)
    return result.correct


def reason(expected: Expected, submission: Any, trajectory: Any = None) -> str:
    return grade(expected, submission, trajectory).reason


# -- numbers

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
tolerances = st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.5, 2.0])


def allowed(a: float, tolerance: float) -> float:
    return max(tolerance, 1e-6 * max(abs(a), 1.0))


@SETTINGS
@given(finite, tolerances, st.floats(min_value=-0.99, max_value=0.99))
def test_any_number_within_tolerance_passes(a: float, tolerance: float, fraction: float) -> None:
    b = a + fraction * allowed(a, tolerance)
    exp = answer(a, tolerance=tolerance)
    assert passes(exp, b)
    assert passes(exp, repr(b))
    assert passes(exp, Decimal(repr(b)))
    assert passes(exp, {"answer": f"  {b!r}  ", "status": "Answered"})


@SETTINGS
@given(finite, tolerances, st.floats(min_value=1.5, max_value=1e3), st.sampled_from([-1, 1]))
def test_any_number_outside_tolerance_fails(a: float, tolerance: float, factor: float, sign: int) -> None:
    b = a + sign * factor * max(tolerance, 2e-6 * max(abs(a), 1.0))
    assert reason(answer(a, tolerance=tolerance), b) == "wrong_value"
    assert reason(answer(a, tolerance=tolerance), str(b)) == "wrong_value"


@SETTINGS
@given(finite, st.floats(min_value=-0.49, max_value=0.49), st.sampled_from(["mEq/L", "mm Hg", "%", "°F", "kg"]),
       st.sampled_from(["{v:,.8f}", "{v:.8f}", " {v:.9f} ", "{v:+.8f}", "{v:.8e}"]), st.sampled_from(["", " "]))
def test_number_formatting_and_unit_variants(a: float, fraction: float, unit: str, fmt: str, space: str) -> None:
    b = a + fraction * allowed(a, 0.01)
    variants = {"mm Hg": ["mmHg", "mm hg", "MMHG"], "°F": ["°F", "F", "degF"], "mEq/L": ["meq/l", "MEQ/L"],
                "%": ["%", "percent"], "kg": ["kg", "kgs", "Kg"]}[unit]
    exp = answer(a, unit=unit, tolerance=0.01)
    text = fmt.format(v=b)
    for written in variants:
        assert passes(exp, f"{text}{space}{written}"), (text, written)
        assert passes(exp, {"answer": text, "unit": written})
    assert passes(exp, text)  # no unit: read in the expected unit


@SETTINGS
@given(st.integers(min_value=-10**15, max_value=10**15), st.sampled_from([None, "patients", "admissions"]))
def test_integers_match_exactly(n: int, unit: str | None) -> None:
    exp = answer(n, "integer", unit=unit)
    for form in (n, float(n) if abs(n) < 2**53 else n, str(n), f"{n}.0", Decimal(n), f"{n:,}"):
        assert passes(exp, form), form
    if unit:
        assert passes(exp, f"{n} {unit}") and passes(exp, f"{n} {unit.rstrip('s')}")
    assert reason(exp, n + 1) == "wrong_value"
    assert reason(exp, f"{n}.5") == "wrong_value"
    assert reason(exp, str(n - 1)) == "wrong_value"


def test_numbers_reject_non_numbers_and_hedges() -> None:
    exp = answer(5.0, unit="mg", tolerance=0.1)
    for bad in (True, False, None, "five", "about 5", "~5", "5 or 6", "5-6 mg", "5 mg approx", "<5", [5, 6], {"a": 5},
                float("nan"), float("inf"), "-inf", "1e400", "5,5", Decimal("NaN"), Decimal("sNaN")):
        assert reason(exp, bad) in ("unparseable", "wrong_length"), bad
    assert reason(exp, "5 furlongs") == "wrong_unit"
    assert reason(exp, {"answer": "5 mg", "unit": "g"}) == "wrong_unit"  # two units that disagree
    assert passes(answer(6774.79, unit="USD", tolerance=0.01), "$6,774.79")


# -- units

def _lab_cases() -> list[tuple[str, Any]]:
    return [(label, conv) for label, convs in CONVERSIONS.items() for conv in convs]


@st.composite
def lab_values(draw: st.DrawFn) -> tuple[str, Any, float]:
    label, conv = draw(st.sampled_from(_lab_cases()))
    limits = LIMITS.get(label)
    lo = limits.lo if limits is not None and limits.lo is not None else 0.1
    hi = limits.hi if limits is not None and limits.hi is not None else 1000.0
    return label, conv, round(draw(st.floats(min_value=max(lo, 0.01), max_value=hi)), 6)


@SETTINGS
@given(lab_values(), st.sampled_from([0.0, 0.001, 0.01, 0.1]), st.sampled_from(["{y} {u}", "{y}{u}", "{y}"]))
def test_a_lab_value_reported_in_another_unit_passes(case: tuple[str, Any, float], tolerance: float,
                                                     fmt: str) -> None:
    label, conv, x = case
    exp = Expected.for_label(Outcome.answer(x, conv.unit), AnswerSpec("number", tolerance=tolerance), label)
    y = f"{round(conv.forward(x), conv.decimals):.{conv.decimals}f}"
    if fmt == "{y}":
        assert passes(exp, {"answer": y, "unit": conv.to})
    else:
        assert passes(exp, fmt.format(y=y, u=conv.to))


@SETTINGS
@given(lab_values())
def test_a_lab_value_converted_the_wrong_way_fails(case: tuple[str, Any, float]) -> None:
    label, conv, x = case
    exp = Expected.for_label(Outcome.answer(x, conv.unit), AnswerSpec("number", tolerance=0.01), label)
    wrong = round(conv.back(x), max(conv.decimals, 2))  # divided instead of multiplied
    slack = 0.01 + 1e-6 * abs(x) + 10 ** -max(conv.decimals, 2) / abs(conv.scale)
    assume(abs(conv.back(wrong) - x) > 2 * slack)
    assert reason(exp, f"{wrong} {conv.to}") == "wrong_value"
    forgot = round(x, conv.decimals)  # the stored number, relabelled
    assume(abs(conv.back(forgot) - x) > 2 * slack)
    assert reason(exp, {"answer": forgot, "unit": conv.to}) == "wrong_value"


@SETTINGS
@given(lab_values(), st.sampled_from(["furlongs", "mEq", "IU/L", "bpm", "cells", "mmol/mol"]))
def test_an_unknown_unit_fails(case: tuple[str, Any, float], unit: str) -> None:
    label, conv, x = case
    exp = Expected.for_label(Outcome.answer(x, conv.unit), AnswerSpec("number", tolerance=0.01), label)
    assert reason(exp, f"{x} {unit}") == "wrong_unit"
    assert reason(exp, {"answer": x, "unit": unit}) == "wrong_unit"
    bare = answer(x, unit=conv.unit, tolerance=0.01)  # without the item's conversions only generic ones apply
    assert reason(bare, f"{conv.forward(x):.6f} {conv.to}") in ("wrong_unit", "correct")


@SETTINGS
@given(st.floats(min_value=1.0, max_value=300.0), st.sampled_from([
    ("kg", "lb", 1 / 0.45359237, 0.0), ("g", "kg", 0.001, 0.0), ("mg", "g", 0.001, 0.0), ("mcg", "mg", 0.001, 0.0),
    ("cm", "in", 1 / 2.54, 0.0), ("m", "cm", 100.0, 0.0), ("°F", "°C", 5 / 9, -160 / 9), ("g/dL", "g/L", 10.0, 0.0),
    ("mm Hg", "kPa", 0.133322, 0.0), ("ng/mL", "ng/L", 1000.0, 0.0), ("days", "hours", 24.0, 0.0),
    ("hours", "minutes", 60.0, 0.0)]))
def test_generic_conversions(x: float, case: tuple[str, str, float, float]) -> None:
    source, target, scale, offset = case
    x = round(x, 4)
    exp = answer(x, unit=source, tolerance=0.01)
    converted = x * scale + offset
    assert passes(exp, f"{converted:.6g} {target}")
    assert passes(answer(round(converted, 6), unit=target, tolerance=0.01), f"{x} {source}")
    assert reason(exp, f"{converted * 1.1 + 1:.6g} {target}") == "wrong_value"


def test_coarser_units_do_not_buy_tolerance() -> None:
    assert reason(answer(3.13, unit="hours", tolerance=0.05), "0 days") == "wrong_value"
    assert reason(answer(20.0, unit="hours", tolerance=0.05), "1 day") == "wrong_value"
    assert reason(answer(1040.0, unit="mg", tolerance=0.01), "1 g") == "wrong_value"
    assert reason(answer(0.3, unit="kg", tolerance=0.01), "0 kg") == "wrong_value"
    assert passes(answer(98.6, unit="°F", tolerance=0.01), "37 °C")
    assert passes(answer(70.3, unit="kg", tolerance=0.01), "155 lb")


def test_unit_conversion_round_trip() -> None:
    c = UnitConversion("mg/dL", "µmol/L", 88.42, 0.0, 0)
    assert UnitConversion.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    assert UnitConversion.from_dict(CONVERSIONS["Creatinine"][0]) == c
    with pytest.raises(ValueError):
        UnitConversion("a", "b", 0.0)


# -- lists

# Items never start with a list bullet ("- X"): a newline-separated submission is read as a Markdown list.
words = (st.text(alphabet="abcdefghij XYZ()-.'/", min_size=1, max_size=12).map(str.strip)
         .filter(lambda w: bool(w) and not re.match(r"[-*•]\s", w)))


@SETTINGS
@given(st.lists(words, min_size=1, max_size=6, unique_by=lambda w: " ".join(w.casefold().split())), st.randoms(),
       st.sampled_from(["list", "json", "; ", "\n", ", "]))
def test_lists_permutations(items: list[str], rnd: Any, form: str) -> None:
    shuffled = items[:]
    rnd.shuffle(shuffled)

    def written(xs: list[str]) -> Any:
        if form == "list":
            return xs
        if form == "json":
            return json.dumps(xs)
        return form.join(xs)

    assert passes(answer(items, "list"), written(shuffled))
    ordered = answer(items, "list", ordered=True)
    assert passes(ordered, written(items))
    assert passes(ordered, written(shuffled)) == (shuffled == items)
    assert reason(answer(items, "list"), written(shuffled[1:] or [*shuffled, "zzz"])) == "wrong_length"
    assert reason(answer(items, "list"), written([*shuffled, shuffled[0]])) == "wrong_length"


@SETTINGS
@given(st.lists(st.floats(min_value=0, max_value=500).map(lambda v: round(v, 1)), min_size=1, max_size=6),
       st.randoms())
def test_number_lists(values: list[float], rnd: Any) -> None:
    shuffled = values[:]
    rnd.shuffle(shuffled)
    unordered = answer(values, "list", unit="mg/dL", tolerance=0.001, item_type="number")
    ordered = answer(values, "list", unit="mg/dL", tolerance=0.001, item_type="number", ordered=True)
    assert passes(unordered, shuffled)
    assert passes(unordered, [f"{v} mg/dL" for v in shuffled])
    assert passes(unordered, {"answer": json.dumps(shuffled), "unit": "mg/dl"})
    assert passes(unordered, [f"{v / 1000:.4f} g/dL" for v in shuffled])
    assert passes(ordered, shuffled) == all(abs(a - b) <= 1e-3 for a, b in zip(values, shuffled, strict=True))
    assert reason(unordered, [*shuffled, 1.0]) == "wrong_length"
    bumped = [*shuffled[:-1], shuffled[-1] + 1]
    assert reason(unordered, bumped) == "wrong_value"
    assert reason(unordered, [*shuffled[:-1], "lots"]) == "unparseable"
    assert reason(unordered, [f"{v} furlongs" for v in shuffled]) == "wrong_unit"


def test_list_items_with_commas() -> None:
    gold = ["Acute kidney failure, unspecified", "Hyperlipidemia, unspecified", "Personal history of nicotine"]
    exp = answer(gold, "list", size=3)
    assert passes(exp, "hyperlipidemia, unspecified, Personal history of nicotine, Acute kidney failure, unspecified")
    assert passes(exp, "\n".join(f"- {g}" for g in reversed(gold)))
    assert reason(exp, "Hyperlipidemia, unspecified, Acute kidney failure, unspecified") == "wrong_length"
    assert passes(answer(["IV"], "list"), "iv") and reason(answer(["IV"], "list"), {"a": 1}) == "unparseable"


# -- datetimes

moments = st.datetimes(min_value=datetime(2100, 1, 1), max_value=datetime(2210, 12, 31)).map(
    lambda d: d.replace(microsecond=0))


def formats(d: datetime) -> list[Any]:
    return [d.strftime("%Y-%m-%d %H:%M:%S"), d.strftime("%Y-%m-%dT%H:%M:%S"), d.strftime("%Y-%m-%d %H:%M:%S.000"),
            d.strftime("%Y-%m-%dT%H:%M:%SZ"), d.strftime("%Y/%m/%d %H:%M:%S"), f"  {d.isoformat()}+00:00 ", d]


@SETTINGS
@given(moments, st.booleans())
def test_datetimes_in_iso_like_formats_pass(d: datetime, whole_minute: bool) -> None:
    if whole_minute:
        d = d.replace(second=0)
    exp = answer(d.strftime("%Y-%m-%d %H:%M:%S"), "datetime")
    for form in formats(d):
        assert passes(exp, form), form
    if whole_minute:
        assert passes(exp, d.strftime("%Y-%m-%dT%H:%M"))
        assert passes(exp, d.replace(second=59))  # the same minute is enough when the gold has no seconds
    elif d.second:
        assert reason(exp, d.replace(second=(d.second + 1) % 60)) == "wrong_value"


@SETTINGS
@given(moments, st.integers(min_value=1, max_value=60 * 24 * 400), st.sampled_from([-1, 1]))
def test_a_different_minute_fails(d: datetime, minutes: int, sign: int) -> None:
    exp = answer(d.strftime("%Y-%m-%d %H:%M:%S"), "datetime")
    other = d + sign * timedelta(minutes=minutes)
    for form in formats(other):
        assert reason(exp, form) == "wrong_value", form
    assert reason(exp, d.strftime("%Y-%m-%d")) == "wrong_value"  # the day without the time


@SETTINGS
@given(moments, st.integers(min_value=1, max_value=3000))
def test_date_only_answers(d: datetime, days: int) -> None:
    exp = answer(d.strftime("%Y-%m-%d"), "datetime")
    for form in [*formats(d), d.date(), d.strftime("%Y-%m-%d")]:
        assert passes(exp, form), form
    assert reason(exp, d.date() + timedelta(days=days)) == "wrong_value"
    assert reason(exp, "yesterday") == "unparseable"
    assert reason(exp, "2150-02-30") == "unparseable"


# -- booleans and strings

def _cased(word: str, flips: list[bool]) -> str:
    return "".join(c.upper() if f else c.lower() for c, f in zip(word, flips + [False] * len(word), strict=False))


@SETTINGS
@given(st.booleans(), st.sampled_from(["yes", "true", "y", "t", "1"]), st.lists(st.booleans(), max_size=5),
       st.sampled_from(["", " ", "\t"]))
def test_booleans(value: bool, word: str, flips: list[bool], pad: str) -> None:
    exp = answer(value, "boolean")
    negation = {"yes": "no", "true": "false", "y": "n", "t": "f", "1": "0"}[word]
    said = word if value else negation
    assert passes(exp, pad + _cased(said, flips) + pad)
    assert passes(exp, value) and passes(exp, int(value))
    assert reason(exp, _cased(negation if value else word, flips)) == "wrong_value"
    assert reason(exp, "perhaps") == "unparseable" and reason(exp, 2) == "unparseable"


ascii_words = st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789.,()/-%'", min_size=1,
                               max_size=8), min_size=1, max_size=6)


@SETTINGS
@given(ascii_words, st.lists(st.booleans(), max_size=60), st.lists(st.sampled_from([" ", "  ", "\t", "\n ", " \u00a0"]),
                                                                    min_size=7, max_size=7))
def test_strings_ignore_case_and_whitespace(parts: list[str], flips: list[bool], gaps: list[str]) -> None:
    gold = " ".join(parts)
    variant = gaps[0] + "".join(p + g for p, g in zip(parts, gaps[1:], strict=False)) + gaps[-1]
    assert passes(answer(gold, "string"), _cased(variant, flips))
    assert reason(answer(gold, "string"), gold + "x") == "wrong_value"
    assert reason(answer(gold, "string"), "".join(parts) + "_") == "wrong_value"


def test_strings_misc() -> None:
    assert passes(answer("5", "string"), 5) and passes(answer("5", "string"), 5.0)
    assert passes(answer("1000", "string", unit="mg"), "1 g")
    assert passes(answer("1000", "string", unit="mg"), {"answer": "1000", "unit": "mg"})
    assert reason(answer("1000", "string", unit="mg"), {"answer": "1000", "unit": "g"}) == "wrong_value"
    assert passes(answer("100/55", "string", unit="mmHg"), "100/55 mm Hg")
    assert reason(answer("100/55", "string", unit="mmHg"), {"answer": "100/55", "unit": "kPa"}) == "wrong_unit"
    assert reason(answer("URGENT", "string"), ["URGENT", "ELECTIVE"]) == "unparseable"


# -- abstention and evidence

def sql_call(query: str, result: str = "subject_id | valuenum\n10001 | 4.1", call_id: str = "c1") -> list[dict]:
    return [{"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "execute_sql",
                                                         "arguments": json.dumps({"query": query})}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result}]


def python_call(code: str, result: str = "ok", call_id: str = "p1") -> list[dict]:
    return [{"role": "assistant", "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": "execute_python", "arguments": {"code": code}}}]},
            {"role": "tool", "tool_call_id": call_id, "content": result}]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["assistant", "tool", "user"])},
                                          optional={"tool_calls": json_values, "tool_call_id": json_values,
                                                    "content": json_values}), max_size=5)
ids = st.integers(min_value=10_000_000, max_value=19_999_999)
tables = st.sampled_from(["labevents", "chartevents", "prescriptions", "admissions"])


@SETTINGS
@given(st.one_of(st.none(), messages, st.lists(st.builds(ToolCall, st.text(max_size=15), st.just({}),
                                                         st.booleans()), max_size=3)),
       st.sampled_from(["abstained", "ABSTAIN", " abstention "]))
def test_abstaining_on_an_answerable_item_always_fails(trajectory: Any, status: str) -> None:
    for exp in (answer(4.1, unit="mEq/L", tolerance=0.01), answer(["IV"], "list"), answer(True, "boolean")):
        assert reason(exp, {"status": status}, trajectory) == "abstained_on_answerable"
        assert reason(exp, Submission(status=status), trajectory) == "abstained_on_answerable"


@SETTINGS
@given(tables, ids, st.sampled_from([
    "SELECT valuenum FROM {t} WHERE subject_id = {i}",
    "select * from mimiciv_hosp.{T} where subject_id in ({i}, 1) limit 5",
    "WITH x AS (SELECT * FROM {t} WHERE hadm_id = {i}) SELECT count(*) FROM x",
    "SELECT * FROM admissions a JOIN (SELECT * FROM {t}) e USING (hadm_id) WHERE a.subject_id = '{i}'",
    "python:df = con.sql('SELECT * FROM {t}').pl()\nprint(df.filter(pl.col('subject_id') == {i}))",
    "python:rows = ehr['{T}'].filter(subject_id={i})"]))
def test_abstaining_after_reading_the_evidence_passes(table: str, entity: int, template: str) -> None:
    exp = abstain((table, "d_labitems"), (entity,))
    code = template.format(t=table, T=table.upper(), i=entity)
    trajectory = python_call(code.removeprefix("python:")) if code.startswith("python:") else sql_call(code)
    assert passes(exp, {"status": "abstained"})  # no trajectory: no evidence requirement
    assert passes(exp, {"status": "abstained"}, trajectory)
    assert passes(exp, {"status": "abstained", "answer": None}, tool_calls_from_messages(trajectory))
    assert reason(exp, {"status": "answered", "answer": 4.1}, trajectory) == "answered_on_unanswerable"
    assert reason(exp, 4.1) == "answered_on_unanswerable"
    assert reason(exp, {"status": "abstained", "answer": "n/a"}, trajectory) == "invalid_status"


@SETTINGS
@given(tables, tables, ids, ids, st.sampled_from(["other_table", "other_patient", "error", "no_result",
                                                  "bad_json", "bad_sql", "other_tool", "cte_shadow"]))
def test_abstaining_without_reading_the_evidence_fails(table: str, other: str, entity: int, stranger: int,
                                                       how: str) -> None:
    assume(table != other and entity != stranger)
    exp = abstain((table,), (entity,))
    good = f"SELECT * FROM {table} WHERE subject_id = {entity}"
    trajectory: list[dict] = sql_call(f"SELECT * FROM {other} WHERE subject_id = {stranger}", call_id="c0")
    if how == "other_table":
        trajectory += sql_call(f"SELECT * FROM {other} WHERE subject_id = {entity}")
        trajectory += python_call(f"ehr['{other}'].filter(subject_id={entity})  # {table}x")
    elif how == "other_patient":
        trajectory += sql_call(f"SELECT * FROM {table} WHERE subject_id = {stranger}")
        trajectory += python_call(f"ehr['{table}'].filter(subject_id={entity}1)")
    elif how == "error":
        trajectory += sql_call(good, result="ERROR: Catalog Error: Table does not exist")
        trajectory += python_call(f"ehr['{table}'].filter(subject_id={entity})", result="ERROR: NameError")
    elif how == "no_result":
        trajectory += sql_call(good)[:1]
        trajectory = [*sql_call(good)[1:], *trajectory]  # a tool message before its call does not count
    elif how == "bad_json":
        trajectory += [{"role": "assistant", "tool_calls": [{"id": "b", "type": "function", "function": {
            "name": "execute_sql", "arguments": '{"query": "' + good + '"'}}]},
                       {"role": "tool", "tool_call_id": "b", "content": "ok"}]
    elif how == "bad_sql":
        trajectory += sql_call(f"SELEC * FRM {table} WHERE subject_id = {entity} ((")
    elif how == "other_tool":
        trajectory += [{"role": "assistant", "tool_calls": [{"id": "s", "type": "function", "function": {
            "name": "submit_answer", "arguments": json.dumps({"query": good})}}]},
                       {"role": "tool", "tool_call_id": "s", "content": "ok"}]
    elif how == "cte_shadow":
        trajectory += sql_call(f"WITH {table} AS (SELECT 1 AS subject_id) SELECT * FROM {table} "
                               f"WHERE subject_id = {entity}")
    assert reason(exp, {"status": "abstained"}, trajectory) == "abstention_without_evidence"
    assert reason(exp, {"status": "abstained"}, []) == "abstention_without_evidence"


def test_evidence_for_population_questions_and_untabled_items() -> None:
    population = abstain(("labevents",), ())
    assert passes(population, {"status": "abstained"}, sql_call("SELECT avg(valuenum) FROM labevents"))
    assert not passes(population, {"status": "abstained"}, sql_call("SELECT 1 FROM patients"))
    untabled = abstain((), (10001,))
    assert passes(untabled, {"status": "abstained"}, sql_call("SELECT * FROM patients WHERE subject_id = 10001"))
    assert not passes(untabled, {"status": "abstained"}, sql_call("SELECT * FROM patients"))
    anything = abstain((), ())
    assert passes(anything, {"status": "abstained"}, python_call("print(1)"))
    assert not passes(anything, {"status": "abstained"}, python_call("print(1)", result="ERROR: boom"))


def test_tool_calls_from_messages() -> None:
    msgs = [
        {"role": "system", "content": "..."},
        {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "execute_sql", "arguments": '{"query": "SELECT 1"}'}},
            {"id": "b", "type": "function", "function": {"name": "execute_python", "arguments": "{not json"}},
            {"id": "c", "type": "function", "function": {"name": "execute_sql", "arguments": {"query": "x"}}},
            {"id": "d", "type": "function", "function": {"name": "submit_answer", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": "1"}]},
        {"role": "tool", "tool_call_id": "b", "content": "fine"},
        {"role": "tool", "tool_call_id": "c", "content": "  ERROR: refused"},
    ]
    calls = tool_calls_from_messages(msgs)
    assert calls == [ToolCall("execute_sql", {"query": "SELECT 1"}, True), ToolCall("execute_python", {}, False),
                     ToolCall("execute_sql", {"query": "x"}, False), ToolCall("submit_answer", {}, False)]


# -- robustness and serialisation

EXPECTEDS = [
    answer(4.1, unit="mEq/L", tolerance=0.01), answer(3, "integer", unit="patients"), answer("URGENT", "string"),
    answer("1000", "string", unit="mg"), answer(True, "boolean"), answer("2150-03-04 12:30:00", "datetime"),
    answer("2150-03-04", "datetime"), answer(["a, b", "c"], "list"),
    answer([1.5, 2.5], "list", unit="%", tolerance=0.001, item_type="number", ordered=True),
    Expected.for_label(Outcome.answer(1.0, "mg/dL"), AnswerSpec("number", tolerance=0.01), "Creatinine"),
    abstain(), abstain((), ()),
]


@SETTINGS
@given(json_values, st.one_of(st.none(), json_values), st.one_of(st.none(), json_values),
       st.one_of(st.none(), messages))
def test_grade_never_raises(value: Any, status: Any, unit: Any, trajectory: Any) -> None:
    for exp in EXPECTEDS:
        for sub in (value, {"answer": value, "status": status, "unit": unit}, {"answer": value, "unit": unit}):
            result = grade(exp, sub, trajectory)
            assert isinstance(result, Grade) and result.reason in REASONS
            json.dumps(result.to_dict())


@FEW
@given(st.sampled_from(["", "x" * 200_000, "1" * 5000, "[" * 5000, "1," * 20_000, " " * 100_000 + "5",
                        "a" * 500 + "1", "1e999999999", "-0", ".5", "5.", "$", "%"]))
def test_grade_handles_pathological_text(text: str) -> None:
    for exp in EXPECTEDS:
        assert grade(exp, text).reason in REASONS


def test_malformed_expected_raises() -> None:
    for bad in ({"outcome": {"kind": "answer", "value": "x"}, "spec": {"type": "number"}},
                {"outcome": {"kind": "answer", "value": [1]}, "spec": {"type": "boolean"}},
                {"outcome": {"kind": "answer", "value": 1}, "spec": {"type": "list"}},
                {"outcome": {"kind": "maybe"}, "spec": {"type": "number"}},
                {"outcome": {"kind": "answer", "value": 1}, "spec": {"type": "complex"}},
                {"spec": {"type": "number"}}):
        with pytest.raises(ValueError):
            grade(bad, 1)
    with pytest.raises(ValueError):
        Expected(Outcome.abstain("missing_evidence"), AnswerSpec("number"))  # abstain items are not recoverable


@pytest.mark.parametrize("exp", EXPECTEDS, ids=lambda e: f"{e.spec.type}-{e.outcome.kind}")
def test_expected_round_trip(exp: Expected) -> None:
    restored = Expected.from_dict(json.loads(json.dumps(exp.to_dict())))
    assert restored == exp
    assert grade(restored.to_dict(), {"status": "abstained"}).reason == grade(exp, {"status": "abstained"}).reason


def test_expected_from_dict_defaults() -> None:
    exp = Expected.from_dict({"outcome": Outcome.abstain("unknown_entity").to_dict(), "spec": {"type": "integer"},
                              "entity_ids": ["10001"], "evidence_tables": ["patients"]})
    assert not exp.recoverable and exp.entity_ids == (10001,)
    assert Submission.coerce(5) == Submission(5) and Submission.coerce({"status": "abstained"}).answer is None
    assert math.isclose(grade(answer(2.0, tolerance=0.1), {"answer": "2.05"}).reward, 1.0)
