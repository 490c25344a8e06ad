"""`python -m pipeline.ehr [hydra overrides]` — build outputs/ehr/ (the DVC stage `ehr`).

Examples:
  python -m pipeline.ehr                                   # synthetic, 1,000 patients
  python -m pipeline.ehr ehr.n_patients=100000 ehr.seed=7
  python -m pipeline.ehr ehr=mimic_iv ehr.path=/data/mimiciv/3.1
  python -m pipeline.ehr ehr=mimic_iv_demo                 # ../shared/mimic-iv-demo
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from pipeline.cli import run_stage
from pipeline.ehr.build import build_ehr
from pipeline.ehr.ingest import IngestError


def run(cfg: DictConfig, progress: bool) -> str:
    manifest = build_ehr(cfg.ehr, progress=progress)
    missing = ", ".join(manifest["missing_tables"]) or "none"
    return (f"built {cfg.ehr.out_dir}/: source={manifest['source']} ({manifest['variant']}), "
            f"{len(manifest['tables'])} tables, {manifest['total_rows']:,} rows, missing tables: {missing}, "
            f"now={manifest['now']}")


def main(argv: list[str] | None = None) -> int:
    return run_stage(__doc__, argv, run, (IngestError,))


if __name__ == "__main__":
    sys.exit(main())
