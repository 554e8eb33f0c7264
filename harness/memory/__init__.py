"""Memory safety: the guard, the residency probe, the lifecycle planner."""
