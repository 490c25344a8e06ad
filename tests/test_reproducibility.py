"""From a fresh clone, `dvc repro` runs every stage; a second repro is a no-op; an edit under conf/ or
templates/ reruns exactly the stages it affects; two fresh runs publish byte-identical Parquet."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from tests.helpers import make_dvc_repo, run_cmd

SMALL = {
    "conf/ehr/synthetic.yaml": ("n_patients: 1000", "n_patients: 300"),
    "conf/tasks/default.yaml": ("per_cell: 500", "per_cell: 30"),
    "conf/pairs/default.yaml": ("total: 5486", "total: 72"),
}
STAGES = ("ehr", "tasks", "pairs", "validate", "publish")


def _small(repo: Path) -> Path:
    """A fresh clone configured small: 300 patients, 30 tasks per cell, 72 pairs (24 in test)."""
    repo = make_dvc_repo(repo, SMALL)
    conf = repo / "conf" / "pairs" / "default.yaml"
    conf.write_text(conf.read_text().replace("test_size: 1008", "test_size: 24"))
    run_cmd([sys.executable, "-m", "pipeline.config", "--write-params"], repo)
    run_cmd(["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit", "-qam", "small"], repo)
    return repo


def _hub_digest(repo: Path) -> dict[str, str]:
    hub = repo / "outputs" / "hub"
    return {str(p.relative_to(hub)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(hub.rglob("*")) if p.is_file()}


def _ran(output: str) -> set[str]:
    return {s for s in STAGES if f"Running stage '{s}'" in output}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _small(tmp_path_factory.mktemp("clone"))


def test_fresh_clone_repro_runs_every_stage_then_is_up_to_date(repo: Path) -> None:
    assert _ran(run_cmd(["dvc", "repro"], repo)) == set(STAGES)
    assert (repo / "outputs" / "hub" / "data" / "noise" / "test-00000-of-00001.parquet").is_file()
    again = run_cmd(["dvc", "repro"], repo)
    assert _ran(again) == set() and "up to date" in again


def test_two_fresh_runs_publish_identical_bytes(repo: Path, tmp_path: Path) -> None:
    other = _small(tmp_path / "another_clone")
    run_cmd(["dvc", "repro"], other)
    digest = _hub_digest(other)
    assert digest == _hub_digest(repo)
    assert sum(k.endswith(".parquet") for k in digest) == 6


def test_edits_rerun_exactly_the_affected_stages(repo: Path) -> None:
    conf = repo / "conf" / "publish" / "default.yaml"
    conf.write_text(conf.read_text().replace("croissant: true", "croissant: false"))
    assert _ran(run_cmd(["dvc", "repro"], repo)) == {"publish"}
    assert not (repo / "outputs" / "hub" / "croissant.json").exists()
    conf = repo / "conf" / "validate" / "default.yaml"
    conf.write_text(conf.read_text() + "# a comment changes the file\n")
    assert _ran(run_cmd(["dvc", "repro"], repo)) == {"validate"}  # same report: publish is not rerun
    template = repo / "templates" / "cost.yaml"
    template.write_text(template.read_text() + "\n# an edited template file\n")
    ran = _ran(run_cmd(["dvc", "repro"], repo))
    assert {"tasks", "pairs", "validate"} <= ran and "ehr" not in ran

