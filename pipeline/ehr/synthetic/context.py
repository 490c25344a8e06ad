"""What every table builder of one chunk shares: its random stream, the catalogs, id pools."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from pipeline.ehr.synthetic.catalog import Catalog
from pipeline.ehr.synthetic.ids import IdAllocator


@dataclass(frozen=True)
class Pools:
    """De-identified staff ids shared by all chunks (written once as `provider` / `caregiver`)."""

    providers: pl.Series  # provider_id strings like "P03YMR"
    caregivers: np.ndarray  # caregiver_id integers


@dataclass
class Chunk:
    """Generation state of one chunk of patients."""

    rng: np.random.Generator
    cat: Catalog
    pools: Pools
    ids: IdAllocator

    def providers(self, n: int, share: float = 1.0, name: str = "provider_id") -> pl.Series:
        """`n` provider ids drawn from the pool; each is null with probability 1 - share."""
        idx = self.rng.integers(0, self.pools.providers.len(), n)
        out = self.pools.providers.gather(idx).alias(name)
        if share < 1.0:
            null = self.rng.random(n) >= share
            out = out.scatter(np.flatnonzero(null), None) if null.any() else out
        return out

    def caregivers(self, n: int) -> np.ndarray:
        return self.pools.caregivers[self.rng.integers(0, self.pools.caregivers.size, n)]
