"""The `validate` stage: every pair re-executes to what was stored; tampering and count drift fail loudly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from pipeline import config, jsonvalues
from pipeline.ehr import EHR
from pipeline.pairs.build import config_from
from pipeline.validate.checks import ValidationError, run_validate_stage, validate_pairs
from tests.helpers import PAIRS_TEST, PAIRS_TOTAL, ROOT


def _cfg(workspace: Path, ehr: EHR, pairs_dir: Path, out: Path, *extra: str):
    return config.compose([f"validate.pairs_dir={pairs_dir}", f"validate.ehr_dir={ehr.root}",
                           f"validate.templates_dir={ROOT / 'templates'}", f"validate.out_dir={out}",
                           f"pairs.total={PAIRS_TOTAL}", f"pairs.test_size={PAIRS_TEST}", *extra])


def test_every_pair_reproduces(pairs_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    report = run_validate_stage(_cfg(pairs_workspace, synthetic_ehr, pairs_workspace / "pairs", tmp_path / "v"),
                                progress=False)
    assert report["failures"] == 0
    for check in ("clean_answer", "noisy_outcome", "trap"):
        assert report["checks_passed"][check] == PAIRS_TOTAL
    assert json.loads((tmp_path / "v" / "report.json").read_text())["n_pairs"] == PAIRS_TOTAL


def _tampered(pairs_workspace: Path, tmp_path: Path, column: str, pair_index: int, value: str) -> tuple[Path, str]:
    out = tmp_path / "pairs"
    shutil.copytree(pairs_workspace / "pairs", out)
    frame = pl.read_parquet(out / "pairs.parquet")
    pid = frame["pair_id"][pair_index]
    frame = frame.with_columns(pl.when(pl.col("pair_id") == pid).then(pl.lit(value)).otherwise(pl.col(column))
                               .alias(column))
    frame.write_parquet(out / "pairs.parquet")
    return out, pid


def test_a_changed_answer_is_named(pairs_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    pairs = pl.read_parquet(pairs_workspace / "pairs" / "pairs.parquet")
    idx = next(i for i, a in enumerate(pairs["answer"]) if isinstance(json.loads(a)["value"], float))
    answer = json.loads(pairs["answer"][idx])
    bad = json.dumps({**answer, "value": answer["value"] + 1000.0})
    pairs_dir, pid = _tampered(pairs_workspace, tmp_path, "answer", idx, bad)
    with pytest.raises(ValidationError, match=rf"{pid} \[clean_answer\]"):
        run_validate_stage(_cfg(pairs_workspace, synthetic_ehr, pairs_dir, tmp_path / "v"), progress=False)
    assert not (tmp_path / "v").exists()


def test_a_changed_expected_outcome_is_named(pairs_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    pairs = pl.read_parquet(pairs_workspace / "pairs" / "pairs.parquet")
    idx = next(i for i, e in enumerate(pairs["expected"]) if json.loads(e)["kind"] == "abstain")
    flipped = jsonvalues.dumps({"kind": "answer", "value": 1.0, "unit": None, "reason": None})
    pairs_dir, pid = _tampered(pairs_workspace, tmp_path, "expected", idx, flipped)
    with pytest.raises(ValidationError, match=rf"{pid} \[noisy_outcome\]"):
        validate_pairs(pairs_dir, synthetic_ehr, ROOT / "templates",
                       config_from(_cfg(pairs_workspace, synthetic_ehr, pairs_dir, tmp_path).pairs), progress=False)


def test_counts_that_differ_from_the_config_fail(pairs_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    cfg = _cfg(pairs_workspace, synthetic_ehr, pairs_workspace / "pairs", tmp_path / "v",
               f"pairs.total={PAIRS_TOTAL + 6}")
    with pytest.raises(ValidationError, match=r"\[total\].*pairs.total=246"):
        run_validate_stage(cfg, progress=False)
    stats = json.loads((pairs_workspace / "pairs" / "stats.json").read_text())
    broken = tmp_path / "p"
    shutil.copytree(pairs_workspace / "pairs", broken)
    (broken / "stats.json").write_text(json.dumps({**stats, "n_sampled": stats["n_sampled"] + 1}))
    with pytest.raises(ValidationError, match=r"sampled_is_kept_plus_rejected"):
        run_validate_stage(_cfg(pairs_workspace, synthetic_ehr, broken, tmp_path / "v"), progress=False)
