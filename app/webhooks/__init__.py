"""Webhooks: the outbox written with a task's final state, and its delivery log."""
