"""`python -m pipeline.noise` — list the noise operators, or show one at work on real tasks.

    python -m pipeline.noise --list
    python -m pipeline.noise --op drop_record [--n 2] [--seed 0] [--task-id ID] [--json]

Tasks come from outputs/tasks/ when it is built; otherwise a small synthetic EHR and its tasks are
built in a temporary folder first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.load import demo_workspace, load_tasks
from pipeline.noise.registry import OPERATORS, UnknownOperatorError, load_builtin_operators, operator
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.noise.verify import verify
from pipeline.tasks.answers import Rejection
from pipeline.tasks.loader import load_templates

MAX_ATTEMPTS = 300


def describe_outcome(outcome: Outcome | dict[str, Any]) -> str:
    o = outcome if isinstance(outcome, Outcome) else Outcome.from_dict(outcome)
    if o.kind == "abstain":
        return f"abstain ({o.reason})"
    return f"answer {o.value!r}" + (f" {o.unit}" if o.unit else "")


def patch_diff(ehr: EHR, patch: Patch, limit: int = 5) -> list[dict[str, Any]]:
    """Each edit with the rows it touches, before and after."""
    out = []
    for edit in patch.edits:
        entry: dict[str, Any] = {"op": edit.op, "table": edit.table, "where": edit.where}
        if edit.op in ("delete", "update"):
            cond = pl.all_horizontal([pl.col(c) == v for c, v in edit.where.items()])
            before = ehr[edit.table].filter(cond).head(limit).collect()
            entry["before"] = before.to_dicts()
            if edit.op == "update":
                entry["after"] = before.with_columns([pl.lit(v).cast(before.schema[c]).alias(c)
                                                      for c, v in edit.values.items()]).to_dicts()
        else:
            entry["after"] = [edit.values]
        out.append(entry)
    return out


def example(op: NoiseOperator, task: Task, item: NoisyItem, trap: dict[str, Any], ehr: EHR) -> dict[str, Any]:
    return {
        "operator": op.name, "level": op.level, "recoverable": op.recoverable, "task_id": task.task_id,
        "template_id": task.template.id, "intent": task.intent, "scope": task.scope,
        "clean_question": task.question, "clean_answer": task.outcome.to_dict(),
        "noisy_question": item.question, "patch": patch_diff(ehr, item.patch), "noisy_gold_sql": item.gold_sql,
        "expected": item.expected.to_dict(), "trap_sql": item.trap_sql, "trap": trap, "params": item.params,
    }


def _short(row: dict[str, Any], keep: set[str]) -> str:
    shown = {k: v for k, v in row.items() if v is not None and (k in keep or len(keep) < 3)}
    return ", ".join(f"{k}={v}" for k, v in list(shown.items())[:10])


def print_example(ex: dict[str, Any]) -> None:
    print(f"--- {ex['task_id']} ({ex['intent']}/{ex['scope']})")
    print(f"clean question : {ex['clean_question']}")
    print(f"clean answer   : {describe_outcome(ex['clean_answer'])}")
    print(f"noisy question : {ex['noisy_question']}")
    if not ex["patch"]:
        print("patch          : none (the database is unchanged; the noise is in the question)")
    for edit in ex["patch"]:
        keep = set(edit["where"]) | {k for row in edit.get("after", []) for k in row}
        target = f"into {edit['table']}" if edit["op"] == "insert" else f"{edit['table']} where {edit['where']}"
        print(f"patch          : {edit['op']} {target}")
        for before in edit.get("before", []):
            print(f"    - {_short(before, keep | {'subject_id', 'hadm_id', 'charttime', 'valuenum', 'value'})}")
        for after in edit.get("after", []):
            print(f"    + {_short(after, keep | {'subject_id', 'hadm_id', 'charttime', 'valuenum', 'value'})}")
    print(f"expected       : {describe_outcome(ex['expected'])}")
    print(f"noisy gold SQL : {ex['noisy_gold_sql']}")
    print(f"trap           : a careless agent runs\n    {ex['trap_sql']}\n  and answers {ex['trap']['value']!r}"
          + (f" {ex['trap']['unit']}" if ex["trap"]["unit"] else ""))


def show(name: str, n: int, seed: int, task_id: str | None, as_json: bool, tasks_path: Path, ehr_dir: Path,
         templates_dir: Path) -> int:
    op = operator(name)
    if tasks_path.is_file() and (ehr_dir / "manifest.json").is_file():
        ehr, tasks = EHR(ehr_dir), load_tasks(tasks_path, load_templates(templates_dir))
    else:
        print(f"({tasks_path} not built: building a small synthetic EHR and tasks in a temporary folder)",
              file=sys.stderr)
        ehr, tasks = demo_workspace(templates_dir)
    if task_id:
        tasks = [t for t in tasks if t.task_id == task_id]
        if not tasks:
            print(f"error: no task {task_id!r} in {tasks_path}", file=sys.stderr)
            return 2
    rng = np.random.default_rng(seed)
    candidates = [tasks[i] for i in rng.permutation(len(tasks)) if op.applicable(tasks[i], ehr)]
    examples, reasons = [], {}
    for task in candidates[:MAX_ATTEMPTS]:
        try:
            item = op.apply(task, ehr, np.random.default_rng([seed, len(examples)]))
            trap = verify(task, item, ehr)
        except (NotApplicable, Rejection) as err:
            key = getattr(err, "reason", str(err))
            reasons[key] = reasons.get(key, 0) + 1
            continue
        examples.append(example(op, task, item, trap, ehr))
        if len(examples) >= n:
            break
    if as_json:
        print(json.dumps(examples, indent=2, default=str))
    else:
        status = "recoverable" if op.recoverable else "not recoverable"
        print(f"== {op.name} ({op.level} level, {status}): {op.description}")
        for ex in examples:
            print_example(ex)
    if not examples:
        print(f"error: {op.name} made no verified item from {len(candidates)} applicable tasks "
              f"(rejections: {reasons})", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.noise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the operators")
    parser.add_argument("--op", help="show this operator at work")
    parser.add_argument("--n", type=int, default=1, help="how many examples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--task-id", help="use this task")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--tasks", type=Path, default=Path("outputs/tasks/tasks.parquet"))
    parser.add_argument("--ehr", type=Path, default=Path("outputs/ehr"))
    parser.add_argument("--templates", type=Path, default=Path("templates"))
    args = parser.parse_args(argv)
    load_builtin_operators()
    if args.list or not args.op:
        print(f"{'operator':<24}{'level':<8}{'recoverable':<13}description")
        for name in sorted(OPERATORS, key=lambda k: (("record", "value", "query").index(OPERATORS[k].level), k)):
            cls = OPERATORS[name]
            print(f"{name:<24}{cls.level:<8}{'yes' if cls.recoverable else 'no':<13}{cls.description}")
        return 0
    try:
        return show(args.op, args.n, args.seed, args.task_id, args.json, args.tasks, args.ehr, args.templates)
    except UnknownOperatorError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
