"""rknn-toolkit2 conversion: per-version environments (envs), the toolkit-side worker process
(worker.py, run by the toolkit's own python) and the suite-side driver and gates."""
