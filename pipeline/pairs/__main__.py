"""`python -m pipeline.pairs [hydra overrides]` — build outputs/pairs/ (DVC stage `pairs`).

Examples:
  python -m pipeline.pairs                                   # 5,486 pairs, 1,008 in test
  python -m pipeline.pairs pairs.total=600 pairs.test_size=120 pairs.seed=1
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from pipeline.cli import run_stage
from pipeline.ehr.access import EHRNotBuiltError
from pipeline.pairs.build import PairsError, run_pairs_stage
from pipeline.tasks.template import TemplateError


def run(cfg: DictConfig, progress: bool) -> str:
    s = run_pairs_stage(cfg.pairs, progress=progress)
    splits = ", ".join(f"{r['split']} {r['pairs']:,}" for r in s["by_split"])
    return (f"wrote {cfg.pairs.out_dir}/: {s['n_pairs']:,} pairs ({splits}), {s['n_rejected']:,} candidates "
            f"rejected, {s['recoverable_share']:.0%} recoverable; {s['n_pairs'] / s['seconds']:.1f} pairs/s")


def main(argv: list[str] | None = None) -> int:
    return run_stage(__doc__, argv, run, (PairsError, TemplateError, EHRNotBuiltError))


if __name__ == "__main__":
    sys.exit(main())
