"""Re-execute every published pair and check it against what was stored, before anything is published.

Per pair: the clean gold SQL on the clean EHR gives the stored answer; the noisy gold SQL on the
patched EHR gives the expected outcome; the trap SQL on the patched EHR gives the stored trap and
not the expected outcome. Over the set: sampled = kept + rejected, the counts per split and per
(split, scope, level) cell are the configured ones, pair ids are unique, no task feeds more pairs
than allowed and no patient is asked about in both splits. Any disagreement is a ValidationError
naming the pairs, and the stage writes nothing.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig

from pipeline import jsonvalues
from pipeline.ehr.access import EHR
from pipeline.ehr.patch import Patch
from pipeline.ehr.storage import staged_output
from pipeline.noise.types import NoisyItem, Outcome, Task
from pipeline.noise.verify import verify
from pipeline.pairs.build import PairsConfig, cell_quotas, config_from
from pipeline.sql.schema import parse
from pipeline.tasks.answers import Rejection, extract_answer, same_answer
from pipeline.tasks.engine import run_polars
from pipeline.tasks.loader import load_templates

SHOWN = 20  # failures named in the error message


class ValidationError(RuntimeError):
    """Published pairs that do not reproduce, or counts that differ from the configuration."""


@dataclass
class Findings:
    """What the checks found: failures as (pair_id or "-", check, detail)."""

    failures: list[tuple[str, str, str]] = field(default_factory=list)
    passed: Counter[str] = field(default_factory=Counter)

    def check(self, ok: bool, pair_id: str, name: str, detail: str) -> None:
        if ok:
            self.passed[name] += 1
        else:
            self.failures.append((pair_id, name, detail))


def check_pair(row: dict[str, Any], task: Task, ehr: EHR, found: Findings) -> None:
    """The three reference checks of one pair (see the module docstring)."""
    pid = row["pair_id"]
    try:
        got, unit = extract_answer(run_polars(ehr, parse(row["gold_sql"])), task.spec)
        ok = same_answer(got, task.value, task.spec) and unit == task.unit
        found.check(ok, pid, "clean_answer", f"stored {task.value!r} {task.unit}, clean gold SQL gives {got!r} {unit}")
    except Exception as err:  # a reference that no longer runs is a finding, not a crash
        found.check(False, pid, "clean_answer", f"clean gold SQL: {err}")
    item = NoisyItem(question=row["noisy_question"], patch=Patch.from_json(row["patch"]),
                     gold_sql=row["noisy_gold_sql"], expected=Outcome.from_dict(jsonvalues.loads(row["expected"])),
                     trap_sql=row["trap_sql"])
    try:
        trap = verify(task, item, ehr)
    except Rejection as rej:
        check = "trap" if rej.reason.startswith("trap") else "noisy_outcome"
        found.check(False, pid, check, str(rej))
        return
    found.check(True, pid, "noisy_outcome", "")
    stored = jsonvalues.loads(row["trap"])
    ok = trap == stored or (trap["unit"] == stored["unit"] and trap["value"] is not None
                            and stored["value"] is not None and same_answer(trap["value"], stored["value"], task.spec))
    found.check(ok, pid, "trap", f"stored trap {stored!r}, trap SQL gives {trap!r}")


def check_counts(pairs: pl.DataFrame, n_rejected: int, stats: dict[str, Any], cfg: PairsConfig,
                 found: Findings) -> None:
    """The set-level checks: totals, cells, uniqueness, task reuse and patient-disjoint splits."""
    found.check(stats["n_sampled"] == pairs.height + n_rejected == stats["n_pairs"] + stats["n_rejected"], "-",
                "sampled_is_kept_plus_rejected",
                f"stats.json says {stats['n_sampled']} sampled; files hold {pairs.height} kept + {n_rejected} rejected")
    found.check(pairs.height == cfg.total, "-", "total", f"{pairs.height} pairs, pairs.total={cfg.total}")
    n_test = pairs.filter(pl.col("split") == "test").height
    found.check(n_test == cfg.test_size, "-", "test_size", f"{n_test} test pairs, pairs.test_size={cfg.test_size}")
    cells = Counter(zip(pairs["split"], pairs["scope"], pairs["noise_level"], strict=True))
    for cell, quota in cell_quotas(cfg).items():
        found.check(cells[cell] == quota, "-", "cell_quota", f"cell {'/'.join(cell)} has {cells[cell]}, needs {quota}")
    dupes = pairs.filter(pl.col("pair_id").is_duplicated())["pair_id"].unique().sort().to_list()
    found.check(not dupes, ",".join(dupes[:SHOWN]), "unique_pair_id", "duplicate pair ids")
    overused = pairs.group_by("task_id").len().filter(pl.col("len") > cfg.max_pairs_per_task)["task_id"].to_list()
    found.check(not overused, ",".join(sorted(overused)[:SHOWN]), "pairs_per_task",
                f"tasks feed more than pairs.max_pairs_per_task={cfg.max_pairs_per_task} pairs")
    patients = pairs.filter(pl.col("scope") == "patient").explode("subject_ids")
    both = set(patients.filter(pl.col("split") == "test")["subject_ids"]) & set(
        patients.filter(pl.col("split") == "train")["subject_ids"])
    found.check(not both, "-", "patient_disjoint_splits", f"patients in both splits: {sorted(both)[:SHOWN]}")


def validate_pairs(pairs_dir: Path, ehr: EHR, templates_dir: Path, cfg: PairsConfig,
                   progress: bool = True) -> dict[str, Any]:
    """Run every check; raise ValidationError naming the failing pairs, else return the report."""
    from tqdm.auto import tqdm

    templates = load_templates(templates_dir)
    pairs = pl.read_parquet(pairs_dir / "pairs.parquet")
    n_rejected = pl.read_parquet(pairs_dir / "rejected.parquet").height
    stats = json.loads((pairs_dir / "stats.json").read_text())
    found = Findings()
    check_counts(pairs, n_rejected, stats, cfg, found)
    for row in tqdm(pairs.iter_rows(named=True), total=pairs.height, desc="validate", unit="pair",
                    disable=not progress):
        if row["template_id"] not in templates:
            found.check(False, row["pair_id"], "template", f"template {row['template_id']!r} is not under templates/")
            continue
        check_pair(row, Task.from_row(row, templates), ehr, found)
    if found.failures:
        lines = [f"  {pid} [{check}] {detail[:300]}" for pid, check, detail in found.failures[:SHOWN]]
        more = len(found.failures) - SHOWN
        raise ValidationError(f"{pairs_dir}: {len(found.failures)} check(s) failed"
                              + (f" ({more} more not shown)" if more > 0 else "") + ":\n" + "\n".join(lines)
                              + "\nrerun `dvc repro` from a clean state; if it persists, the pairs stage is wrong")
    return {"n_pairs": pairs.height, "n_rejected": n_rejected, "n_sampled": stats["n_sampled"],
            "checks_passed": dict(sorted(found.passed.items())), "failures": 0}


def run_validate_stage(cfg: DictConfig, progress: bool = True) -> dict[str, Any]:
    """Validate outputs/pairs against the `pairs` config; write outputs/validation/report.json."""
    vcfg = cfg.validate
    start = time.perf_counter()
    report = validate_pairs(Path(vcfg.pairs_dir), EHR(Path(vcfg.ehr_dir)), Path(vcfg.templates_dir),
                            config_from(cfg.pairs), progress)
    with staged_output(Path(vcfg.out_dir)) as stage:
        (stage / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return {**report, "seconds": time.perf_counter() - start}
