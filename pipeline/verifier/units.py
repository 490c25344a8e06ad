"""Units as a grader sees them: spellings that mean the same unit, and conversions between units.

Two submitted units are the same when their canonical forms agree ("mm Hg" == "mmHg", "µmol/L" ==
"umol/l", "°C" == "C", "patients" == "patient"). A different unit is accepted only through a known
conversion: the item's analyte-specific ones (`UnitConversion`, usually from `clinical.CONVERSIONS`)
or the small analyte-independent table below (mass, length, time, pressure, ...). Aliases are only
listed where they cannot mean anything else in a clinical answer.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UnitConversion:
    """`to_value = value * scale + offset`; `decimals`: how values in `to_unit` are usually reported."""

    from_unit: str
    to_unit: str
    scale: float
    offset: float = 0.0
    decimals: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scale, int | float) or not self.scale or self.scale != self.scale:
            raise ValueError(f"conversion scale must be a non-zero number, got {self.scale!r}")

    def forward(self, value: float) -> float:
        return value * self.scale + self.offset

    def back(self, value: float) -> float:
        return (value - self.offset) / self.scale

    def to_dict(self) -> dict[str, Any]:
        return {"from_unit": self.from_unit, "to_unit": self.to_unit, "scale": self.scale, "offset": self.offset,
                "decimals": self.decimals}

    @classmethod
    def from_dict(cls, d: Any) -> UnitConversion:
        if isinstance(d, UnitConversion):
            return d
        if hasattr(d, "unit") and hasattr(d, "to") and hasattr(d, "scale"):  # a clinical.Conversion
            return cls(d.unit, d.to, float(d.scale), float(d.offset), getattr(d, "decimals", None))
        try:
            decimals = d.get("decimals")
            return cls(str(d["from_unit"]), str(d["to_unit"]), float(d["scale"]), float(d.get("offset", 0.0)),
                       None if decimals is None else int(decimals))
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"not a unit conversion: {d!r}") from err


@dataclass(frozen=True)
class Route:
    """How a submitted value becomes a value in the expected unit; `decimals` = usual precision of the
    submitted unit when the conversion says so (bounds the rounding allowance)."""

    scale: float
    offset: float = 0.0
    decimals: int | None = None

    def apply(self, value: float) -> float:
        return value * self.scale + self.offset


def _aliases(table: dict[str, tuple[str, ...]]) -> dict[str, str]:
    return {alias: canon for canon, names in table.items() for alias in (canon, *names)}


# Whole-unit spellings (looked up before and after part-wise aliasing of compound units).
_WHOLE = _aliases({
    "°c": ("c", "degc", "degreec", "degreesc", "celsius", "degreecelsius", "degreescelsius", "centigrade"),
    "°f": ("f", "degf", "degreef", "degreesf", "fahrenheit", "degreefahrenheit", "degreesfahrenheit"),
    "mmhg": ("mm[hg]", "torr", "mmofhg"),
    "%": ("percent", "pct", "percentage"),
    "bpm": ("beats/min", "beatsperminute", "beat/min"),
    "insp/min": ("breaths/min", "breathsperminute", "breath/min", "resp/min"),
    "k/ul": ("10^3/ul", "x10^3/ul", "10*3/ul", "x10*3/ul", "10e3/ul", "x10e3/ul", "thou/ul", "k/mm3",
             "10^3/mm3", "10^9/l", "x10^9/l", "10*9/l", "x10*9/l", "x10e9/l"),
    "m/ul": ("10^6/ul", "x10^6/ul", "10*6/ul", "x10*6/ul", "x10e6/ul", "mil/ul", "m/mm3", "10^6/mm3", "10^12/l",
             "x10^12/l", "10*12/l", "x10*12/l", "x10e12/l"),
    "usd": ("$", "us$", "dollar", "dollars", "usdollars"),
    "kg/m2": ("kg/m^2", "kg/sqm"),
    "yr": ("y", "yrs", "year", "years", "yo", "y/o", "yearsold", "yearold", "years-old", "year-old"),
})

# Spellings of the parts of a compound unit ("mg/dL" -> "mg" / "dl").
_PART = _aliases({
    "s": ("sec", "secs", "second", "seconds"),
    "min": ("mins", "minute", "minutes"),
    "h": ("hr", "hrs", "hour", "hours"),
    "d": ("day", "days"),
    "wk": ("wks", "week", "weeks"),
    "ng": ("nanogram", "nanograms"),
    "mcg": ("ug", "microgram", "micrograms"),
    "mg": ("mgs", "milligram", "milligrams"),
    "g": ("gm", "gms", "gram", "grams"),
    "kg": ("kgs", "kilogram", "kilograms", "kilo", "kilos"),
    "lb": ("lbs", "pound", "pounds"),
    "mm": ("millimeter", "millimeters", "millimetre", "millimetres"),
    "cm": ("centimeter", "centimeters", "centimetre", "centimetres"),
    "m": ("meter", "meters", "metre", "metres"),
    "in": ("inch", "inches"),
    "ft": ("foot", "feet"),
    "ml": ("mls", "cc", "milliliter", "milliliters", "millilitre", "millilitres"),
    "dl": ("deciliter", "deciliters", "decilitre", "decilitres"),
    "l": ("liter", "liters", "litre", "litres"),
})

# Analyte-independent linear units: canonical unit -> (dimension, size in the dimension's base unit).
_LINEAR: dict[str, tuple[str, float]] = {
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0), "d": ("time", 86400.0),
    "wk": ("time", 604800.0),
    "pg": ("mass", 1e-12), "ng": ("mass", 1e-9), "mcg": ("mass", 1e-6), "mg": ("mass", 1e-3), "g": ("mass", 1.0),
    "kg": ("mass", 1e3), "lb": ("mass", 453.59237), "oz": ("mass", 28.349523125),
    "mm": ("length", 0.1), "cm": ("length", 1.0), "m": ("length", 100.0), "in": ("length", 2.54),
    "ft": ("length", 30.48),
    "mmhg": ("pressure", 0.133322), "kpa": ("pressure", 1.0), "cmh2o": ("pressure", 0.0980665),
    "g/l": ("mass/volume", 1.0), "g/dl": ("mass/volume", 10.0), "mg/ml": ("mass/volume", 1.0),
    "mg/dl": ("mass/volume", 1e-2), "mg/l": ("mass/volume", 1e-3), "mcg/ml": ("mass/volume", 1e-3),
    "mcg/dl": ("mass/volume", 1e-5), "mcg/l": ("mass/volume", 1e-6), "ng/ml": ("mass/volume", 1e-6),
    "ng/dl": ("mass/volume", 1e-8), "ng/l": ("mass/volume", 1e-9), "pg/ml": ("mass/volume", 1e-9),
    "mol/l": ("amount/volume", 1.0), "mmol/l": ("amount/volume", 1e-3), "umol/l": ("amount/volume", 1e-6),
    "nmol/l": ("amount/volume", 1e-9), "pmol/l": ("amount/volume", 1e-12),
    "ml": ("volume", 1.0), "dl": ("volume", 100.0), "l": ("volume", 1000.0),
    "k/ul": ("count/volume", 1e9), "m/ul": ("count/volume", 1e12),
}

_SPACES = re.compile(r"\s+")
_PER = re.compile(r"\s+per\s+")


def _singular(part: str) -> str:
    """Count nouns: "patients" -> "patient", "admissions" -> "admission" (not "mass" -> "mas")."""
    return part[:-1] if part.isalpha() and len(part) >= 4 and part.endswith("s") and not part.endswith("ss") else part


def canonical_unit(unit: str) -> str:
    """One spelling per unit: NFKC, micro sign -> u, casefolded, no spaces, aliases resolved, plural words
    singular ("Patients" -> "patient")."""
    text = unicodedata.normalize("NFKC", str(unit)).replace("μ", "u").replace("µ", "u").casefold()
    text = _SPACES.sub("", _PER.sub("/", text.strip()).replace("º", "°").replace("˚", "°")).rstrip(".")
    if text in _WHOLE:
        return _WHOLE[text]
    text = "/".join(_PART.get(part, part) for part in text.split("/"))
    if text in _WHOLE:
        return _WHOLE[text]
    return "/".join(_singular(part) for part in text.split("/"))


def same_unit(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return canonical_unit(a) == canonical_unit(b)


def _generic(source: str, target: str) -> Route | None:
    """A conversion that holds for any analyte (mass, length, time, temperature, % of a fraction)."""
    if source == "°c" and target == "°f":
        return Route(9 / 5, 32.0)
    if source == "°f" and target == "°c":
        return Route(5 / 9, -160 / 9)
    if source == "%" and target.startswith("fraction"):
        return Route(0.01)
    if source.startswith("fraction") and target == "%":
        return Route(100.0)
    if "fraction" in (source, target) and source.startswith("fraction") and target.startswith("fraction"):
        return Route(1.0)  # "0.25 fraction" for a fraction of stays
    a, b = _LINEAR.get(source), _LINEAR.get(target)
    if a is None or b is None or a[0] != b[0]:
        return None
    return Route(a[1] / b[1])


def find_route(source: str, target: str, conversions: tuple[UnitConversion, ...] = ()) -> Route | None:
    """How to turn a value in unit `source` into one in `target`: an item conversion (either direction)
    first, then the generic table; None when the units are not convertible."""
    s, t = canonical_unit(source), canonical_unit(target)
    if s == t:
        return Route(1.0)
    for c in conversions:
        cf, ct = canonical_unit(c.from_unit), canonical_unit(c.to_unit)
        if cf == t and ct == s:  # the submission is in the conversion's target unit: convert back
            return Route(1 / c.scale, -c.offset / c.scale, c.decimals)
        if cf == s and ct == t:
            return Route(c.scale, c.offset)
    return _generic(s, t)
