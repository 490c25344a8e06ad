"""Vectorised building blocks: expand parents into children, weighted picks, times, number text.

Times are handled as int64 seconds since the Unix epoch (MIMIC's shifted years 2110-2210 fit
easily) and only turned into Polars datetimes when a table is assembled. Everything draws from the
numpy Generator it is given, so a chunk's output depends on nothing but its seed.
"""

from __future__ import annotations

import numpy as np
import polars as pl

MINUTE = 60
HOUR = 3600
DAY = 86400


def expand(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Children of parents with `counts` children each: (parent index, index within parent)."""
    counts = np.asarray(counts, dtype=np.int64)
    parent = np.repeat(np.arange(counts.size), counts)
    starts = np.cumsum(counts) - counts
    within = np.arange(parent.size) - np.repeat(starts, counts)
    return parent, within


def group_rank(groups: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """1-based rank of each key within its group (ties broken by position): per-subject sequence numbers."""
    order = np.lexsort((np.arange(keys.size), keys, groups))
    sorted_groups = groups[order]
    first = np.r_[True, sorted_groups[1:] != sorted_groups[:-1]]
    run_start = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    ranks = np.empty(order.size, dtype=np.int64)
    ranks[order] = np.arange(order.size) - run_start + 1
    return ranks


def choice(rng: np.random.Generator, p: np.ndarray, size: int) -> np.ndarray:
    """Indices drawn with replacement from probabilities `p`."""
    cdf = np.cumsum(p)
    return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"), p.size - 1)


def choose_k(rng: np.random.Generator, p: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted sampling without replacement, k[i] items for row i (Gumbel top-k).

    Returns (row index, item index) pairs ordered by row, then by draw order (so the first item of
    a row is its "principal" one). k is capped at the number of items with non-zero weight.
    """
    k = np.minimum(np.asarray(k, dtype=np.int64), int((p > 0).sum()))
    if k.size == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    with np.errstate(divide="ignore"):
        keys = np.log(p)[None, :] - np.log(-np.log(rng.random((k.size, p.size))))
    order = np.argsort(-keys, axis=1, kind="stable")
    row, within = expand(k)
    return row, order[row, within]


def between(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Uniform int64 times in [lo, hi] (hi < lo is treated as hi = lo)."""
    span = np.maximum(np.asarray(hi) - np.asarray(lo), 0)
    return np.asarray(lo) + np.floor(rng.random(span.shape) * (span + 1)).astype(np.int64)


def days(n: np.ndarray | float) -> np.ndarray:
    """A number of days as int64 seconds."""
    return np.asarray(np.asarray(n) * DAY, dtype=np.int64)


def floor_to(t: np.ndarray, unit: int) -> np.ndarray:
    return t - np.mod(t, unit)


def ceil_to(t: np.ndarray, unit: int) -> np.ndarray:
    return floor_to(t + unit - 1, unit)


def lognormal(rng: np.random.Generator, median: np.ndarray | float, sigma: float, size: int) -> np.ndarray:
    return np.asarray(median) * np.exp(sigma * rng.standard_normal(size))


def skewed(rng: np.random.Generator, p5: np.ndarray, p50: np.ndarray, p95: np.ndarray) -> np.ndarray:
    """Draws whose 5th/50th/95th percentiles match the given ones (split normal around the median)."""
    z = rng.standard_normal(np.shape(p50))
    return np.where(z < 0, p50 + z * (p50 - p5) / 1.645, p50 + z * (p95 - p50) / 1.645)


def datetimes(seconds: np.ndarray, null: np.ndarray | None = None, name: str = "") -> pl.Series:
    """Epoch seconds as a Datetime("us") Series; rows where `null` is True become null."""
    s = pl.Series(name, np.asarray(seconds, dtype=np.int64) * 1_000_000).cast(pl.Datetime("us"))
    return s.scatter(np.flatnonzero(null), None) if null is not None and null.any() else s


def dates(seconds: np.ndarray, name: str = "") -> pl.Series:
    """Epoch seconds as a Date Series (the calendar day the instant falls on)."""
    return pl.Series(name, np.floor_divide(seconds, DAY).astype(np.int32)).cast(pl.Date)


def nullable(values: np.ndarray, null: np.ndarray, name: str = "",
             dtype: pl.DataType | None = None) -> pl.Series:
    """Series of `values` with nulls where `null` is True."""
    s = pl.Series(name, values, dtype=dtype)
    return s.scatter(np.flatnonzero(null), None) if null.any() else s


def take(series: pl.Series, idx: np.ndarray, name: str | None = None) -> pl.Series:
    """Gather catalog/pool values by index (vectorised lookup)."""
    out = series.gather(np.asarray(idx, dtype=np.int64))
    return out.alias(name) if name else out


def round_to(values: np.ndarray, decimals: np.ndarray | int) -> np.ndarray:
    """Round half away from zero to `decimals` places (what a lab system prints)."""
    scale = np.power(10.0, decimals)
    return np.sign(values) * np.floor(np.abs(values) * scale + 0.5) / scale


def number_text(values: np.ndarray, decimals: np.ndarray | int) -> pl.Series:
    """Format numbers with a fixed number of decimals ("4.10", "138", "-3"), vectorised."""
    decimals = np.broadcast_to(np.asarray(decimals, dtype=np.int64), np.shape(values))
    scaled = np.floor(np.abs(values) * np.power(10.0, decimals) + 0.5).astype(np.int64)
    scale = np.power(10, decimals).astype(np.int64)
    frame = pl.DataFrame({"neg": (values < 0) & (scaled > 0), "whole": scaled // scale,
                          "frac": scaled % scale, "d": decimals})
    frac = pl.col("frac").cast(pl.String).str.zfill(pl.col("d"))
    text = pl.concat_str(pl.when(pl.col("neg")).then(pl.lit("-")).otherwise(pl.lit("")),
                         pl.col("whole").cast(pl.String),
                         pl.when(pl.col("d") > 0).then(pl.concat_str(pl.lit("."), frac))
                         .otherwise(pl.lit("")))
    return frame.select(text.alias("text")).to_series()


def ensure_any(mask: np.ndarray, index: int = 0) -> np.ndarray:
    """Force at least one True so every table is populated even for tiny chunks."""
    if mask.size and not mask.any():
        mask = mask.copy()
        mask[min(index, mask.size - 1)] = True
    return mask


def text_where(mask: np.ndarray, text: str, name: str = "") -> pl.Series:
    """`text` where mask is True, null elsewhere (without a slow object-array round trip)."""
    return pl.select(pl.when(pl.Series(mask)).then(pl.lit(text)).alias(name)).to_series()


def take_null(series: pl.Series, idx: np.ndarray, null: np.ndarray, name: str | None = None) -> pl.Series:
    """Gather by index, then null out rows where `null` is True (for text columns)."""
    out = take(series, idx, name)
    return out.scatter(np.flatnonzero(null), None) if null.any() else out


def mask(flags: pl.Series) -> np.ndarray:
    """Boolean Series as a numpy mask, nulls counting as False."""
    return flags.fill_null(False).to_numpy().astype(bool)


def minute_between(rng: np.random.Generator, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Whole-minute times in [lo, hi] (lo itself where no whole minute fits), as charted times are."""
    first = ceil_to(lo, MINUTE)
    t = floor_to(between(rng, first, hi), MINUTE)
    return np.where(first <= hi, t, lo)


def nulls(n: int, dtype: type[pl.DataType] | pl.DataType = pl.String, name: str = "") -> pl.Series:
    """An all-null column of length n (columns MIMIC leaves empty)."""
    return pl.repeat(None, n, dtype=dtype, eager=True).alias(name)
