"""Fake rknn-toolkit-lite2 for tests off the board: see api.py."""
