"""The partitioned run: the pipeline, one run and its report, the step split, calibration capture,
conversion on first use."""
