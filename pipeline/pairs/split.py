"""PatientSplit: which clean tasks may feed the test split, so that no patient is on both sides.

Patient-scope tasks follow their patient (a seeded hash of subject_id); population-scope tasks,
which are about cohorts rather than patients, follow their own task id. A clean task therefore
never appears in both splits, and no patient's data is asked about in both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pipeline.noise.types import Task


def _unit(seed: int, key: str) -> float:
    digest = hashlib.blake2b(f"{seed}|{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class PatientSplit:
    seed: int
    test_share: float  # share of patients (and of population tasks) eligible for test

    def split_of(self, task: Task) -> str:
        if task.scope == "patient":
            if len(task.subject_ids) != 1:
                raise ValueError(f"patient task {task.task_id} must name exactly one subject_id")
            key = f"subject:{task.subject_ids[0]}"
        else:
            key = f"task:{task.task_id}"
        return "test" if _unit(self.seed, key) < self.test_share else "train"
