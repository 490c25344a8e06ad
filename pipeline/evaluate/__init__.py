"""Evaluation: run an agent over the benchmark's clean and noisy episodes, score it, write a report.

`python -m pipeline.evaluate agent=<name> trials=4` (see `__main__`); `runner.evaluate` runs episodes x
trials on threads, `metrics.summarise` scores the records (success, pair success, pass^k, reliability),
`report.write_report` writes `outputs/eval/<agent>/`.
"""
