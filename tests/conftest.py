"""Shared fixtures: the MIMIC-IV demo beside the project (skipped with a message when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

# Property tests explore the same examples on every run (CI must not fail on a newly drawn case), and
# a loaded machine must not turn a slow example into a failure; `--hypothesis-seed` still varies them.
settings.register_profile("repo", derandomize=True, deadline=None)
settings.load_profile("repo")

DEMO_DIR = Path(__file__).resolve().parents[2] / "shared" / "mimic-iv-demo"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp" / "patients.csv.gz").is_file():
        pytest.skip(f"MIMIC-IV demo not found at {DEMO_DIR}; demo tests need ../shared/mimic-iv-demo")
    return DEMO_DIR


@pytest.fixture(scope="session")
def synthetic_ehr(tmp_path_factory: pytest.TempPathFactory):
    """The default synthetic EHR (1,000 patients, seed 0), built once per test session."""
    from pipeline import config
    from pipeline.ehr import EHR
    from pipeline.ehr.build import build_ehr

    out = tmp_path_factory.mktemp("synthetic") / "ehr"
    build_ehr(config.compose([f"ehr.out_dir={out}"]).ehr, progress=False)
    return EHR(out)


@pytest.fixture(scope="session")
def demo_ehr(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory):
    """The MIMIC-IV demo ingested once per test session."""
    import warnings

    from pipeline import config
    from pipeline.ehr import EHR
    from pipeline.ehr.build import build_ehr

    out = tmp_path_factory.mktemp("demo") / "ehr"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build_ehr(config.compose(["ehr=mimic_iv_demo", f"ehr.path={demo_dir}", f"ehr.out_dir={out}"]).ehr,
                  progress=False)
    return EHR(out)


@pytest.fixture(scope="session")
def pairs_workspace(synthetic_ehr, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tasks/` (60 per cell) and `pairs/` (240 pairs, 48 in test) over the synthetic EHR, built once."""
    from pipeline import config
    from pipeline.pairs.build import run_pairs_stage
    from pipeline.tasks.build import build_tasks
    from tests.helpers import ROOT, pairs_overrides

    root = tmp_path_factory.mktemp("pairs")
    cfg = config.compose([f"tasks.ehr_dir={synthetic_ehr.root}", f"tasks.out_dir={root / 'tasks'}",
                          "tasks.per_cell=60", f"tasks.templates_dir={ROOT / 'templates'}"])
    build_tasks(cfg.tasks, progress=False)
    run_pairs_stage(config.compose(pairs_overrides(root, synthetic_ehr, root / "pairs")).pairs, progress=False)
    return root


@pytest.fixture(scope="session")
def hub_workspace(pairs_workspace: Path, synthetic_ehr) -> Path:
    """`pairs_workspace` validated and published: `<ws>/hub` is a small Hugging Face dataset folder."""
    from pipeline import config
    from pipeline.publish.hub import run_publish_stage
    from pipeline.validate.checks import run_validate_stage
    from tests.helpers import PAIRS_TEST, PAIRS_TOTAL, ROOT

    ws = pairs_workspace
    cfg = config.compose([f"validate.pairs_dir={ws / 'pairs'}", f"validate.ehr_dir={synthetic_ehr.root}",
                          f"validate.templates_dir={ROOT / 'templates'}", f"validate.out_dir={ws / 'validation'}",
                          f"pairs.total={PAIRS_TOTAL}", f"pairs.test_size={PAIRS_TEST}",
                          f"publish.pairs_dir={ws / 'pairs'}", f"publish.ehr_dir={synthetic_ehr.root}",
                          f"publish.validation_dir={ws / 'validation'}", f"publish.out_dir={ws / 'hub'}"])
    if not (ws / "hub" / "README.md").is_file():
        run_validate_stage(cfg, progress=False)
        run_publish_stage(cfg)
    return ws
