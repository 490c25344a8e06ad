"""The answer verifier: `grade(expected, submission, trajectory)` -> Grade, the reward of the environment.

Exact where it must be, tolerant where a clinician is (number formats, convertible units, ISO date
spellings, case/whitespace, list order when it does not matter), and not gameable by abstaining.
"""

from pipeline.verifier.evidence import ToolCall, tool_calls_from_messages
from pipeline.verifier.grade import REASONS, Expected, Grade, Submission, grade
from pipeline.verifier.units import UnitConversion

__all__ = ["REASONS", "Expected", "Grade", "Submission", "ToolCall", "UnitConversion", "grade",
           "tool_calls_from_messages"]
