"""Where a series' page is in the results site (`bin/harness results site`), for the run summary and the
HTML report to link to: the site writes its pages under these names, the run's pages read them.

The site's address is configured with ANIMA_RESULTS_SITE (e.g. the URL the workflow publishes the
site at); without it the run's pages link nowhere.
"""
from __future__ import annotations

import os
import re

__all__ = ["slug", "series_page", "series_url", "SITE_URL_VARIABLE"]

SITE_URL_VARIABLE = "ANIMA_RESULTS_SITE"


def slug(text: str) -> str:
    """A file-name-safe form of a board id, case, model or figure: lower case, [a-z0-9.-] only."""
    return re.sub(r"[^a-z0-9.]+", "-", str(text).lower()).strip("-") or "-"


def series_page(board: str, case: str, backend: str, precision: str, steps: int) -> str:
    """The page of one board's runs of one experiment, relative to the site's root."""
    return f"series/{slug(board)}--{slug(case)}-{slug(backend)}-{slug(precision)}-{int(steps)}.html"


def series_url(board: str, case: str, backend: str, precision: str, steps: int, base: str | None = None) -> str | None:
    """The series page's URL under the configured site (`base`, else ANIMA_RESULTS_SITE), None without one."""
    base = base if base is not None else os.environ.get(SITE_URL_VARIABLE, "")
    if not base.strip():
        return None
    return f"{base.strip().rstrip('/')}/{series_page(board, case, backend, precision, steps)}"
