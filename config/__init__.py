"""Deployment configuration: settings read from the environment, gunicorn settings."""
