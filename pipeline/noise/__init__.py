"""Noise operators at record, value and query level, and the Clean-Noise pairs they make."""
