"""The `publish` stage: a Hugging Face dataset folder that round-trips through `load_dataset`, the
PhysioNet guard, the SQL-only export and the upload path (without the network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import datasets
import polars as pl
import pytest
import yaml

from pipeline import config, jsonvalues
from pipeline.ehr import EHR
from pipeline.ehr.patch import Patch
from pipeline.noise.types import Outcome
from pipeline.publish.guard import CredentialedDataError, check_allowed
from pipeline.publish.hub import CONFIGS, SPLITS, PublishError, build_hub, run_publish_stage, shard_path
from pipeline.publish.upload import UploadRefused, upload
from pipeline.verifier import Expected, grade
from tests.helpers import PAIRS_TEST, PAIRS_TOTAL, ROOT

CREDENTIALED = {"source": "mimic_iv", "variant": "full", "credentialed": True, "path": "/data/mimiciv/3.1"}


def _cfg(ws: Path, ehr: EHR, out: Path, *extra: str):
    return config.compose([f"validate.pairs_dir={ws / 'pairs'}", f"validate.ehr_dir={ehr.root}",
                           f"validate.templates_dir={ROOT / 'templates'}", f"validate.out_dir={ws / 'validation'}",
                           f"pairs.total={PAIRS_TOTAL}", f"pairs.test_size={PAIRS_TEST}",
                           f"publish.pairs_dir={ws / 'pairs'}", f"publish.ehr_dir={ehr.root}",
                           f"publish.validation_dir={ws / 'validation'}", f"publish.out_dir={out}", *extra])


@pytest.fixture(scope="module")
def hub(hub_workspace: Path) -> Path:
    return hub_workspace / "hub"


@pytest.fixture(scope="module")
def pairs(pairs_workspace: Path) -> pl.DataFrame:
    return pl.read_parquet(pairs_workspace / "pairs" / "pairs.parquet")


def test_folder_has_the_hub_layout(hub: Path) -> None:
    for config_name in CONFIGS:
        for split in SPLITS:
            assert (hub / shard_path(config_name, split)).is_file()
    card = (hub / "README.md").read_text()
    header = yaml.safe_load(card.split("---\n")[1])
    assert header["license"] == "odbl"
    assert {c["config_name"] for c in header["configs"]} == set(CONFIGS)
    assert next(c for c in header["configs"] if c["config_name"] == "pairs")["default"] is True
    infos = {i["config_name"]: i for i in header["dataset_info"]}
    assert infos["noise"]["splits"][1]["num_examples"] == PAIRS_TEST or infos["noise"]["splits"][0][
        "num_examples"] == PAIRS_TEST
    assert "synthetic" in card and "mimic-iv-demo/2.2" in card and "| split | scope |" in card
    croissant = json.loads((hub / "croissant.json").read_text())
    assert {r["@id"] for r in croissant["recordSet"]} == set(CONFIGS)


@pytest.mark.parametrize("config_name", CONFIGS)
def test_every_config_and_split_loads_with_the_recorded_counts(hub: Path, config_name: str) -> None:
    stats = json.loads((hub / "stats.json").read_text())
    loaded = datasets.load_dataset(str(hub), config_name)
    assert set(loaded) == set(SPLITS)
    for split in SPLITS:
        assert loaded[split].num_rows == stats["configs"][config_name][split]["num_examples"]
    if config_name != "clean":
        assert loaded["train"].num_rows + loaded["test"].num_rows == PAIRS_TOTAL
        assert loaded["test"].num_rows == PAIRS_TEST
    default = datasets.load_dataset(str(hub), split="test")
    assert "noisy_question" in default.column_names  # the default config is `pairs`


def test_fields_decode_back_to_the_original_objects(hub: Path, pairs: pl.DataFrame) -> None:
    noise = datasets.load_dataset(str(hub), "noise")
    by_id = {r["pair_id"]: r for r in pairs.iter_rows(named=True)}
    for split in SPLITS:
        for row in noise[split].select(range(min(60, noise[split].num_rows))):
            original = by_id[row["id"]]
            assert Patch.from_json(row["patch"]) == Patch.from_json(original["patch"])
            assert jsonvalues.loads(row["noise_params"]) == jsonvalues.loads(original["noise_params"])
            outcome = Outcome.from_dict(jsonvalues.loads(original["expected"]))
            expected = Expected.from_dict(jsonvalues.loads(row["grading"]))
            assert expected.outcome == outcome
            assert json.loads(row["answer"]) == outcome.value and row["subject_ids"] == original["subject_ids"]
    full = datasets.load_dataset(str(hub), "pairs", split="train")
    for row in full.select(range(30)):
        original = by_id[row["pair_id"]]
        assert {k: row[k] for k in original} == original


def test_published_gradings_accept_the_reference_and_reject_abstaining_on_clean(hub: Path) -> None:
    clean = datasets.load_dataset(str(hub), "clean", split="test")
    for row in clean:
        expected = Expected.from_dict(jsonvalues.loads(row["grading"]))
        assert grade(expected, {"answer": json.loads(row["answer"]), "unit": row["unit"]}).correct, row["id"]
        assert not grade(expected, {"answer": None, "status": "abstained"}).correct
    noise = datasets.load_dataset(str(hub), "noise", split="test")
    for row in noise:
        expected = Expected.from_dict(jsonvalues.loads(row["grading"]))
        answer = None if row["expected_status"] == "abstained" else json.loads(row["answer"])
        assert grade(expected, {"answer": answer, "status": row["expected_status"], "unit": row["unit"]}).correct


def test_two_builds_are_byte_identical(hub: Path, pairs_workspace: Path, synthetic_ehr: EHR) -> None:
    manifest = json.loads((synthetic_ehr.root / "manifest.json").read_text())
    again = pairs_workspace / "hub-again"
    build_hub(pairs_workspace / "pairs", manifest, again)
    files = sorted(p.relative_to(hub) for p in hub.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for rel in files:
        assert (hub / rel).read_bytes() == (again / rel).read_bytes(), rel


def test_the_stage_says_it_did_not_upload(hub_workspace: Path, synthetic_ehr: EHR, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    stats = run_publish_stage(_cfg(hub_workspace, synthetic_ehr, tmp_path / "hub", "publish.repo_id=my-org/x"))
    assert stats["uploaded"] is None and "no Hugging Face token in $HF_TOKEN" in stats["upload_note"]


def test_publish_needs_a_passed_validation(pairs_workspace: Path, synthetic_ehr: EHR, tmp_path: Path) -> None:
    cfg = _cfg(pairs_workspace, synthetic_ehr, tmp_path / "hub", f"publish.validation_dir={tmp_path / 'none'}")
    with pytest.raises(PublishError, match="python -m pipeline.validate"):
        run_publish_stage(cfg)
    assert not (tmp_path / "hub").exists()


def test_physionet_guard_refuses_credentialed_row_values(pairs_workspace: Path) -> None:
    with pytest.raises(CredentialedDataError, match="publish.content=sql_only"):
        check_allowed(CREDENTIALED, "full", allow_credentialed=False)
    check_allowed(CREDENTIALED, "full", allow_credentialed=True)
    check_allowed(CREDENTIALED, "sql_only", allow_credentialed=False)
    check_allowed({"variant": "demo", "credentialed": False}, "full", allow_credentialed=False)
    with pytest.raises(CredentialedDataError):  # an unrecognised source is treated as credentialed
        check_allowed({"variant": "something-else", "credentialed": False}, "full", allow_credentialed=False)


def test_sql_only_export_carries_no_row_values(pairs_workspace: Path, tmp_path: Path) -> None:
    build_hub(pairs_workspace / "pairs", CREDENTIALED, tmp_path / "hub", content="sql_only")
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "questions and SQL only" in card and "PhysioNet Credentialed Health Data License" in card
    for config_name in CONFIGS:
        frame = pl.read_parquet(tmp_path / "hub" / shard_path(config_name, "test"))
        for column in ("answer", "patch", "noise_params", "evidence", "trap", "slots"):
            if column in frame.columns:
                assert frame[column].null_count() == frame.height, (config_name, column)
        assert frame.height and frame[("noisy_question" if config_name == "pairs" else "question")].null_count() == 0
        for column in ("grading", "grading_noise", "expected"):
            if column in frame.columns:
                assert all(jsonvalues.loads(g).get("outcome", jsonvalues.loads(g)).get("value") is None
                           for g in frame[column])
    noise = datasets.load_dataset(str(tmp_path / "hub"), "noise", split="train")
    assert noise.num_rows and all(r["gold_sql"] for r in noise.select(range(10)))


def test_upload_is_refused_without_a_repo_or_a_token(hub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(UploadRefused, match="publish.repo_id is not set"):
        upload(hub, None)
    with pytest.raises(UploadRefused, match=r"no Hugging Face token in \$HF_TOKEN"):
        upload(hub, "my-org/ehr-robustgym")


def test_an_unreachable_endpoint_is_a_clear_error(hub: Path, pairs_workspace: Path, synthetic_ehr: EHR) -> None:
    env = {**os.environ, "HF_TOKEN": "hf_not_a_real_token", "HF_ENDPOINT": "http://127.0.0.1:9",
           "HF_HUB_DISABLE_TELEMETRY": "1"}
    proc = subprocess.run([sys.executable, "-m", "pipeline.publish.upload", "publish.repo_id=my-org/ehr-robustgym",
                           f"publish.out_dir={hub}"], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "upload of" in proc.stderr and "127.0.0.1:9" in proc.stderr and "Traceback" not in proc.stderr
