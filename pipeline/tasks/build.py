"""The `tasks` stage: templates + built EHR -> outputs/tasks/{tasks,rejected}.parquet and stats.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig

from pipeline.ehr.access import EHR
from pipeline.ehr.storage import staged_output
from pipeline.tasks.loader import load_templates
from pipeline.tasks.sample import REJECTED_SCHEMA, TASK_SCHEMA, SamplingConfig, sample_tasks, stats


def build_tasks(cfg: DictConfig, progress: bool = True) -> dict[str, Any]:
    """Sample, answer and write the tasks; return the stats (plus timing, which is not written)."""
    templates = load_templates(Path(cfg.templates_dir))
    ehr = EHR(Path(cfg.ehr_dir))
    sampling = SamplingConfig(per_cell=int(cfg.per_cell), seed=int(cfg.seed),
                              attempts_per_task=int(cfg.attempts_per_task),
                              evidence_rows_cap=int(cfg.evidence_rows_cap))
    result = sample_tasks(ehr, templates, sampling, progress=progress)
    summary = stats(result, templates)
    summary["source"] = {k: ehr.manifest[k] for k in ("source", "variant", "version")}
    with staged_output(Path(cfg.out_dir)) as stage:
        pl.DataFrame(result.tasks, schema=TASK_SCHEMA).write_parquet(stage / "tasks.parquet", compression="zstd")
        pl.DataFrame(result.rejected, schema=REJECTED_SCHEMA).write_parquet(stage / "rejected.parquet",
                                                                            compression="zstd")
        (stage / "stats.json").write_text(json.dumps(summary, indent=2) + "\n")
    return {**summary, "seconds": result.seconds,
            "tasks_per_second": len(result.tasks) / result.seconds if result.seconds else None}
