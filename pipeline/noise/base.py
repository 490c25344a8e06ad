"""The NoiseOperator interface every operator implements."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pipeline.ehr.access import EHR
from pipeline.noise.types import LEVELS, NoisyItem, Task


class NotApplicable(Exception):
    """The operator cannot make a meaningful noisy item from this task; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class NoiseOperator:
    """Subclass, set the class attributes, implement `applicable` and `apply`, and `@register` it.

    `apply` returns the noisy question, the patch, the noisy gold SQL, the expected outcome and the
    trap SQL; `pipeline.noise.verify` then executes them and keeps the item only if they hold.
    `example_templates` name templates the operator applies to: its tests run on them.
    """

    name: ClassVar[str]
    level: ClassVar[str]
    recoverable: ClassVar[bool]
    description: ClassVar[str]
    defaults: ClassVar[dict[str, Any]] = {}
    example_templates: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ValueError(f"operator {self.name!r} has no parameter(s) {unknown}; parameters: "
                             f"{sorted(self.defaults)}")
        self.params: dict[str, Any] = {**self.defaults, **params}

    @classmethod
    def validate_class(cls) -> None:
        for attr in ("name", "level", "recoverable", "description"):
            if not hasattr(cls, attr):
                raise TypeError(f"noise operator {cls.__qualname__} lacks class attribute {attr!r}")
        if cls.level not in LEVELS:
            raise TypeError(f"noise operator {cls.name!r}: level {cls.level!r} is not one of {LEVELS}")

    def applicable(self, task: Task, ehr: EHR) -> bool:
        """A cheap check from the task alone (template shape, slots); `apply` may still refuse."""
        raise NotImplementedError

    def apply(self, task: Task, ehr: EHR, rng: np.random.Generator) -> NoisyItem:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params})"
