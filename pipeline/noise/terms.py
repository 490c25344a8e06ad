"""Which slots of a task are clinical terms (names a clinician types), and how people misspell them."""

from __future__ import annotations

import re

import numpy as np

from pipeline.noise.types import Task

# Slots whose text a clinician would not type as a term (coded or closed vocabularies).
NOT_TERMS = {"gender", "sex", "icd_code", "icd_version", "code", "unit"}
_WORD = re.compile(r"[A-Za-z]{5,}")


def term_slots(task: Task) -> list[str]:
    """String slots with a word of 5+ letters that appears verbatim in the question."""
    return sorted(name for name, value in task.slots.items()
                  if isinstance(value, str) and name not in NOT_TERMS and _WORD.search(value)
                  and value in task.question)


def misspell(term: str, rng: np.random.Generator) -> str:
    """One realistic keyboard slip in the longest word: drop, double, swap or substitute a vowel."""
    words = list(_WORD.finditer(term))
    word = max(words, key=lambda m: (len(m.group()), -m.start()))
    w, start = word.group(), word.start()
    i = int(rng.integers(1, len(w) - 1))  # keep the first and last letter, as readers do
    kind = int(rng.integers(0, 4))
    if kind == 0:
        typo = w[:i] + w[i + 1:]
    elif kind == 1:
        typo = w[:i] + w[i] + w[i:]
    elif kind == 2:
        typo = w[:i] + w[i + 1] + w[i] + w[i + 2:] if w[i] != w[i + 1] else w[:i] + w[i + 1:]
    else:
        vowels = "aeiou"
        j = next((k for k in range(i, len(w) - 1) if w[k].lower() in vowels), i)
        replacement = vowels[(vowels.index(w[j].lower()) + 1) % 5] if w[j].lower() in vowels else "e"
        typo = w[:j] + (replacement.upper() if w[j].isupper() else replacement) + w[j + 1:]
    return term[:start] + typo + term[start + len(w):]
