"""Wall time, peak memory and rows of the `ehr` stage for synthetic sizes and the demo ingest.

    python benchmarks/bench_ehr.py                       # synthetic 1,000 and 100,000 + demo ingest
    python benchmarks/bench_ehr.py --sizes 1000 10000    # other synthetic sizes

Each case runs in a fresh process (so peak RSS is its own) building into a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT.parent / "shared" / "mimic-iv-demo"


def run_one(case: str, out: Path) -> dict:
    from pipeline import config
    from pipeline.ehr.build import build_ehr

    overrides = (["ehr=mimic_iv", f"ehr.path={DEMO}", "ehr.version=2.2"] if case == "demo"
                 else [f"ehr.n_patients={int(case)}"])
    cfg = config.compose([*overrides, f"ehr.out_dir={out}"])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manifest = build_ehr(cfg.ehr, progress=False)
    wall = time.perf_counter() - start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size_mib = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    return {"case": "demo ingest" if case == "demo" else f"synthetic {int(case):,}",
            "wall_s": round(wall, 2), "peak_rss_mib": round(peak_mib), "rows": manifest["total_rows"],
            "tables": len(manifest["tables"]), "parquet_mib": round(size_mib, 1),
            "rows_per_s": round(manifest["total_rows"] / wall)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="*", type=int, default=[1000, 100_000])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(run_one(args.one, Path(tmp) / "ehr")))
        return
    cases = [str(n) for n in args.sizes] + (["demo"] if DEMO.is_dir() else [])
    print(f"{'case':<20}{'wall s':>9}{'peak RSS MiB':>14}{'rows':>14}{'rows/s':>12}{'Parquet MiB':>13}")
    for case in cases:
        proc = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True,
                              cwd=ROOT)
        if proc.returncode:
            print(f"{case}: failed\n{proc.stderr[-2000:]}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{r['case']:<20}{r['wall_s']:>9}{r['peak_rss_mib']:>14,}{r['rows']:>14,}{r['rows_per_s']:>12,}"
              f"{r['parquet_mib']:>13}")


if __name__ == "__main__":
    main()
