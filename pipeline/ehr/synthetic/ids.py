"""Identifier allocation that is unique across chunks and looks like MIMIC-IV's.

MIMIC's hadm_id, stay_id, pharmacy_id, specimen ids look random within a fixed number of digits;
sequential counters would leak generation order. Each kind of id is therefore a bijective affine
permutation of a running counter (`base + (i * mult + shift) mod span`), so ids are unique with no
lookup table, random-looking, and the same for the same counter. Event ids MIMIC numbers
sequentially (labevent_id, microevent_id) stay plain counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class IdSpace:
    """A permuted id range: `span` ids starting at `base`."""

    base: int
    span: int
    mult: int
    shift: int

    def __post_init__(self) -> None:
        if math.gcd(self.mult, self.span) != 1:
            raise ValueError(f"multiplier {self.mult} must be coprime with span {self.span}")

    def ids(self, counters: np.ndarray) -> np.ndarray:
        if counters.size and int(counters.max()) >= self.span:
            raise OverflowError(f"id space of {self.span:,} exhausted; generate fewer patients")
        return self.base + (counters.astype(np.int64) * self.mult + self.shift) % self.span


SPACES: dict[str, IdSpace] = {
    "hadm_id": IdSpace(20_000_000, 10_000_000, 7_368_787, 5_830_919),
    "stay_id": IdSpace(30_000_000, 10_000_000, 3_571_429, 2_946_817),
    "transfer_id": IdSpace(30_000_000, 10_000_000, 6_180_339, 7_702_453),
    "pharmacy_id": IdSpace(1_000_000, 99_000_000, 61_803_397, 31_415_926),
    "specimen_id": IdSpace(1_000_000, 99_000_000, 27_182_819, 14_142_135),
    "micro_specimen_id": IdSpace(1_000_000, 9_000_000, 4_142_137, 1_732_050),
    "orderid": IdSpace(1_000_000, 9_000_000, 2_236_069, 3_605_551),
}
SEQUENTIAL = ("labevent_id", "microevent_id")


@dataclass
class IdAllocator:
    """Running counters, carried from chunk to chunk (chunks are generated in order)."""

    counters: dict[str, int] = field(default_factory=lambda: dict.fromkeys([*SPACES, *SEQUENTIAL], 0))

    def take(self, kind: str, n: int) -> np.ndarray:
        """The next `n` ids of one kind."""
        start = self.counters[kind]
        self.counters[kind] = start + n
        counters = np.arange(start, start + n, dtype=np.int64)
        return SPACES[kind].ids(counters) if kind in SPACES else counters + 1
