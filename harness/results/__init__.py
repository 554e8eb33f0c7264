"""Benchmark results: the store every run is written to (store.py), its records (records.py), tables and
schema migrations, the statistics that judge a run (verdicts.py) and the commands that read them."""

__all__: list[str] = []
