"""Backends: one file each behind the Context protocol in base.py."""
from .base import BACKENDS, BackendOptions, Context, backend_options, create_context, live_contexts

__all__ = ["BackendOptions", "Context", "create_context", "live_contexts", "backend_options", "BACKENDS"]
