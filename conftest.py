"""Top-level pytest configuration: the suite's options, hooks and fixtures live in harness/pytest_plugin/."""
pytest_plugins = ["harness.pytest_plugin"]
