"""Top-level pytest configuration: the suite's options, hooks and fixtures live in harness/pytest_plugin/;
pytester runs the suite's own gates in-process for the tests of its rules (baselines, summaries)."""
pytest_plugins = ["harness.pytest_plugin", "pytester"]
