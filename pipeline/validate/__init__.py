"""Validation of the Clean-Noise pairs (DVC stage `validate`)."""
