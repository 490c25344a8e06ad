"""The interactive environment ("gym"): an agent answers a benchmark question with SQL and Python tools."""
