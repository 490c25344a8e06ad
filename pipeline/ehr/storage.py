"""Writing EHR tables to disk: typed Parquet with small row groups, staged then renamed.

Every writer here targets a staging folder; `staged_output` swaps it into place only when the
whole build succeeded, so a failed build never leaves half-written tables behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq

from pipeline.ehr.schema import TableSchema

DEFAULT_ROW_GROUP_SIZE = 20_000
COMPRESSION = "zstd"


def conform(df: pl.DataFrame | pl.LazyFrame, schema: TableSchema) -> pl.LazyFrame:
    """Select the schema's columns in order with the schema's dtypes; missing columns are a bug."""
    lf = df.lazy()
    names = lf.collect_schema().names()
    missing = [c for c in schema.columns if c not in names]
    if missing:
        raise ValueError(f"table {schema.name!r}: frame lacks columns {missing}")
    return lf.select([pl.col(c).cast(t, strict=True) for c, t in schema.columns.items()])


def sink_table(lf: pl.LazyFrame, path: Path, schema: TableSchema,
               row_group_size: int = DEFAULT_ROW_GROUP_SIZE) -> None:
    """Sort by the schema's order (stable, so ties keep input order) and stream to Parquet."""
    conform(lf, schema).sort(list(schema.sort_by), maintain_order=True, nulls_last=True).sink_parquet(
        path, compression=COMPRESSION, row_group_size=row_group_size, statistics=True,
    )


class TableWriter:
    """Append already-ordered chunks of one table to a single Parquet file (bounded memory)."""

    def __init__(self, path: Path, schema: TableSchema, row_group_size: int = DEFAULT_ROW_GROUP_SIZE):
        self.path = path
        self.schema = schema
        self.row_group_size = row_group_size
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._arrow_schema = pl.DataFrame(schema=schema.polars_schema).to_arrow().schema

    def write(self, df: pl.DataFrame) -> None:
        table = conform(df, self.schema).collect().to_arrow().cast(self._arrow_schema)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, self._arrow_schema, compression=COMPRESSION)
        self._writer.write_table(table, row_group_size=self.row_group_size)
        self.rows += table.num_rows

    def close(self) -> None:
        if self._writer is None:  # no chunk at all: still write a typed, empty file
            self._writer = pq.ParquetWriter(self.path, self._arrow_schema, compression=COMPRESSION)
        self._writer.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def staged_output(out_dir: Path) -> Iterator[Path]:
    """Yield a fresh staging folder beside `out_dir`; on success it replaces `out_dir` whole.

    On any error the staging folder is removed and `out_dir` is left exactly as it was.
    """
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = out_dir.parent / f".{out_dir.name}.staging-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    old = out_dir.parent / f".{out_dir.name}.old-{uuid.uuid4().hex[:8]}"
    if out_dir.exists():
        out_dir.rename(old)
    stage.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
