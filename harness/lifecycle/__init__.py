"""Context lifecycle on a backend, timed stage by stage: load -> init -> run* -> release.

A strategy decides when contexts are loaded and released; the pipeline drives every strategy the
same way (acquire -> run per stream batch -> finish, and close() whatever happens):
on-demand, resident, lru:K, pinned:K (local, in the pipeline's process) and prefetch:K (worker
processes loading ahead in the fixed order). See `spec` for the `--lifecycle` values.
"""
from .local import LocalStrategy, Lru, OnDemand, Pinned, Resident
from .prefetch import Prefetch
from .records import STAGES, Counters, LifecycleRecorder, StageRecord
from .spec import LifecycleSpec, make_strategy, parse_lifecycle, pinned_subset

__all__ = ["STAGES", "StageRecord", "LifecycleRecorder", "Counters", "LocalStrategy", "OnDemand",
           "Resident", "Lru", "Pinned", "Prefetch", "LifecycleSpec", "parse_lifecycle",
           "make_strategy", "pinned_subset"]
