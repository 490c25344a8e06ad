"""Execute a noisy item and keep it only if its references hold and its trap is a real trap.

- the noisy gold SQL, run on base + patch, yields the expected outcome (empty/NULL for abstentions);
- the trap SQL (the careless agent's query), run on base + patch, differs from the expected outcome,
  and for an abstention returns a non-empty answer: a careless path that finds nothing tests nothing.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from pipeline.ehr.access import EHR
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.sql.schema import parse
from pipeline.tasks.answers import Rejection, extract_answer, same_answer
from pipeline.tasks.engine import run_polars


def _answer_or_none(result: pl.DataFrame, task: Task) -> tuple[Any, str | None] | None:
    """The normalised answer, or None when the result is empty/NULL (what an abstention looks like)."""
    try:
        return extract_answer(result, task.spec)
    except Rejection as rej:
        if rej.reason in ("empty", "null"):
            return None
        raise


def _run(ehr: EHR, sql: str, what: str) -> pl.DataFrame:
    try:
        return run_polars(ehr, parse(sql))
    except Exception as err:  # any engine failure means the reference does not execute
        raise Rejection("does_not_execute", f"{what}: {err}") from err


def verify(task: Task, item: NoisyItem, base: EHR) -> dict[str, Any]:
    """Check `item` against the patched EHR; return the trap's result ({"value", "unit"})."""
    noisy = base.with_patch(item.patch)
    got = _answer_or_none(_run(noisy, item.gold_sql, "noisy gold SQL"), task)
    expected = item.expected
    if expected.kind == "abstain":
        if got is not None:
            raise Rejection("noisy_gold_mismatch", f"expected an abstention, noisy gold SQL answers {got[0]!r}")
    elif got is None or not same_answer(got[0], expected.value, task.spec):
        raise Rejection("noisy_gold_mismatch", f"expected {expected.value!r}, noisy gold SQL gives "
                                               f"{None if got is None else got[0]!r}")
    try:
        trap = _answer_or_none(_run(noisy, item.trap_sql, "trap SQL"), task)
    except Rejection as rej:
        if rej.reason == "does_not_execute":
            raise
        trap = None  # a tied or malformed careless answer is still not the expected one
    if expected.kind == "abstain" and trap is None:
        raise Rejection("trap_empty", "the careless query returns nothing, so the item tests nothing")
    if trap is not None and expected.kind == "answer" and same_answer(trap[0], expected.value, task.spec):
        raise Rejection("trap_equals_expected", f"the careless query already gives {trap[0]!r}")
    return {"value": None if trap is None else trap[0], "unit": None if trap is None else trap[1]}


def expected_holds(task: Task, outcome: Outcome, result: pl.DataFrame) -> bool:
    """Does a query result match an outcome (used by tests and the validation of published pairs)?"""
    got = _answer_or_none(result, task)
    if outcome.kind == "abstain":
        return got is None
    return got is not None and same_answer(got[0], outcome.value, task.spec)


def usable_answer(task: Task, ehr: EHR, sql: str) -> Any:
    """The query's answer on `ehr`, or None when it is empty, NULL, tied or does not run (operators
    use it to probe candidate noise before committing to it)."""
    try:
        return extract_answer(ehr.sql(sql), task.spec)[0]
    except Exception:  # any failure means "no usable answer"
        return None


def is_abstention(task: Task, ehr: EHR, sql: str) -> bool:
    """Does the query, on `ehr`, give what an abstention looks like (empty or NULL)?"""
    try:
        return expected_holds(task, Outcome.abstain("missing_evidence"), ehr.sql(sql))
    except Exception:  # tied, malformed or failing: not an abstention
        return False
