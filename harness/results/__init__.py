"""The results store and what judges its figures (history, A/B sessions, change points)."""

__all__: list[str] = []
