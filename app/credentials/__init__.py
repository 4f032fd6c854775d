"""Stored credentials (/fast/v2/credentials): sign-ins a task types by name, only into pages on their sites."""
