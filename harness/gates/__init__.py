"""The acceptance gates: the gate runner, golden cases and store, image quality, benchmark baselines, accuracy."""
