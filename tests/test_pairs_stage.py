"""The `pairs` stage: exact counts, balanced test split, patient-disjoint splits, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from pipeline import config, jsonvalues
from pipeline.ehr import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.types import Outcome, Task
from pipeline.noise.verify import expected_holds
from pipeline.pairs.build import PairsError, run_pairs_stage
from pipeline.sql.schema import parse
from pipeline.tasks.engine import run_polars
from pipeline.tasks.loader import load_templates
from tests.helpers import PAIRS_TEST, PAIRS_TOTAL, pairs_overrides

ROOT = Path(__file__).resolve().parents[1]
TOTAL, TEST = PAIRS_TOTAL, PAIRS_TEST


@pytest.fixture(scope="module")
def workspace(pairs_workspace: Path) -> Path:
    return pairs_workspace


@pytest.fixture(scope="module")
def pairs(pairs_workspace: Path) -> pl.DataFrame:
    return pl.read_parquet(pairs_workspace / "pairs" / "pairs.parquet")


def _run(workspace: Path, ehr: EHR, out: str, *extra: str) -> dict:
    return run_pairs_stage(config.compose(pairs_overrides(workspace, ehr, workspace / out, *extra)).pairs,
                           progress=False)


def test_counts_and_test_balance(pairs: pl.DataFrame, workspace: Path) -> None:
    assert pairs.height == TOTAL and pairs["pair_id"].is_unique().all()
    test = pairs.filter(pl.col("split") == "test")
    assert test.height == TEST
    assert test.group_by("scope").len().sort("scope")["len"].to_list() == [TEST // 2, TEST // 2]
    assert set(test.group_by("noise_level").len()["len"]) == {TEST // 3}
    stats = json.loads((workspace / "pairs" / "stats.json").read_text())
    rejected = pl.read_parquet(workspace / "pairs" / "rejected.parquet")
    assert stats["n_sampled"] == stats["n_pairs"] + stats["n_rejected"] == TOTAL + rejected.height
    assert stats["recoverable_share"] >= 0.25
    assert len({r["noise_op"] for r in stats["by_op"]}) >= 12


def test_splits_are_patient_disjoint(pairs: pl.DataFrame) -> None:
    def subjects(split: str) -> set[int]:
        return set(pairs.filter((pl.col("split") == split) & (pl.col("scope") == "patient"))["subject_ids"]
                   .explode().to_list())

    assert subjects("test") and not subjects("test") & subjects("train")
    by_split = {s: set(pairs.filter(pl.col("split") == s)["task_id"]) for s in ("train", "test")}
    assert not by_split["train"] & by_split["test"]


def test_stored_references_reproduce_the_expected_outcomes(pairs: pl.DataFrame, synthetic_ehr: EHR) -> None:
    templates = load_templates(ROOT / "templates")
    for row in pairs.head(40).iter_rows(named=True):
        task = Task.from_row(row, templates)
        noisy = synthetic_ehr.with_patch(Patch.from_json(row["patch"]))
        expected = Outcome.from_dict(jsonvalues.loads(row["expected"]))
        assert expected_holds(task, expected, run_polars(noisy, parse(row["noisy_gold_sql"]))), row["pair_id"]
        assert expected_holds(task, task.outcome, run_polars(synthetic_ehr, parse(row["gold_sql"]))), row["pair_id"]
        assert row["trap"] != jsonvalues.dumps({"value": expected.value, "unit": expected.unit})


def test_same_seed_gives_identical_pairs(pairs: pl.DataFrame, workspace: Path, synthetic_ehr: EHR) -> None:
    _run(workspace, synthetic_ehr, "b")
    for name in ("pairs.parquet", "rejected.parquet", "stats.json"):
        assert (workspace / "pairs" / name).read_bytes() == (workspace / "b" / name).read_bytes(), name


def test_too_many_pairs_for_the_tasks_is_a_clear_error(workspace: Path, synthetic_ehr: EHR) -> None:
    with pytest.raises(PairsError, match=r"cell .* has \d+ verified pairs, needs \d+"):
        _run(workspace, synthetic_ehr, "c", "pairs.total=100000", "pairs.test_size=50000")
    assert not (workspace / "c").exists()
