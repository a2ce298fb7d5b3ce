"""Whole networks: a graph's weights, its independent reference, and its execution through
the tuned layers' tiled schedules (a layer above the stages, calling them per layer)."""
