"""Benchmark items as episodes: the clean or noisy question of a published pair, and what grades it.

Episodes come from the `clean` and `noise` configs of `outputs/hub/` (or a Hub repo downloaded to a
folder). The agent-facing part is only `question`; everything else (variant, pairing, reference SQL,
expected outcome, patch) stays with the environment and the evaluator. `reference_sql` and
`careless_sql` exist for the privileged baselines (oracle, naive, heuristic) only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline import jsonvalues
from pipeline.ehr.patch import Patch
from pipeline.publish.layout import shard_path
from pipeline.verifier import Expected

VARIANTS = ("clean", "noise")


@dataclass(frozen=True)
class Episode:
    key: str  # opaque and stable: what the agent may see as the episode id
    item_id: str  # task id (clean) or pair id (noise)
    variant: str  # "clean" | "noise"
    split: str
    question: str
    intent: str
    scope: str
    task_id: str
    pair_ids: tuple[str, ...]
    noise_level: str | None
    noise_op: str | None
    recoverable: bool
    expected_status: str  # "answered" | "abstained"
    patch_json: str  # "[]" for clean episodes
    grading: Expected
    reference_sql: str  # yields the expected outcome on this episode's EHR (privileged)
    careless_sql: str  # what a careless agent runs: the clean reference on clean items, the trap on noisy ones

    @property
    def patch(self) -> Patch:
        return Patch.from_json(self.patch_json)


def episode_key(variant: str, item_id: str) -> str:
    return "ep-" + hashlib.blake2b(f"{variant}|{item_id}".encode(), digest_size=6).hexdigest()


def load_episodes(hub_dir: str | Path = "outputs/hub", split: str = "test",
                  variants: tuple[str, ...] = VARIANTS) -> list[Episode]:
    """Every episode of `split`, clean first then noisy, in the published order."""
    hub = Path(hub_dir)
    out: list[Episode] = []
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"variant {variant!r} is not one of {VARIANTS}")
        path = hub / shard_path(variant, split)
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found: build the dataset with `dvc repro` (stage publish), or "
                                    f"pass the folder of a downloaded copy; split must be train or test")
        for row in pl.read_parquet(path).iter_rows(named=True):
            if row["patch"] is None or row["answer"] is None:
                raise ValueError(f"{path} is a questions-and-SQL-only export (no answers or patches): "
                                 "it cannot be graded; rebuild the pairs where the source data is available")
            out.append(Episode(
                key=episode_key(variant, row["id"]), item_id=row["id"], variant=variant, split=row["split"],
                question=row["question"], intent=row["intent"], scope=row["scope"], task_id=row["task_id"],
                pair_ids=tuple(row["pair_ids"]), noise_level=row["noise_level"], noise_op=row["noise_op"],
                recoverable=bool(row["recoverable"]), expected_status=row["expected_status"],
                patch_json=row["patch"], grading=Expected.from_dict(jsonvalues.loads(row["grading"])),
                reference_sql=row["gold_sql"], careless_sql=row["trap_sql"] or row["gold_sql"]))
    return out
