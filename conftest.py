"""Top-level pytest configuration: suite options and shared fixtures (filled in by the gates)."""
