"""The operator registry: `@register` a NoiseOperator subclass; names are unique."""

from __future__ import annotations

from typing import Any

from pipeline.noise.base import NoiseOperator

OPERATORS: dict[str, type[NoiseOperator]] = {}


class UnknownOperatorError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def register(cls: type[NoiseOperator]) -> type[NoiseOperator]:
    if cls.name in OPERATORS:
        raise ValueError(f"noise operator name collision: {cls.name!r} is registered by "
                         f"{OPERATORS[cls.name].__module__}.{OPERATORS[cls.name].__qualname__}")
    cls.validate_class()
    OPERATORS[cls.name] = cls
    return cls


def operator(name: str, **params: Any) -> NoiseOperator:
    load_builtin_operators()
    if name not in OPERATORS:
        raise UnknownOperatorError(f"unknown noise operator {name!r}; valid operators: {', '.join(sorted(OPERATORS))}")
    return OPERATORS[name](**params)


def load_builtin_operators() -> dict[str, type[NoiseOperator]]:
    """Import every module of pipeline.noise.operators, which registers what it defines."""
    import importlib
    import pkgutil

    from pipeline.noise import operators

    for info in sorted(pkgutil.iter_modules(operators.__path__), key=lambda m: m.name):
        importlib.import_module(f"{operators.__name__}.{info.name}")
    return OPERATORS
