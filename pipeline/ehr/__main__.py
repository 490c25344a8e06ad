"""`python -m pipeline.ehr [hydra overrides]` — build outputs/ehr/ (the DVC stage `ehr`).

Examples:
  python -m pipeline.ehr                                   # synthetic, 1,000 patients
  python -m pipeline.ehr ehr.n_patients=100000 ehr.seed=7
  python -m pipeline.ehr ehr=mimic_iv ehr.path=/data/mimiciv/3.1
  python -m pipeline.ehr ehr=mimic_iv_demo                 # ../shared/mimic-iv-demo
"""

from __future__ import annotations

import logging
import sys

from pipeline import config
from pipeline.ehr.build import build_ehr
from pipeline.ehr.ingest import IngestError


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    progress = "--no-progress" not in args
    overrides = [a for a in args if a != "--no-progress"]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = config.load(overrides)
        manifest = build_ehr(cfg.ehr, progress=progress)
    except (config.ConfigError, IngestError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    missing = ", ".join(manifest["missing_tables"]) or "none"
    print(f"built {cfg.ehr.out_dir}/: source={manifest['source']} ({manifest['variant']}), "
          f"{len(manifest['tables'])} tables, {manifest['total_rows']:,} rows, missing tables: {missing}, "
          f"now={manifest['now']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
