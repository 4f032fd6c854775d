"""Publishing "look at task X" to the workers: the one step every path that (re)starts a task ends with. Below the
blueprints' services: app/dispatch/service.py submits with it, app/codes resumes tasks through it, and beat's
sweep publishes again what was never published."""
import logging

from flask import current_app
from sqlalchemy import bindparam, update

from .extensions import db
from .models import Task, now

log = logging.getLogger(__name__)

_TASKS = Task.__table__
_MARK_DISPATCHED = update(_TASKS).where(_TASKS.c.id == bindparam("task_id")).values(dispatched_at=now())
_UNMARK_DISPATCHED = update(_TASKS).where(_TASKS.c.id == bindparam("task_id")).values(dispatched_at=None)


def dispatch(task_id, premarked=False, node=None):
    """Publish "look at task X"; on failure the task stays undispatched and beat re-publishes it.

    premarked: the row already says dispatched (submit writes dispatched_at with the INSERT, which
    saves a second transaction per submit); a failed publish then clears it, so beat publishes the
    task after DISPATCH_GRACE_SECONDS. (Only a crash between the commit and the publish leaves it
    marked; beat then publishes it after REDISPATCH_AFTER_SECONDS, and the caller, who got no 202,
    learns nothing was confirmed.)
    """
    broker, retry = current_app.extensions["broker"], {"max_retries": 1, "interval_start": 0, "interval_step": 0.2}
    try:
        # `node`: the worker keeping the task's browser (a pause's); any worker when it is not running.
        if node is None or broker.send_to_node("workers.run_task", [task_id], node, retry) is None:
            broker.send("workers.run_task", [task_id], retry_policy=retry)
    except Exception as exc:  # broker down: the row is the outbox
        log.warning("publish of task %s failed, beat will retry: %s", task_id, exc)
        if premarked:
            with db.engine.begin() as conn:
                conn.execute(_UNMARK_DISPATCHED, {"task_id": task_id})
        return False
    if not premarked:
        # A prebuilt Core UPDATE on a connection of its own: through the ORM session it cost more
        # CPU than the publish itself (make bench-profile).
        with db.engine.begin() as conn:
            conn.execute(_MARK_DISPATCHED, {"task_id": task_id})
    return True
