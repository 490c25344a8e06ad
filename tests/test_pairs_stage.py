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
from pipeline.tasks.build import build_tasks
from pipeline.tasks.engine import run_polars
from pipeline.tasks.loader import load_templates

ROOT = Path(__file__).resolve().parents[1]
TOTAL, TEST = 240, 48


@pytest.fixture(scope="module")
def workspace(synthetic_ehr: EHR, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pairs")
    cfg = config.compose([f"tasks.ehr_dir={synthetic_ehr.root}", f"tasks.out_dir={root / 'tasks'}",
                          "tasks.per_cell=60", f"tasks.templates_dir={ROOT / 'templates'}"])
    build_tasks(cfg.tasks, progress=False)
    return root


def _run(workspace: Path, ehr: EHR, out: str, *extra: str) -> dict:
    cfg = config.compose([f"pairs.tasks_dir={workspace / 'tasks'}", f"pairs.ehr_dir={ehr.root}",
                          f"pairs.out_dir={workspace / out}", f"pairs.templates_dir={ROOT / 'templates'}",
                          f"pairs.total={TOTAL}", f"pairs.test_size={TEST}", *extra])
    return run_pairs_stage(cfg.pairs, progress=False)


@pytest.fixture(scope="module")
def pairs(workspace: Path, synthetic_ehr: EHR) -> pl.DataFrame:
    _run(workspace, synthetic_ehr, "a")
    return pl.read_parquet(workspace / "a" / "pairs.parquet")


def test_counts_and_test_balance(pairs: pl.DataFrame, workspace: Path) -> None:
    assert pairs.height == TOTAL and pairs["pair_id"].is_unique().all()
    test = pairs.filter(pl.col("split") == "test")
    assert test.height == TEST
    assert test.group_by("scope").len().sort("scope")["len"].to_list() == [TEST // 2, TEST // 2]
    assert set(test.group_by("noise_level").len()["len"]) == {TEST // 3}
    stats = json.loads((workspace / "a" / "stats.json").read_text())
    rejected = pl.read_parquet(workspace / "a" / "rejected.parquet")
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
        assert (workspace / "a" / name).read_bytes() == (workspace / "b" / name).read_bytes(), name


def test_too_many_pairs_for_the_tasks_is_a_clear_error(workspace: Path, synthetic_ehr: EHR) -> None:
    with pytest.raises(PairsError, match=r"cell .* has \d+ verified pairs, needs \d+"):
        _run(workspace, synthetic_ehr, "c", "pairs.total=100000", "pairs.test_size=50000")
    assert not (workspace / "c").exists()
