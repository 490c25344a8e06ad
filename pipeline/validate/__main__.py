"""`python -m pipeline.validate [hydra overrides]` — re-execute every pair (DVC stage `validate`).

Reads outputs/pairs, outputs/ehr and templates/; checks each pair's clean answer, noisy outcome and
trap and the counts against the `pairs` config; writes outputs/validation/report.json, or exits 2
naming the pairs that failed.
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from pipeline.cli import run_stage
from pipeline.ehr.access import EHRNotBuiltError
from pipeline.tasks.template import TemplateError
from pipeline.validate.checks import ValidationError, run_validate_stage


def run(cfg: DictConfig, progress: bool) -> str:
    r = run_validate_stage(cfg, progress=progress)
    checks = ", ".join(f"{k} {v:,}" for k, v in r["checks_passed"].items())
    return (f"wrote {cfg.validate.out_dir}/: all {r['n_pairs']:,} pairs reproduce ({checks}); "
            f"{r['n_pairs'] / r['seconds']:.1f} pairs/s")


def main(argv: list[str] | None = None) -> int:
    return run_stage(__doc__, argv, run, (ValidationError, TemplateError, EHRNotBuiltError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())
