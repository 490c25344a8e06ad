"""Shared fixtures: the MIMIC-IV demo beside the project (skipped with a message when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

DEMO_DIR = Path(__file__).resolve().parents[2] / "shared" / "mimic-iv-demo"


@pytest.fixture(scope="session")
def demo_dir() -> Path:
    if not (DEMO_DIR / "hosp" / "patients.csv.gz").is_file():
        pytest.skip(f"MIMIC-IV demo not found at {DEMO_DIR}; demo tests need ../shared/mimic-iv-demo")
    return DEMO_DIR
