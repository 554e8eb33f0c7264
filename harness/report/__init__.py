"""Output people read: the markdown summary, the HTML report, terminal tables, progress lines."""
__all__: list[str] = []
