"""Throughput of the `tasks` stage on the synthetic EHR (1,000 patients) and the MIMIC-IV demo.

    python benchmarks/bench_tasks.py [--per-cell 100]

Builds both EHRs into a temporary folder, samples tasks on each and prints tasks/s, rejections by
reason, tasks per cell and the sql_components distribution.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

from pipeline import config
from pipeline.ehr.build import build_ehr
from pipeline.tasks.build import build_tasks

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT.parent / "shared" / "mimic-iv-demo"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-cell", type=int, default=100)
    args = parser.parse_args()
    sources = {"synthetic 1,000": []}
    if DEMO.is_dir():
        sources["MIMIC-IV demo"] = ["ehr=mimic_iv_demo", f"ehr.path={DEMO}"]
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (name, overrides) in enumerate(sources.items()):
            ehr_dir, out = Path(tmp) / f"ehr{i}", Path(tmp) / f"tasks{i}"
            cfg = config.compose([*overrides, f"ehr.out_dir={ehr_dir}", f"tasks.ehr_dir={ehr_dir}",
                                  f"tasks.out_dir={out}", f"tasks.per_cell={args.per_cell}",
                                  f"tasks.templates_dir={ROOT / 'templates'}"])
            build_ehr(cfg.ehr, progress=False)
            s = build_tasks(cfg.tasks, progress=False)
            print(f"== {name}: {s['n_tasks']:,} tasks in {s['seconds']:.1f} s = {s['tasks_per_second']:.1f} tasks/s; "
                  f"{s['n_rejected']:,} rejected {s['rejected_by_reason']}; "
                  f"{len(s['skipped_templates'])} templates skipped")
            print("   tasks per cell:", {k: v["tasks"] for k, v in s["cells"].items()})
            print("   templates per cell:", {k: v["templates"] for k, v in s["cells"].items()})
            comp = s["sql_components"]
            print(f"   sql_components total: mean {comp['mean_total_per_task']} per task, "
                  f"{comp['mean_total_per_template']} per template; distribution {comp['distribution_total']}")
            print("   mean by component:", comp["mean_by_component"])


if __name__ == "__main__":
    main()
