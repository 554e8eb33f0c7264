"""Benchmark results: the store every run is written to (store.py), its records (records.py), tables and
schema migrations, the statistics that judge a run (verdict/: history, A/B sessions, change points)
and the commands that read them."""

__all__: list[str] = []
