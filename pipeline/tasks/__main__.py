"""`python -m pipeline.tasks [hydra overrides]` — sample clean tasks into outputs/tasks/ (DVC stage `tasks`).

Examples:
  python -m pipeline.tasks                               # 500 tasks per intent x scope from outputs/ehr
  python -m pipeline.tasks tasks.per_cell=50 tasks.seed=3
  python -m pipeline.tasks tasks.ehr_dir=outputs/ehr_demo tasks.out_dir=outputs/tasks_demo
"""

from __future__ import annotations

import sys

from pipeline import config
from pipeline.ehr.access import EHRNotBuiltError
from pipeline.tasks.template import TemplateError


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    progress = "--no-progress" not in args
    overrides = [a for a in args if a != "--no-progress"]
    from pipeline.tasks.build import build_tasks

    try:
        cfg = config.load(overrides)
        summary = build_tasks(cfg.tasks, progress=progress)
    except (config.ConfigError, TemplateError, EHRNotBuiltError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    reasons = ", ".join(f"{k} {v}" for k, v in summary["rejected_by_reason"].items()) or "none"
    print(f"wrote {cfg.tasks.out_dir}/: {summary['n_tasks']:,} tasks, {summary['n_rejected']:,} rejected "
          f"({reasons}), {len(summary['skipped_templates'])} templates skipped; "
          f"{summary['tasks_per_second']:.1f} tasks/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
