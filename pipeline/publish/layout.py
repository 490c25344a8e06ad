"""Where the published configs and splits live in a dataset folder (the naming `push_to_hub` uses)."""

from __future__ import annotations

CONFIGS = ("pairs", "clean", "noise")
SPLITS = ("train", "test")


def shard_path(config: str, split: str) -> str:
    """The only shard of a split: data/<config>/<split>-00000-of-00001.parquet."""
    return f"data/{config}/{split}-00000-of-00001.parquet"
