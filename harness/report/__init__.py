"""Output people read: the markdown summary, the HTML report, terminal tables, progress lines."""
