"""Schedules: tasks that beat submits at the times a cron expression names, in an IANA time zone."""
