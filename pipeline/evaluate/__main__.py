"""`python -m pipeline.evaluate agent=<name> [trials=4] [key=value ...]` — score an agent, write outputs/eval/<agent>/.

Examples:
  python -m pipeline.evaluate agent=oracle trials=4             # the ceiling (reads the reference SQL)
  python -m pipeline.evaluate agent=naive limit=50 trials=2     # a quick run over the first 50 pairs
  python -m pipeline.evaluate agent=abstain                     # the always-abstain floor
  python -m pipeline.evaluate agent=heuristic workers=4
  python -m pipeline.evaluate agent=openai model=gpt-4o-mini    # key in $OPENAI_API_KEY
  python -m pipeline.evaluate agent=openai model=Qwen/Qwen2.5-7B-Instruct base_url=http://localhost:8000/v1 \\
      api_key_env=VLLM_API_KEY name=qwen2.5-7b

Bare keys (agent=..., trials=...) are shorthand for evaluate.<key>=...; other groups keep their full path.
Writes report.json, report.md, clean_vs_noise_by_intent.png, pass_hat_k.png and trajectories.jsonl.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import platform
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from pipeline import config
from pipeline.cli import run_stage
from pipeline.evaluate.metrics import summarise
from pipeline.evaluate.report import write_report
from pipeline.evaluate.runner import EvaluationError, evaluate
from pipeline.gym.episodes import Episode, load_episodes

LLM_AGENTS = ("openai",)
LLM_KEYS = ("model", "base_url", "api_key_env", "temperature", "max_retries")


def shorthand(args: list[str]) -> list[str]:
    """Rewrite `key=value` to `evaluate.key=value` for the keys of conf/evaluate/default.yaml."""
    keys = set(OmegaConf.load(config.project_root() / "conf" / "evaluate" / "default.yaml").keys())
    out = []
    for arg in args:
        m = re.fullmatch(r"(\+{0,2})(\w+)=(.*)", arg, re.DOTALL)
        out.append(f"{m[1]}evaluate.{m[2]}={m[3]}" if m and m[2] in keys else arg)
    return out


def select(episodes: list[Episode], limit: int | None) -> list[Episode]:
    """The first `limit` pairs' noisy episodes and the clean episodes they pair with, in published order."""
    if limit is None:
        return episodes
    if limit < 1:
        raise EvaluationError(f"limit must be a positive number of pairs or null, got {limit}")
    noisy = [e for e in episodes if e.variant == "noise"][:limit]
    keep = {e.key for e in noisy} | {e.key for e in episodes if e.variant == "clean" and
                                      set(e.pair_ids) & {n.item_id for n in noisy}}
    return [e for e in episodes if e.key in keep]


def agent_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The LLM settings for LLM agents; scripted baselines take none."""
    if cfg.agent not in LLM_AGENTS:
        return {}
    if not cfg.model:
        raise EvaluationError(f"agent={cfg.agent} needs model=<name> (and base_url=... for a local server)")
    return {k: cfg[k] for k in LLM_KEYS if cfg[k] is not None}


def fingerprint(hub_dir: Path, split: str) -> str:
    """sha256 over the split's clean and noise Parquet files: which dataset build was scored."""
    digest = hashlib.sha256()
    for variant in ("clean", "noise"):
        path = hub_dir / "data" / variant / f"{split}-00000-of-00001.parquet"
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("ehr-robustgym", "polars", "numpy", "matplotlib", "openai"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out


def run(cfg: DictConfig, progress: bool) -> str:
    ev = cfg.evaluate
    hub_dir = Path(ev.hub_dir)
    try:
        episodes = select(load_episodes(hub_dir, ev.split), ev.limit)
    except (FileNotFoundError, ValueError) as err:
        raise EvaluationError(str(err)) from err
    kwargs = agent_kwargs(ev)
    env_kwargs = {"ehr_dir": ev.ehr_dir, "max_steps": int(ev.max_steps)}
    if not Path(ev.ehr_dir).is_dir():
        raise EvaluationError(f"{ev.ehr_dir} not found: build the EHR with `dvc repro` (stage ehr) or pass ehr_dir=")
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    records, wall = evaluate(ev.agent, kwargs, episodes, int(ev.trials), int(ev.workers), env_kwargs,
                             int(ev.seed), progress)
    summary = summarise(records, int(ev.trials), wall)
    meta = {"agent": ev.agent, "agent_kwargs": kwargs, "trials": int(ev.trials), "split": ev.split,
            "limit": ev.limit, "n": len(episodes), "seed": int(ev.seed), "workers": int(ev.workers),
            "max_steps": int(ev.max_steps), "wall_seconds": round(wall, 3), "started_at": started,
            "hub_dir": str(hub_dir), "ehr_dir": str(ev.ehr_dir), "dataset_sha256": fingerprint(hub_dir, ev.split),
            "versions": versions()}
    out = write_report(Path(ev.out_dir) / (ev.name or ev.agent), summary, records, meta)
    k = str(int(ev.trials))

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    return (f"{ev.agent}: success clean {pct(summary['success_clean'])} / noise {pct(summary['success_noise'])}, "
            f"pair {pct(summary['pair_success'])}, pass^{k} {pct(summary['pass_hat_k']['overall'][k])} "
            f"({len(episodes)} episodes x {ev.trials} trials in {wall:.1f} s, "
            f"{len(records) / max(wall, 1e-9):.2f} episodes/s); report in {out}/")


def main(argv: list[str] | None = None) -> int:
    args = shorthand(list(sys.argv[1:] if argv is None else argv))
    return run_stage(__doc__, args, run, (EvaluationError,))


if __name__ == "__main__":
    sys.exit(main())
