"""Replay scripts: record a successful web run's browser actions, and run them again without a model."""
