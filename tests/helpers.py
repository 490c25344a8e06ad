"""Small shared builders for tests (fixtures live in conftest.py)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAIRS_TOTAL, PAIRS_TEST = 240, 48  # a small pairs stage: 48 test pairs = 8 per scope x level


def pairs_overrides(workspace: Path, ehr, out: Path, *extra: str) -> list[str]:
    """Hydra overrides for a small `pairs` run over `workspace/tasks` and `ehr`, written to `out`."""
    return [f"pairs.tasks_dir={workspace / 'tasks'}", f"pairs.ehr_dir={ehr.root}", f"pairs.out_dir={out}",
            f"pairs.templates_dir={ROOT / 'templates'}", f"pairs.total={PAIRS_TOTAL}",
            f"pairs.test_size={PAIRS_TEST}", *extra]


def run_cmd(args: list[str], cwd: Path) -> str:
    """Run a command outside any DVC experiment context; fail the test with its output if it fails."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")}
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def make_dvc_repo(repo: Path, edits: dict[str, tuple[str, str]]) -> Path:
    """A throwaway git+DVC copy of the project at `repo`, with `edits` ({conf file: (old, new)}) applied to
    conf/ and params.yaml regenerated, committed once."""
    import shutil
    import sys

    import pytest

    if shutil.which("dvc") is None or shutil.which("git") is None:
        pytest.skip("dvc and git are needed for the DVC stage tests")
    for item in ("pipeline", "conf", "templates", "dvc.yaml", "params.yaml", ".dvcignore", ".gitignore"):
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, repo / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, repo / item)
    (repo / ".dvc").mkdir()
    shutil.copy(ROOT / ".dvc" / "config", repo / ".dvc" / "config")
    for rel, (old, new) in edits.items():
        path = repo / rel
        assert old in path.read_text(), (rel, old)
        path.write_text(path.read_text().replace(old, new, 1))
    run_cmd([sys.executable, "-m", "pipeline.config", "--write-params"], repo)
    git = ["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci"]
    run_cmd(["git", "init", "-q"], repo)
    run_cmd([*git, "add", "-A"], repo)
    run_cmd([*git, "commit", "-qm", "init"], repo)
    return repo
