"""Anima NPU acceptance harness."""
