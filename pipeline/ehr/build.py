"""The `ehr` stage: build `outputs/ehr/` (typed Parquet + manifest) from the configured source."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
from omegaconf import DictConfig, OmegaConf

from pipeline.config import ConfigError
from pipeline.ehr.access import MANIFEST
from pipeline.ehr.cost import PRICE_RANGES, derive_cost
from pipeline.ehr.schema import MIMIC_TABLES, TABLES
from pipeline.ehr.storage import sha256_file, staged_output

SCHEMA_VERSION = "mimic-iv-2.2"
SOURCES = ("synthetic", "mimic_iv")


def default_now(ehr_dir: Path) -> datetime:
    """Midnight after the last discharge: every recorded event lies in the past of "now"."""
    last = pl.scan_parquet(ehr_dir / "admissions.parquet").select(pl.col("dischtime").max()).collect().item()
    if last is None:
        raise ConfigError(f"{ehr_dir}/admissions.parquet has no discharge times; set ehr.now explicitly")
    return datetime(last.year, last.month, last.day) + timedelta(days=1)


def detect_version(src: Path) -> str:
    match = re.search(r"(\d+\.\d+)", src.resolve().name)
    return match.group(1) if match else "unknown"


def _build_source(cfg: DictConfig, stage: Path, progress: bool) -> dict[str, Any]:
    if cfg.source == "synthetic":
        from pipeline.ehr.synthetic import generate

        rows = generate(stage, n_patients=int(cfg.n_patients), seed=int(cfg.seed),
                        chunk_size=int(cfg.chunk_size), row_group_size=int(cfg.row_group_size),
                        progress=progress)
        return {"source": "synthetic", "variant": "synthetic", "version": SCHEMA_VERSION, "credentialed": False,
                "generator": {"n_patients": int(cfg.n_patients), "seed": int(cfg.seed),
                              "chunk_size": int(cfg.chunk_size)},
                "rows": rows, "source_files": {}, "missing_tables": []}
    from pipeline.ehr.ingest import ingest

    src = Path(str(cfg.path))
    report = ingest(src, stage, row_group_size=int(cfg.row_group_size), progress=progress)
    demo = (src / "demo_subject_id.csv").is_file()
    return {"source": "mimic_iv", "variant": "demo" if demo else "full",
            "version": str(cfg.version) if cfg.get("version") else detect_version(src),
            "credentialed": not demo, "path": str(src),
            "rows": report.rows, "source_files": report.source_files,
            "missing_tables": report.missing_tables}


def build_ehr(cfg: DictConfig, progress: bool = True) -> dict[str, Any]:
    """Build the EHR described by the `ehr` config group; return the manifest written."""
    if cfg.source not in SOURCES:
        raise ConfigError(f"ehr.source={cfg.source!r} is not one of {SOURCES}; pick ehr=synthetic or "
                          "ehr=mimic_iv")
    if cfg.source == "mimic_iv" and (OmegaConf.is_missing(cfg, "path") or cfg.get("path") is None):
        raise ConfigError("ehr.path is required with ehr=mimic_iv: pass ehr.path=/path/to/mimiciv/<version>")
    if cfg.source == "synthetic" and (int(cfg.n_patients) < 1 or int(cfg.seed) < 0 or int(cfg.chunk_size) < 1):
        raise ConfigError(f"ehr.n_patients ({cfg.n_patients}) and ehr.chunk_size ({cfg.chunk_size}) must be "
                          f"positive and ehr.seed ({cfg.seed}) non-negative")
    out_dir = Path(cfg.out_dir)
    with staged_output(out_dir) as stage:
        built = _build_source(cfg, stage, progress)
        rows = dict(built.pop("rows"))
        rows["cost"] = derive_cost(stage, seed=int(cfg.cost_seed), row_group_size=int(cfg.row_group_size))
        now = datetime.fromisoformat(str(cfg.now)) if cfg.get("now") else default_now(stage)
        present = [t for t in (*MIMIC_TABLES, "cost") if t in rows]
        manifest = {
            **built,
            "schema": SCHEMA_VERSION,
            "now": now.isoformat(sep=" "),
            "row_group_size": int(cfg.row_group_size),
            "tables": {t: {"module": TABLES[t].module, "rows": rows[t],
                           "sha256": sha256_file(stage / f"{t}.parquet")} for t in present},
            "total_rows": sum(rows[t] for t in present),
            "cost_model": {"seed": int(cfg.cost_seed), "price_ranges": PRICE_RANGES,
                           "note": "synthetic prices; MIMIC-IV has no costs (see pipeline/ehr/cost.py)"},
        }
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return manifest
