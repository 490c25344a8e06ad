"""The `pairs` stage: clean tasks x noise operators -> exactly `pairs.total` verified Clean-Noise pairs.

Quotas are set per (split, scope, level) cell — the test split is balanced exactly (by default
1,008 pairs: 504 patient / 504 population, 336 per level) and the train split as evenly as the
data allow. Inside a cell the level's operators take turns, and each walks the cell's tasks in a
seeded order that also alternates intents, so operators and intents stay as even as possible.
Every candidate is applied and verified (`pipeline.noise.verify`); failures are recorded with
their reason. A task feeds at most `max_pairs_per_task` pairs.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline import jsonvalues
from pipeline.ehr.access import EHR
from pipeline.ehr.storage import staged_output
from pipeline.noise.base import NoiseOperator, NotApplicable
from pipeline.noise.load import load_tasks
from pipeline.noise.registry import OPERATORS, load_builtin_operators
from pipeline.noise.types import LEVELS, Task
from pipeline.noise.verify import verify
from pipeline.pairs.split import PatientSplit
from pipeline.tasks.answers import Rejection
from pipeline.tasks.loader import load_templates
from pipeline.tasks.sample import stable_seed
from pipeline.tasks.template import INTENTS, SCOPES

SPLITS = ("train", "test")
TASK_COLUMNS = ("task_id", "template_id", "intent", "scope", "question", "phrasing", "slots", "subject_ids", "gold_sql",
                "gold_sql_dialects", "answer", "answer_spec", "evidence", "sql_components")
REJECTED_SCHEMA = {"split": pl.String, "scope": pl.String, "noise_level": pl.String, "noise_op": pl.String,
                   "task_id": pl.String, "reason": pl.String, "detail": pl.String}


class PairsError(RuntimeError):
    """The configured pairs cannot be produced (e.g. a cell has too few verifiable candidates)."""


@dataclass
class PairsConfig:
    total: int = 5486
    test_size: int = 1008
    seed: int = 0
    test_patient_share: float = 0.3
    max_pairs_per_task: int = 2
    attempts_per_pair: int = 6
    operator_params: dict[str, dict[str, Any]] = field(default_factory=dict)


def spread(total: int, keys: list[Any]) -> dict[Any, int]:
    """`total` split as evenly as possible over `keys` (earlier keys get the remainder)."""
    base, extra = divmod(total, len(keys))
    return {k: base + (1 if i < extra else 0) for i, k in enumerate(keys)}


def cell_quotas(cfg: PairsConfig) -> dict[tuple[str, str, str], int]:
    """(split, scope, level) -> pairs: both splits balanced over scope x level."""
    cells = [(s, lv) for s in SCOPES for lv in LEVELS]
    test = spread(cfg.test_size, cells)
    train = spread(cfg.total - cfg.test_size, cells)
    return {("test", *c): test[c] for c in cells} | {("train", *c): train[c] for c in cells}


def _intent_interleaved(tasks: list[Task], rng: np.random.Generator) -> list[Task]:
    """A seeded order that cycles through intents, so no intent is exhausted before the others."""
    by_intent: dict[str, list[Task]] = defaultdict(list)
    for i in rng.permutation(len(tasks)):
        by_intent[tasks[i].intent].append(tasks[i])
    order, queues = [], [by_intent[i] for i in INTENTS if by_intent[i]]
    while queues:
        for q in list(queues):
            order.append(q.pop(0))
            if not q:
                queues.remove(q)
    return order


class _OperatorCursor:
    """One operator's walk through the tasks of one cell."""

    def __init__(self, op: NoiseOperator, tasks: list[Task], ehr: EHR, seed: int, cell: tuple[str, ...]):
        self.op = op
        rng = np.random.default_rng(stable_seed(seed, op.name, *cell))
        self.queue: Iterator[Task] = (t for t in _intent_interleaved(tasks, rng) if op.applicable(t, ehr))
        self.accepted = 0
        self.failures = 0

    def next(self) -> Task | None:
        return next(self.queue, None)


def pair_record(task_row: dict[str, Any], split: str, op: NoiseOperator, item: Any, trap: dict[str, Any],
                pair_index: int) -> dict[str, Any]:
    return {
        "pair_id": f"pair-{pair_index:05d}", "split": split, **{c: task_row[c] for c in TASK_COLUMNS},
        "noise_level": op.level, "noise_op": op.name, "noise_params": jsonvalues.dumps({**op.params, **item.params}),
        "recoverable": op.recoverable, "noisy_question": item.question, "noisy_gold_sql": item.gold_sql,
        "patch": item.patch.to_json(), "expected": jsonvalues.dumps(item.expected.to_dict()),
        "trap_sql": item.trap_sql, "trap": jsonvalues.dumps(trap),
    }


def build_pairs(ehr: EHR, task_rows: list[dict[str, Any]], tasks: list[Task], cfg: PairsConfig,
                progress: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]], float]:
    from tqdm.auto import tqdm

    start = time.perf_counter()
    load_builtin_operators()
    unknown = sorted(set(cfg.operator_params) - set(OPERATORS))
    if unknown:
        raise PairsError(f"pairs.operators names unknown operator(s) {unknown}; valid: {sorted(OPERATORS)}")
    operators = [OPERATORS[n](**cfg.operator_params.get(n, {})) for n in sorted(OPERATORS)]
    split = PatientSplit(cfg.seed, cfg.test_patient_share)
    rows_by_id = {r["task_id"]: r for r in task_rows}
    pool: dict[tuple[str, str], list[Task]] = defaultdict(list)
    for task in tasks:
        pool[(split.split_of(task), task.scope)].append(task)
    used: Counter[str] = Counter()
    kept: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []
    quotas = cell_quotas(cfg)
    bar = tqdm(total=cfg.total, desc="pairs", unit="pair", disable=not progress)
    for (split_name, scope, level), quota in quotas.items():
        level_ops = [op for op in operators if op.level == level]
        cursors = [_OperatorCursor(op, pool[(split_name, scope)], ehr, cfg.seed, (split_name, scope))
                   for op in level_ops]
        got = 0
        active = list(cursors)
        per_op_cap = math.ceil(quota / max(len(cursors), 1))
        while got < quota and active:
            for cursor in list(active):
                if got >= quota:
                    break
                if cursor.failures >= cfg.attempts_per_pair * per_op_cap:
                    active.remove(cursor)
                    continue
                task = cursor.next()
                if task is None:
                    active.remove(cursor)
                    continue
                if used[task.task_id] >= cfg.max_pairs_per_task:
                    continue
                rng = np.random.default_rng(stable_seed(cfg.seed, cursor.op.name, task.task_id))
                try:
                    item = cursor.op.apply(task, ehr, rng)
                    trap = verify(task, item, ehr)
                except (NotApplicable, Rejection) as err:
                    cursor.failures += 1
                    rejected.append({"split": split_name, "scope": scope, "noise_level": level,
                                     "noise_op": cursor.op.name, "task_id": task.task_id, "reason": err.reason,
                                     "detail": str(err)[:500]})
                    continue
                used[task.task_id] += 1
                cursor.accepted += 1
                got += 1
                kept.append(pair_record(rows_by_id[task.task_id], split_name, cursor.op, item, trap, len(kept)))
                bar.update(1)
        if got < quota:
            bar.close()
            raise PairsError(f"cell {split_name}/{scope}/{level} has {got} verified pairs, needs {quota}: add tasks "
                             f"(tasks.per_cell), templates or operators for it, or lower pairs.total")
    bar.close()
    return kept, rejected, time.perf_counter() - start


def pairs_stats(pairs: pl.DataFrame, rejected: pl.DataFrame) -> dict[str, Any]:
    """Counts per split x scope x level x op x intent, rejection reasons, sampled = kept + rejected."""
    def counts(frame: pl.DataFrame, keys: list[str]) -> list[dict[str, Any]]:
        return frame.group_by(keys).len("pairs").sort(keys).to_dicts()

    return {
        "n_pairs": pairs.height, "n_rejected": rejected.height, "n_sampled": pairs.height + rejected.height,
        "by_split": counts(pairs, ["split"]),
        "by_split_scope_level": counts(pairs, ["split", "scope", "noise_level"]),
        "by_split_scope_level_op_intent": counts(pairs, ["split", "scope", "noise_level", "noise_op", "intent"]),
        "by_op": counts(pairs, ["noise_op"]),
        "by_intent": counts(pairs, ["split", "intent"]),
        "recoverable_share": round(float(pairs["recoverable"].mean()), 4) if pairs.height else 0.0,
        "rejected_by_op_reason": counts(rejected, ["noise_op", "reason"]) if rejected.height else [],
        "distinct_tasks": pairs["task_id"].n_unique(),
    }


def config_from(cfg: DictConfig) -> PairsConfig:
    ops = cfg.get("operators")
    params = OmegaConf.to_container(ops, resolve=True) if ops is not None else {}
    return PairsConfig(total=int(cfg.total), test_size=int(cfg.test_size), seed=int(cfg.seed),
                       test_patient_share=float(cfg.test_patient_share),
                       max_pairs_per_task=int(cfg.max_pairs_per_task), attempts_per_pair=int(cfg.attempts_per_pair),
                       operator_params=dict(params))  # type: ignore[arg-type]


def run_pairs_stage(cfg: DictConfig, progress: bool = True) -> dict[str, Any]:
    """Read outputs/tasks + outputs/ehr, write outputs/pairs/{pairs,rejected}.parquet and stats.json."""
    pcfg = config_from(cfg)
    if not 0 < pcfg.test_size <= pcfg.total:
        raise PairsError(f"pairs.test_size ({pcfg.test_size}) must be in 1..pairs.total ({pcfg.total})")
    templates = load_templates(Path(cfg.templates_dir))
    tasks_path = Path(cfg.tasks_dir) / "tasks.parquet"
    task_rows = pl.read_parquet(tasks_path).to_dicts()
    tasks = load_tasks(tasks_path, templates)
    ehr = EHR(Path(cfg.ehr_dir))
    kept, rejected, seconds = build_pairs(ehr, task_rows, tasks, pcfg, progress)
    pairs = pl.DataFrame(kept)
    rejected_frame = pl.DataFrame(rejected, schema=REJECTED_SCHEMA)
    summary = pairs_stats(pairs, rejected_frame)
    if summary["n_pairs"] != pcfg.total:
        raise PairsError(f"made {summary['n_pairs']} pairs, configured {pcfg.total}")
    with staged_output(Path(cfg.out_dir)) as stage:
        pairs.write_parquet(stage / "pairs.parquet", compression="zstd")
        rejected_frame.write_parquet(stage / "rejected.parquet", compression="zstd")
        (stage / "stats.json").write_text(json.dumps(summary, indent=2) + "\n")
    return {**summary, "seconds": seconds}
