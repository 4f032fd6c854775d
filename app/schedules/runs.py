"""A schedule's runs as they end: failures in a row (and the pause they lead to), and what a run's webhook says."""
from flask import current_app
from sqlalchemy import update

from ..task_queries import isoformat
from ..extensions import db
from ..models import Schedule


def record_outcome(schedule_id, task_id, status, error):
    """In the transaction that ends a run (lifecycle.finish, for a terminal status): a success resets the failure
    count; a failure (a cancel is none) adds one, and SCHEDULE_FAILURES_TO_PAUSE of them in a row pause the schedule
    with the reason."""
    if error == "cancelled":
        return
    if status == "success":
        db.session.execute(update(Schedule).where(Schedule.id == schedule_id).values(failures_in_row=0))
        return
    failures = db.session.execute(
        update(Schedule).where(Schedule.id == schedule_id).values(failures_in_row=Schedule.failures_in_row + 1)
        .returning(Schedule.failures_in_row)).scalar_one_or_none()
    limit = current_app.config["SCHEDULE_FAILURES_TO_PAUSE"]
    if failures is not None and limit and failures >= limit:
        reason = (f"Paused after {failures} failed runs in a row (SCHEDULE_FAILURES_TO_PAUSE); the last, "
                  f"{task_id}: {(error or 'error')[:300]}")
        db.session.execute(update(Schedule).where(Schedule.id == schedule_id, Schedule.status == "active")
                           .values(status="paused", paused_reason=reason, queued_fire_at=None))


def webhook_fields(task):
    """What a run's webhook adds: its trigger, and its schedule's state (paused, and why, after this run)."""
    if task.schedule_id is None:
        return {"trigger": "api"}
    fields = {"trigger": "schedule", "scheduleId": task.schedule_id, "fireTime": isoformat(task.fire_at)}
    schedule = db.session.get(Schedule, task.schedule_id, populate_existing=True)
    if schedule is not None:
        fields["schedule"] = {"status": schedule.status, "pausedReason": schedule.paused_reason,
                              "failuresInRow": schedule.failures_in_row}
    return fields
