"""Results of runs over time: benchmark history, trend, run comparison, provenance, telemetry."""
__all__: list[str] = []
