"""Kept for the modules that import it by this name: the noise factor lives in verdict/noise.py."""
from .verdict.noise import NOISE_LOOKBACK, NULL_RECORDS, TAIL_DFS, NoiseFactor, noise_factor, standardized_shifts

__all__ = ["NoiseFactor", "standardized_shifts", "noise_factor", "NOISE_LOOKBACK", "TAIL_DFS", "NULL_RECORDS"]
