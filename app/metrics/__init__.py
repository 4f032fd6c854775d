"""Prometheus metrics (docs/monitoring.md): events in `events`, state in `state`, the folders and the token in
`processes`. Nothing here creates a metric: `processes.prepare` must run before `events` is imported."""
