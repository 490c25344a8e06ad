"""Loading clean tasks for the noise stage: from outputs/tasks, or a small throwaway build."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import warnings
from pathlib import Path

import polars as pl

from pipeline.ehr.access import EHR
from pipeline.noise.types import Task
from pipeline.tasks.loader import load_templates
from pipeline.tasks.template import Template


def load_tasks(tasks_path: Path, templates: dict[str, Template]) -> list[Task]:
    frame = pl.read_parquet(tasks_path)
    unknown = sorted(set(frame["template_id"]) - set(templates))
    if unknown:
        raise ValueError(f"{tasks_path} uses templates no longer under templates/: {unknown[:5]}; rerun `dvc repro`")
    return [Task.from_row(row, templates) for row in frame.iter_rows(named=True)]


def demo_workspace(templates_dir: Path, n_patients: int = 300, per_cell: int = 40) -> tuple[EHR, list[Task]]:
    """Build a small synthetic EHR and tasks in a temporary folder (for `--op` without outputs/)."""
    from pipeline import config
    from pipeline.ehr.build import build_ehr
    from pipeline.tasks.build import build_tasks

    root = Path(tempfile.mkdtemp(prefix="ehr-robustgym-noise-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    cfg = config.compose([f"ehr.out_dir={root / 'ehr'}", f"ehr.n_patients={n_patients}",
                          f"tasks.ehr_dir={root / 'ehr'}", f"tasks.out_dir={root / 'tasks'}",
                          f"tasks.per_cell={per_cell}", f"tasks.templates_dir={templates_dir}"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_ehr(cfg.ehr, progress=False)
        build_tasks(cfg.tasks, progress=False)
    return EHR(root / "ehr"), load_tasks(root / "tasks" / "tasks.parquet", load_templates(templates_dir))
