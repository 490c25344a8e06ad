"""`python -m pipeline.tasks [hydra overrides]` — sample clean tasks into outputs/tasks/ (DVC stage `tasks`).

Examples:
  python -m pipeline.tasks                               # 500 tasks per intent x scope from outputs/ehr
  python -m pipeline.tasks tasks.per_cell=50 tasks.seed=3
  python -m pipeline.tasks tasks.ehr_dir=outputs/ehr_demo tasks.out_dir=outputs/tasks_demo
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from pipeline.cli import run_stage
from pipeline.ehr.access import EHRNotBuiltError
from pipeline.tasks.build import build_tasks
from pipeline.tasks.template import TemplateError


def run(cfg: DictConfig, progress: bool) -> str:
    summary = build_tasks(cfg.tasks, progress=progress)
    reasons = ", ".join(f"{k} {v}" for k, v in summary["rejected_by_reason"].items()) or "none"
    return (f"wrote {cfg.tasks.out_dir}/: {summary['n_tasks']:,} tasks, {summary['n_rejected']:,} rejected "
            f"({reasons}), {len(summary['skipped_templates'])} templates skipped; "
            f"{summary['tasks_per_second']:.1f} tasks/s")


def main(argv: list[str] | None = None) -> int:
    return run_stage(__doc__, argv, run, (TemplateError, EHRNotBuiltError))


if __name__ == "__main__":
    sys.exit(main())
