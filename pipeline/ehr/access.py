"""Read-only access to a built EHR: named LazyFrames, Polars SQL and the manifest."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import polars as pl

from pipeline.ehr.patch import Patch
from pipeline.ehr.schema import TABLES

MANIFEST = "manifest.json"


class EHRNotBuiltError(FileNotFoundError):
    """The EHR folder has no manifest: the `ehr` stage has not been run (or failed)."""


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return MappingProxyType({k: _freeze(v) for k, v in value.items()})
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


class EHR(Mapping[str, pl.LazyFrame]):
    """A built EHR under `outputs/ehr/`: `ehr["labevents"]` is a LazyFrame, `ehr.sql(q)` runs SQL.

    Frames are scans of the Parquet files, so nothing is loaded until a query needs it and
    patient-level filters skip row groups. The object never writes to its folder.
    """

    def __init__(self, root: str | Path = "outputs/ehr"):
        self.root = Path(root)
        manifest_path = self.root / MANIFEST
        if not manifest_path.is_file():
            raise EHRNotBuiltError(f"{manifest_path} not found: build the EHR first with `dvc repro` "
                                   "or `python -m pipeline.ehr`")
        self._manifest = json.loads(manifest_path.read_text())
        self.patch: Patch | None = None  # set on views made by with_patch
        self._frames: dict[str, pl.LazyFrame] = {}
        for name in self._manifest["tables"]:
            path = self.root / f"{name}.parquet"
            if not path.is_file():
                raise EHRNotBuiltError(f"{path} is listed in {manifest_path} but missing: rebuild the EHR")
            self._frames[name] = pl.scan_parquet(path)

    @property
    def manifest(self) -> Mapping[str, Any]:
        return _freeze(self._manifest)

    @property
    def now(self) -> datetime:
        """The fixed "now" that relative-time questions ("in the last year") are anchored to."""
        return datetime.fromisoformat(self._manifest["now"])

    @property
    def missing_tables(self) -> tuple[str, ...]:
        return tuple(self._manifest.get("missing_tables", ()))

    def __getitem__(self, name: str) -> pl.LazyFrame:
        try:
            return self._frames[name]
        except KeyError:
            if name in TABLES:
                raise KeyError(f"table {name!r} is not in this EHR ({self._manifest['source']}): it was "
                               "missing from the source; see manifest['missing_tables']") from None
            raise KeyError(f"unknown table {name!r}; tables: {', '.join(sorted(self._frames))}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._frames)

    def __len__(self) -> int:
        return len(self._frames)

    def with_patch(self, patch: Patch) -> EHR:
        """A view of this EHR with `patch` overlaid lazily; this EHR and its files are untouched."""
        view = object.__new__(EHR)
        view.root = self.root
        view._manifest = self._manifest
        view._frames = patch.apply(self._frames)
        view.patch = patch
        return view

    def sql(self, query: str) -> pl.DataFrame:
        """Run one query with Polars SQL over the tables of this EHR.

        Trusted callers only (gold SQL): agent-written SQL must pass the environment's guard.
        """
        with pl.SQLContext(frames=self._frames, eager=False) as ctx:
            return ctx.execute(query).collect()

    def __repr__(self) -> str:
        patched = f", patched={sorted(self.patch.tables)}" if self.patch else ""
        return f"EHR({str(self.root)!r}, source={self._manifest['source']!r}, tables={len(self)}{patched})"
