"""Backends: one file each behind the Context protocol in base.py."""
from .base import Context, create_context, live_contexts, BACKENDS

__all__ = ["Context", "create_context", "live_contexts", "BACKENDS"]
