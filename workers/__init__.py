"""Celery workers: agent tasks, webhook deliveries and beat sweeps (`celery -A workers ...`)."""
