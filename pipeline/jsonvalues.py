"""JSON for values that must come back with their type (slots, patch rows, evidence keys).

Datetimes and dates are tagged (`{"$datetime": "2150-01-02T08:00:00"}`) so a slot rendered back
into SQL is a timestamp literal again, not a string.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from decimal import Decimal
from typing import Any


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _hook(obj: dict[str, Any]) -> Any:
    if len(obj) == 1 and "$datetime" in obj:
        return datetime.fromisoformat(obj["$datetime"])
    if len(obj) == 1 and "$date" in obj:
        return date.fromisoformat(obj["$date"])
    return obj


def dumps(value: Any) -> str:
    """Deterministic text: sorted keys, typed datetimes."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=_default)


def loads(text: str) -> Any:
    return json.loads(text, object_hook=_hook)
