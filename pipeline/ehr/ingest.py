"""Ingest a MIMIC-IV release directory (`hosp/`, `icu/`, `.csv.gz` or `.csv`) into typed Parquet.

Each table is decompressed to a plain CSV beside the staging output (so Polars can stream it
instead of inflating a multi-GB gzip in memory), read as text, cast strictly per the schema and
sorted to disk. Any failure is diagnosed down to the file, line and column before it is raised.
"""

from __future__ import annotations

import csv
import gzip
import logging
import shutil
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from pipeline.ehr.schema import MIMIC_TABLES, TABLES, TableSchema
from pipeline.ehr.storage import DEFAULT_ROW_GROUP_SIZE, sha256_file, sink_table

log = logging.getLogger(__name__)

DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S%.f"  # fractional seconds optional
DATE_FORMAT = "%Y-%m-%d"


class IngestError(RuntimeError):
    """A MIMIC-IV source that cannot be ingested; the message names the file, line and column."""


class MissingTableWarning(UserWarning):
    """An optional MIMIC-IV table is absent from the source directory."""


@dataclass
class IngestReport:
    rows: dict[str, int] = field(default_factory=dict)
    source_files: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> {path, sha256}
    missing_tables: list[str] = field(default_factory=list)


def find_source_file(src: Path, schema: TableSchema) -> Path | None:
    for suffix in (".csv.gz", ".csv"):
        candidate = src / f"{schema.source_name}{suffix}"
        if candidate.is_file():
            return candidate
    return None


def parse_expr(name: str, dtype: pl.DataType) -> pl.Expr:
    """Strict text -> dtype conversion for one column (raises on the first unparseable value)."""
    col = pl.col(name)
    if dtype == pl.String:
        return col
    if dtype == pl.Datetime("us"):
        return col.str.to_datetime(DATETIME_FORMAT, time_unit="us", strict=True)
    if dtype == pl.Date:
        return col.str.to_date(DATE_FORMAT, strict=True)
    return col.str.strip_chars().cast(dtype, strict=True)


def _lenient_parse_expr(name: str, dtype: pl.DataType) -> pl.Expr:
    col = pl.col(name)
    if dtype == pl.Datetime("us"):
        return col.str.to_datetime(DATETIME_FORMAT, time_unit="us", strict=False)
    if dtype == pl.Date:
        return col.str.to_date(DATE_FORMAT, strict=False)
    return col.str.strip_chars().cast(dtype, strict=False)


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def read_header(path: Path) -> list[str]:
    try:
        with _open_text(path) as fh:
            header = next(csv.reader(fh), None)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise IngestError(f"{path}: line 1: cannot read the header ({err}); the file is corrupt — "
                          "re-download it and compare with SHA256SUMS.txt") from err
    if not header:
        raise IngestError(f"{path}: line 1: empty file, expected a CSV header")
    return header


def check_header(path: Path, header: list[str], schema: TableSchema) -> None:
    got = [h.strip().lower() for h in header]
    expected = list(schema.columns)
    if got == expected:
        return
    missing = [c for c in expected if c not in got]
    unexpected = [c for c in got if c not in expected]
    detail = []
    if missing:
        detail.append(f"missing column(s) {missing}")
    if unexpected:
        detail.append(f"unexpected column(s) {unexpected}")
    if not detail:
        detail.append(f"columns out of order: {got}")
    raise IngestError(f"{path}: line 1: header does not match MIMIC-IV table {schema.source_name!r}: "
                      f"{'; '.join(detail)}. Expected: {expected}")


def decompress(path: Path, dest: Path) -> None:
    """Inflate a .csv.gz to `dest` in blocks; a truncated stream names the last complete line."""
    lines = 0
    try:
        with gzip.open(path, "rb") as fin, open(dest, "wb") as fout:
            while block := fin.read(1 << 22):
                fout.write(block)
                lines += block.count(b"\n")
    except (EOFError, OSError, zlib.error) as err:
        raise IngestError(f"{path}: line {lines + 1}: truncated or corrupt gzip stream ({err}); "
                          "re-download the file and compare with SHA256SUMS.txt") from err


def check_complete(csv_path: Path, display: Path) -> None:
    """A file cut mid-line (no final newline) is truncated, even if its last fields still parse."""
    with open(csv_path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return
        fh.seek(-1, 2)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        lines = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 22), b""))
    raise IngestError(f"{display}: line {lines + 1}: the file ends mid-line (no final newline); it looks "
                      "truncated — re-download it and compare with SHA256SUMS.txt")


def _record_line(csv_path: Path, record_index: int) -> int:
    """Line number (1-based, header = 1) where data record `record_index` starts."""
    with open(csv_path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        start = reader.line_num + 1
        for i, _ in enumerate(reader):
            if i == record_index:
                return start
            start = reader.line_num + 1
    return start


def diagnose(csv_path: Path, display: Path, header: list[str], schema: TableSchema) -> IngestError | None:
    """Find the first malformed record or unparseable value and describe it precisely."""
    with open(csv_path, encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        start = reader.line_num + 1
        for record in reader:
            if len(record) != len(header):
                return IngestError(f"{display}: line {start}: expected {len(header)} fields, found "
                                   f"{len(record)}; the row is malformed or the file is truncated")
            start = reader.line_num + 1
    raw = pl.scan_csv(csv_path, schema={h: pl.String for h in header}, has_header=True)
    raw = raw.rename(dict(zip(header, schema.columns, strict=True))).with_row_index("__row")
    first_bad: tuple[int, str] | None = None
    for name, dtype in schema.columns.items():
        if dtype == pl.String:
            continue
        bad = (raw.filter(pl.col(name).is_not_null() & _lenient_parse_expr(name, dtype).is_null())
               .select("__row", name).head(1).collect())
        if bad.height and (first_bad is None or bad["__row"][0] < first_bad[0]):
            first_bad = (bad["__row"][0], name)
    if first_bad is None:
        return None
    row, name = first_bad
    value = raw.filter(pl.col("__row") == row).select(name).collect().item()
    line = _record_line(csv_path, row)
    return IngestError(f"{display}: line {line}, column {name!r}: cannot parse {value!r} as "
                       f"{schema.columns[name]}; fix or blank the value (expected types are in "
                       "pipeline/ehr/schema.py)")


def ingest_table(path: Path, out_path: Path, scratch: Path, schema: TableSchema,
                 row_group_size: int) -> int:
    header = read_header(path)
    check_header(path, header, schema)
    csv_path = path
    if path.suffix == ".gz":
        csv_path = scratch / f"{schema.name}.csv"
        decompress(path, csv_path)
    try:
        check_complete(csv_path, path)
        raw = pl.scan_csv(csv_path, schema={h: pl.String for h in header}, has_header=True,
                          quote_char='"')
        raw = raw.rename(dict(zip(header, schema.columns, strict=True)))
        typed = raw.select([parse_expr(c, t).alias(c) for c, t in schema.columns.items()])
        sink_table(typed, out_path, schema, row_group_size)
    except IngestError:
        raise
    except pl.exceptions.PolarsError as err:
        out_path.unlink(missing_ok=True)
        precise = diagnose(csv_path, path, header, schema)
        raise (precise or IngestError(f"{path}: cannot be read as MIMIC-IV table "
                                      f"{schema.source_name!r}: {err}")) from err
    finally:
        if csv_path != path:
            csv_path.unlink(missing_ok=True)
    return pl.scan_parquet(out_path).select(pl.len()).collect().item()


def ingest(src: Path, out_dir: Path, *, row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
           progress: bool = True) -> IngestReport:
    """Ingest every MIMIC-IV table found under `src` into `out_dir` (a staging folder)."""
    from tqdm.auto import tqdm

    src = Path(src)
    if not src.is_dir():
        raise IngestError(f"{src}: MIMIC-IV directory not found; set ehr.path to a folder with hosp/ and icu/")
    report = IngestReport()
    located = {name: find_source_file(src, TABLES[name]) for name in MIMIC_TABLES}
    for name, path in located.items():
        if path is None and TABLES[name].required:
            raise IngestError(f"{src}: required table {TABLES[name].source_name}.csv.gz (or .csv) not "
                              "found; is ehr.path the root of a MIMIC-IV release (with hosp/ and icu/)?")
    scratch = out_dir / ".scratch"
    scratch.mkdir(exist_ok=True)
    try:
        for name, path in tqdm(located.items(), desc="ingest", unit="table", disable=not progress):
            schema = TABLES[name]
            if path is None:
                msg = f"{src}: optional table {schema.source_name} is missing; recorded in the manifest"
                warnings.warn(msg, MissingTableWarning, stacklevel=2)
                report.missing_tables.append(name)
                continue
            report.rows[name] = ingest_table(path, out_dir / f"{name}.parquet", scratch, schema,
                                             row_group_size)
            report.source_files[name] = {"path": str(path.relative_to(src)), "sha256": sha256_file(path)}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report
