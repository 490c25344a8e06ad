"""Configuration and the DVC stage: params.yaml stays in sync, repro builds, conf edits rerun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from pipeline import config
from tests.helpers import make_dvc_repo, run_cmd

ROOT = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_default_composition() -> None:
    committed = OmegaConf.to_container(OmegaConf.load(ROOT / "params.yaml"))
    assert committed == OmegaConf.to_container(config.compose()), (
        "params.yaml is stale: run `python -m pipeline.config --write-params` after editing conf/")


def test_overrides_compose_groups_and_values() -> None:
    cfg = config.compose(["ehr=mimic_iv", "ehr.path=/data/mimiciv/3.1"])
    assert (cfg.ehr.source, cfg.ehr.path) == ("mimic_iv", "/data/mimiciv/3.1")
    assert config.compose(["ehr=mimic_iv_demo"]).ehr.version == "2.2"
    with pytest.raises(config.ConfigError, match="ehr=nonexistent"):
        config.compose(["ehr=nonexistent"])


def test_cli_reports_a_missing_path_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pipeline.ehr", "ehr=mimic_iv", f"ehr.out_dir={tmp_path}/e"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "ehr.path is required" in proc.stderr and "Traceback" not in proc.stderr


_run = run_cmd


@pytest.fixture(scope="module")
def dvc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway git+DVC copy of the project, configured small so the stage runs in seconds."""
    return make_dvc_repo(tmp_path_factory.mktemp("repo"), {
        "conf/ehr/synthetic.yaml": ("n_patients: 1000", "n_patients: 40"),
        "conf/tasks/default.yaml": ("per_cell: 500", "per_cell: 3")})


def test_dvc_repro_builds_then_is_up_to_date_and_conf_edits_rerun(dvc_repo: Path) -> None:
    # up to `tasks`: the DVC mechanics are the same for every stage, and pairs has its own tests
    _run(["dvc", "repro", "-q", "tasks"], dvc_repo)
    manifest = json.loads((dvc_repo / "outputs" / "ehr" / "manifest.json").read_text())
    assert manifest["generator"]["n_patients"] == 40 and manifest["tables"]["patients"]["rows"] == 40
    assert "up to date" in _run(["dvc", "status", "tasks"], dvc_repo)
    tasks = dvc_repo / "conf" / "tasks" / "default.yaml"
    tasks.write_text(tasks.read_text().replace("seed: 0", "seed: 5"))
    status = _run(["dvc", "status", "tasks"], dvc_repo)
    assert "tasks:" in status and "ehr:" not in status, status  # only the stage that reads conf/tasks
    conf = dvc_repo / "conf" / "ehr" / "synthetic.yaml"
    conf.write_text(conf.read_text().replace("seed: 0", "seed: 1", 1))
    assert "changed deps" in _run(["dvc", "status", "tasks"], dvc_repo)
    _run(["dvc", "repro", "-q", "tasks"], dvc_repo)
    assert json.loads((dvc_repo / "outputs" / "ehr" / "manifest.json").read_text())["generator"]["seed"] == 1


def test_dvc_exp_run_applies_set_param_overrides(dvc_repo: Path) -> None:
    _run(["dvc", "exp", "run", "-q", "-S", "ehr.n_patients=25", "tasks"], dvc_repo)
    manifest = json.loads((dvc_repo / "outputs" / "ehr" / "manifest.json").read_text())
    assert manifest["tables"]["patients"]["rows"] == 25


def test_dvc_exp_run_switches_the_source_group(dvc_repo: Path, demo_dir: Path) -> None:
    _run(["dvc", "exp", "run", "-q", "-S", "ehr=mimic_iv", "-S", f"ehr.path={demo_dir}", "ehr"], dvc_repo)
    manifest = json.loads((dvc_repo / "outputs" / "ehr" / "manifest.json").read_text())
    assert (manifest["source"], manifest["variant"]) == ("mimic_iv", "demo")
    assert manifest["missing_tables"] == ["chartevents"]
