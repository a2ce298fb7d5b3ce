"""Validations against the seeds' published figures (one module per figure or paper)."""
