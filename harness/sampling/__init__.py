"""Sampling: the discrete-flow schedule and CFG, Spectrum forecasting, the monolithic reference run."""
