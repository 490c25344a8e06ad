"""The `publish` stage: validated pairs -> `outputs/hub/`, a folder in the layout of a Hugging Face dataset repo.

    outputs/hub/
      README.md                               dataset card: YAML `configs` + `dataset_info`, counts, fields
      croissant.json                          Croissant JSON-LD metadata (optional)
      stats.json                              the counts the card shows, machine-readable
      data/{pairs,clean,noise}/{train,test}-00000-of-00001.parquet

Shards are written by pyarrow with an explicit schema that carries the `datasets` features, so
`load_dataset("outputs/hub", "noise")` gives the same types everywhere and two runs write the
same bytes. Row order is the pair order of `outputs/pairs`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from datasets import Features, List, Value
from omegaconf import DictConfig

from pipeline.ehr.storage import staged_output
from pipeline.publish import card, croissant
from pipeline.publish.guard import check_allowed, source_of
from pipeline.publish.layout import CONFIGS, SPLITS, shard_path
from pipeline.publish.rows import config_rows, scrub

ROW_GROUP = 2000

_S, _B, _I = Value("string"), Value("bool"), Value("int64")
QUESTION_FEATURES = Features({
    "id": _S, "split": _S, "variant": _S, "question": _S, "intent": _S, "scope": _S, "template_id": _S,
    "task_id": _S, "subject_ids": List(_I), "answer_type": _S, "answer": _S, "unit": _S, "expected_status": _S,
    "abstain_reason": _S, "gold_sql": _S, "patch": _S, "noise_level": _S, "noise_op": _S, "noise_params": _S,
    "recoverable": _B, "trap_sql": _S, "pair_ids": List(_S), "grading": _S,
})
PAIR_FEATURES = Features({
    "pair_id": _S, "split": _S, "task_id": _S, "template_id": _S, "intent": _S, "scope": _S, "question": _S,
    "phrasing": _I, "slots": _S, "subject_ids": List(_I), "gold_sql": _S, "gold_sql_dialects": _S, "answer": _S,
    "answer_spec": _S, "evidence": _S, "sql_components": _S, "noise_level": _S, "noise_op": _S,
    "noise_params": _S, "recoverable": _B, "noisy_question": _S, "noisy_gold_sql": _S, "patch": _S,
    "expected": _S, "trap_sql": _S, "trap": _S, "grading_clean": _S, "grading_noise": _S,
})
FEATURES = {"pairs": PAIR_FEATURES, "clean": QUESTION_FEATURES, "noise": QUESTION_FEATURES}


class PublishError(RuntimeError):
    """The pairs cannot be published as configured (missing validation, credentialed data, upload failure)."""


def write_shard(rows: list[dict[str, Any]], features: Features, path: Path) -> pa.Table:
    table = pa.Table.from_pylist(rows, schema=features.arrow_schema)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", row_group_size=ROW_GROUP)
    return table


def build_hub(pairs_dir: Path, ehr_manifest: dict[str, Any], out_dir: Path, content: str = "full",
              with_croissant: bool = True) -> dict[str, Any]:
    """Write the dataset repo folder; return its stats (rows per config and split, counts tables)."""
    if content not in ("full", "sql_only"):
        raise PublishError(f"publish.content={content!r} must be 'full' or 'sql_only'")
    pairs = pl.read_parquet(pairs_dir / "pairs.parquet").to_dicts()
    pair_stats = json.loads((pairs_dir / "stats.json").read_text())
    rows = config_rows(pairs)
    source = source_of(ehr_manifest)
    stats: dict[str, Any] = {"content": content, "source": source, "n_pairs": len(pairs),
                             "n_sampled": pair_stats["n_sampled"], "n_rejected": pair_stats["n_rejected"],
                             "n_templates": len({r["template_id"] for r in pairs}), "configs": {}}
    with staged_output(out_dir) as stage:
        for config in CONFIGS:
            stats["configs"][config] = {}
            for split in SPLITS:
                part = [r for r in rows[config] if r["split"] == split]
                table = write_shard(scrub(part) if content == "sql_only" else part, FEATURES[config],
                                    stage / shard_path(config, split))
                stats["configs"][config][split] = {"num_examples": table.num_rows, "num_bytes": table.nbytes}
        stats["counts"] = card.counts_tables(pl.DataFrame(rows["noise"]))
        (stage / "stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        (stage / "README.md").write_text(card.render(stats, FEATURES, source), encoding="utf-8")
        if with_croissant:
            doc = croissant.document(stage, stats, FEATURES, source)
            (stage / "croissant.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return stats


def run_publish_stage(cfg: DictConfig) -> dict[str, Any]:
    """Check validation and the PhysioNet guard, write `publish.out_dir`, upload when configured."""
    from pipeline.publish.upload import UploadRefused, upload

    pcfg = cfg.publish
    report = Path(pcfg.validation_dir) / "report.json"
    if not report.is_file():
        raise PublishError(f"{report} is missing: run `python -m pipeline.validate` (or `dvc repro`) first; "
                           "only validated pairs are published")
    if json.loads(report.read_text()).get("failures", 1) != 0:
        raise PublishError(f"{report} records failed checks: rerun `python -m pipeline.validate`")
    manifest_path = Path(pcfg.ehr_dir) / "manifest.json"
    if not manifest_path.is_file():
        raise PublishError(f"{manifest_path} is missing: run `dvc repro` (the ehr stage) first")
    manifest = json.loads(manifest_path.read_text())
    check_allowed(manifest, str(pcfg.content), bool(pcfg.allow_credentialed))
    stats = build_hub(Path(pcfg.pairs_dir), manifest, Path(pcfg.out_dir), str(pcfg.content), bool(pcfg.croissant))
    try:
        stats["uploaded"] = upload(Path(pcfg.out_dir), pcfg.repo_id, str(pcfg.token_env), bool(pcfg.private))
    except UploadRefused as why:
        stats["uploaded"] = None
        stats["upload_note"] = str(why)
    return stats
