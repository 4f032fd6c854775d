"""A task's state machine on its row: claim, lease, progress, pause, finish.

Every transition is a compare-and-swap, so duplicate messages, a crashed worker and a
racing sweep can never both win: exactly one finaliser ends a task.
"""
import functools
import logging
from datetime import datetime, timezone

from flask import current_app
from sqlalchemy import Float, and_, bindparam, func, or_, select, update
from sqlalchemy.sql.expression import ClauseElement

from .metrics import events as metrics
from .bounds import bounded_response, bounded_trace, truncate
from .task_queries import NO_USAGE, isoformat
from .extensions import db
from .models import Task, now, now_plus
from .schedules.runs import record_outcome
from .webhooks.outbox import add_delivery, publish

log = logging.getLogger(__name__)

TERMINAL = ("success", "error")


# A task run's claim and its finish are the two writes on every task's path, so their statements are built
# once (the finish's once per shape), on the table rather than the ORM entity, and get their values as
# parameters. An ORM UPDATE built per call spent more CPU in SQLAlchemy (building it, keying it for the
# compiled cache, evaluating it against the session) than Postgres spends running it: claim + finish went
# from 3.8-5.1 to 1.7-1.8 ms of CPU. Nothing in the session needs syncing: each commits at once, and a commit
# expires whatever the session holds.
_TASKS = Task.__table__
_CLAIM = select(Task).from_statement(
    update(_TASKS)
    .where(_TASKS.c.id == bindparam("task_id"), _TASKS.c.status == "pending", _TASKS.c.lease_owner.is_(None))
    .values(lease_owner=bindparam("owner"), lease_expires_at=now_plus(bindparam("lease_seconds", type_=Float)),
            attempt=_TASKS.c.attempt + 1, started_at=func.coalesce(_TASKS.c.started_at, now()))
    .returning(*_TASKS.c))


def claim(task_id, owner):
    """Take the lease on a pending, unleased task; returns the claimed row or None.

    The row comes back from the claim's own UPDATE and detached from the session: the run reads it once, and
    nothing of it is reloaded in a transaction later."""
    task = db.session.execute(_CLAIM, {"task_id": task_id, "owner": owner,
                                       "lease_seconds": float(current_app.config["LEASE_SECONDS"])}
                              ).scalars().first()
    if task is not None:
        db.session.expunge(task)
    db.session.commit()
    if task is not None:
        metrics.task_claimed(task)
    return task


def renew(conn, task_id, owner, lease_seconds):
    """Extend the lease (runs on the heartbeat thread's own connection); False if it was lost."""
    result = conn.execute(
        update(Task)
        # input-required too: a run waiting for a person (live view takeover) keeps its browser and its lease.
        .where(Task.id == task_id, Task.lease_owner == owner, Task.status.in_(("pending", "input-required")))
        .values(lease_expires_at=now_plus(lease_seconds))
    )
    return result.rowcount == 1


def cancel_requested(task_id):
    return bool(db.session.execute(
        select(Task.cancel_requested).where(Task.id == task_id)).scalar())


def run_flags(task_id):
    """What a running task's loop checks between actions, in one read: (cancel requested, takeover, status)."""
    row = db.session.execute(select(Task.cancel_requested, Task.takeover, Task.status).where(Task.id == task_id)).first()
    return (bool(row.cancel_requested), row.takeover, row.status) if row else (False, None, None)


def await_person(task_id, owner, question, hitl):
    """A running task asks for a person (live view takeover) and keeps its lease and browser: `input-required`
    for pollers, `wait` callers and the webhook, until a hand-back (app/live/service.py) sets it running again."""
    trace = db.session.execute(select(Task.trace).where(Task.id == task_id)).scalar()
    response = {"output": {"type": "text", "content": question}, "text": question, "structuredOutput": None,
                "actionTrace": trace or []}
    won = db.session.execute(
        update(_TASKS).where(_TASKS.c.id == task_id, _TASKS.c.lease_owner == owner, _TASKS.c.status == "pending")
        .values(status="input-required", response=bounded_response(response), hitl=hitl)
        .returning(_TASKS.c.callback_url)).first()
    if won is None:
        db.session.rollback()
        return False
    delivery_id = add_delivery(db.session.get(Task, task_id), "input-required") if won.callback_url else None
    if db.engine.dialect.name == "postgresql":
        db.session.execute(select(func.pg_notify("task_finished", task_id)))  # wakes `wait` callers at commit
    db.session.commit()
    if delivery_id:
        publish(delivery_id)
    return True


def finish(task_id, status, response, usage, trace=None, error=None, owner=None, holder_lost=False, **extra):
    """End or pause a task in one transaction; returns True if this call won.

    `owner` is the lease holder finishing its own run; None means a sweep or a cancel
    ending a task nobody holds (or whose holder is gone). `holder_lost`: the machine of whoever holds its lease is
    known to be gone (its kept session's machine stopped answering), so its lease counts for nothing. `extra`: more
    columns to set, each a value or an SQL expression (such as now_plus(seconds)).
    """
    # Outputs and traces are cut here, where every ending is written (MAX_OUTPUT_CHARS,
    # MAX_TRACE_ENTRY_CHARS): what a task stores, and so what a poll, a list page or a webhook
    # carries, stays bounded.
    # Every path that ends a task comes here: a sweep ending one that never ran still carries usage.
    values = dict(status=status, response=bounded_response(response), usage=usage or NO_USAGE,
                  error=truncate(error, current_app.config["MAX_OUTPUT_CHARS"]), **extra)
    if trace is not None:
        values["trace"] = bounded_trace(trace)
    expressions = {name: value for name, value in values.items() if isinstance(value, ClauseElement)}
    params = {f"set_{name}": value for name, value in values.items() if name not in expressions}
    by = "owner" if owner is not None else "anyone" if holder_lost else "sweep"
    statement = _finish_statement(tuple(sorted(values.keys() - expressions.keys())), status in TERMINAL, by,
                                  db.engine.dialect.name == "postgresql")
    if expressions:
        statement = statement.values(**expressions)
    won = db.session.execute(statement, {**params, "task_id": task_id, "owner": owner}).first()
    if won is None:
        db.session.rollback()
        return False
    if won.schedule_id is not None and status in TERMINAL:  # a schedule's run: its failures in a row, here
        record_outcome(won.schedule_id, task_id, status, error)
    # Only a task with a callback needs reading back for its webhook payload.
    delivery_id = add_delivery(db.session.get(Task, task_id), status) if won.callback_url else None
    db.session.commit()
    if status in TERMINAL:
        metrics.task_finished(status, won)
    if delivery_id:
        publish(delivery_id)
    return True


@functools.lru_cache(maxsize=64)
def _finish_statement(names, terminal, by, notify):
    """finish()'s UPDATE for one shape: the columns it sets (`names`, given as set_<name> parameters), whether
    the task ends, who ends it (`by`: its lease holder "owner", a "sweep", or "anyone" when the holder is gone).
    `notify`: wake `wait` callers (Postgres LISTEN/NOTIFY), from the UPDATE's own RETURNING, so delivered when the
    transaction commits and only if this call won."""
    condition = [_TASKS.c.id == bindparam("task_id"), _TASKS.c.status.in_(("pending", "input-required"))]
    if by == "owner":
        condition.append(_TASKS.c.lease_owner == bindparam("owner"))
    elif by == "sweep":  # only a task nobody holds, or whose holder's lease ran out
        condition.append(or_(_TASKS.c.lease_owner.is_(None), _TASKS.c.lease_expires_at < now()))
    values = {name: bindparam(f"set_{name}") for name in names}
    values.update(lease_owner=None, lease_expires_at=None)
    if terminal:
        values.update(completed_at=now(), secrets_sealed=None, hitl=None, pause_snapshot=None, browser_node=None,
                      live=None, wait_sealed=None)
    # What the finished-task metrics label and time it by (app/metrics), and a schedule's run its schedule, read back
    # by the same statement.
    returning = [_TASKS.c.callback_url, _TASKS.c.schedule_id, _TASKS.c.execution_mode, _TASKS.c.agent,
                 _TASKS.c.started_at, _TASKS.c.completed_at]
    if notify:
        returning.append(func.pg_notify("task_finished", _TASKS.c.id))
    return update(_TASKS).where(and_(*condition)).values(**values).returning(*returning)


def waits_for_arrival(task):
    """Whether the task paused (or is resuming from a pause) for a one-time code or sign-in link to arrive
    (`${code:TO}`, `${link:TO}`), not for a person's answer."""
    return (task.hitl or {}).get("type") == "arrival"


def takes_up_a_pause(task):
    """Whether this run goes on from a pause: a question answered, or the code or link it waited for arrived."""
    return bool(task.hitl) and ("answer" in task.hitl or waits_for_arrival(task))


def failure_response(message):
    """The `response` of a failed task: callers always find `text` and `output`."""
    return {"output": {"type": "text", "content": message}, "text": message,
            "structuredOutput": None, "actionTrace": None}


def final_trace_entry(action, usage):
    """The last entry of a trace that something other than its run ended (a cancel, a sweep), with credits."""
    stamp = isoformat(datetime.now(timezone.utc))
    return {"url": "", "action": action, "credits": usage.get("credits", 0.0),
            "startTs": stamp, "endTs": stamp, "durationMs": 0}


def end_unheld(task_id, message, holder_lost=False):
    """A sweep ends as error a task whose run is gone (lease lapsed, machine lost); True if it won.
    What the run had done stays: its trace so far and the usage of it, as the run last wrote them together
    (workers/shown.py: the loop's own count of executed actions and their credits), so the task reports
    the actions it took, not zero."""
    row = db.session.execute(select(Task.trace, Task.usage).where(Task.id == task_id)).first()
    db.session.commit()
    trace, usage = (row.trace, row.usage) if row else (None, None)
    usage = usage or NO_USAGE
    response = failure_response(message)
    response["actionTrace"] = (trace or []) + [final_trace_entry(f"error: {message}", usage)]
    return finish(task_id, "error", response, usage, trace=response["actionTrace"], error=message,
                  holder_lost=holder_lost)


def release_for_retry(task_id):
    """Hand an expired lease back to the queue (sweep); True if released."""
    released = db.session.execute(
        update(Task).where(Task.id == task_id, Task.status == "pending",
                           Task.lease_owner.is_not(None), Task.lease_expires_at < now())
        .values(lease_owner=None, lease_expires_at=None, dispatched_at=None)
        .returning(Task.id)
    ).first() is not None
    db.session.commit()
    return released


def hand_back(task_id, owner):
    """A stopping worker gives its running task back: lease released at once, the attempt not
    counted (the run did not fail), marked undispatched until the caller publishes it again.
    True if this owner still held it."""
    released = db.session.execute(
        update(Task).where(Task.id == task_id, Task.status == "pending", Task.lease_owner == owner)
        .values(lease_owner=None, lease_expires_at=None, attempt=Task.attempt - 1, dispatched_at=None)
        .returning(Task.id)
    ).first() is not None
    db.session.commit()
    return released
