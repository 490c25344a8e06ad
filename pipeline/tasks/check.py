"""`python -m pipeline.tasks.check` — try templates on built EHRs and cross-check Polars against DuckDB.

    python -m pipeline.tasks.check --ehr outputs/ehr --ehr /tmp/demo_ehr templates/labs.yaml

For each template and EHR: how many slot candidates exist, how many sampled tasks are accepted,
why the others were rejected, and whether DuckDB (running the exported duckdb SQL over the same
Parquet) gives the same answer. Exit status 1 if a template fails to load, never yields a task
on an EHR that has its tables, or disagrees between engines.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from pipeline.ehr.access import EHR
from pipeline.tasks.answers import Rejection, extract_answer, same_answer
from pipeline.tasks.engine import DuckDBReference
from pipeline.tasks.loader import load_file, load_templates
from pipeline.tasks.sample import TemplateCursor, instantiate
from pipeline.tasks.template import Template, TemplateError


def check_template(ehr: EHR, duck: DuckDBReference, template: Template, n: int, seed: int) -> list[str]:
    """Problems found (empty when fine); prints one line per template."""
    missing = sorted(template.tables - set(ehr))
    if missing:
        print(f"  skip  {template.id}: tables {missing} missing")
        return []
    cursor = TemplateCursor(ehr, template, seed)
    reasons: Counter[str] = Counter()
    problems: list[str] = []
    accepted = 0
    example = ""
    while accepted < n and (drawn := cursor.next()) is not None and cursor.attempts <= 6 * n:
        slots, phrasing = drawn
        try:
            task = instantiate(ehr, template, slots, phrasing, evidence_cap=5)
        except Rejection as rej:
            reasons[rej.reason] += 1
            continue
        accepted += 1
        polars_answer = json.loads(task["answer"])["value"]
        duck_sql = json.loads(task["gold_sql_dialects"])["duckdb"]
        try:
            duck_answer, _ = extract_answer(duck.run(duck_sql), template.answer)
        except Rejection as rej:
            problems.append(f"{template.id}: DuckDB rejects what Polars answers ({rej}); slots {slots}")
            continue
        except Exception as err:
            problems.append(f"{template.id}: DuckDB fails on exported SQL: {err}")
            continue
        if not same_answer(polars_answer, duck_answer, template.answer):
            problems.append(f"{template.id}: Polars {polars_answer!r} != DuckDB {duck_answer!r}; slots {slots}")
        if accepted == 1:
            example = f"{task['question']} -> {polars_answer!r}"
    if accepted == 0:
        problems.append(f"{template.id}: no task accepted from {cursor.frame.height} candidates "
                        f"(rejections: {dict(reasons)})")
    status = "FAIL" if problems else "ok"
    print(f"  {status:<5} {template.id}: {cursor.frame.height} candidates, {accepted} accepted, "
          f"rejected {dict(reasons)}  e.g. {example[:160]}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="template files (default: all of templates/)")
    parser.add_argument("--ehr", action="append", type=Path, help="a built EHR folder (repeatable)")
    parser.add_argument("--n", type=int, default=5, help="tasks to try per template and EHR")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        templates = ([t for f in args.files for t in load_file(f)] if args.files
                     else list(load_templates().values()))
    except TemplateError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    problems: list[str] = []
    for root in args.ehr or [Path("outputs/ehr")]:
        ehr = EHR(root)
        duck = DuckDBReference(root)
        print(f"{root} ({ehr.manifest['source']}/{ehr.manifest['variant']}):")
        for template in templates:
            problems += check_template(ehr, duck, template, args.n, args.seed)
        duck.close()
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
