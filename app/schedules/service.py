"""Schedules: create, read, change, pause; and fire_due(), beat's sweep that submits each due fire as a task.

A fire time makes at most one task: the task row carries (schedule_id, fire_at) under a unique constraint, and the
schedule's cursor (next_fire_at) moves with a compare-and-swap in the same transaction, so two beats, or a beat
restarted across a fire time, cannot make a second one.
"""
import logging
from datetime import timedelta

from flask import current_app
from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError

from .. import lifecycle
from ..crypto import seal, unseal
from ..dispatch import service as dispatch
from ..task_queries import isoformat, older_than
from ..dispatch.schemas import SubmitSchema
from ..errors import ApiError, invalid
from ..extensions import db
from ..models import ApiKey, Schedule, Task, new_id
from ..scripts import service as scripts
from . import cron

log = logging.getLogger(__name__)
NEXT_RUNS = 5
BATCH = 200
RUNNING = ("pending", "input-required")
HIDDEN = "********"


def _not_found(schedule_id):
    return ApiError(404, "Schedule Not Found", f"No schedule '{schedule_id}' for this API key.")


def get_schedule(api_key_id, schedule_id):
    """The caller's schedule, or 404 (unknown and another key's look the same)."""
    schedule = db.session.get(Schedule, schedule_id) if isinstance(schedule_id, str) and len(schedule_id) <= 36 \
        else None
    if schedule is None or schedule.api_key_id != api_key_id:
        raise _not_found(schedule_id)
    return schedule


def _timing(expr, zone_name, now):
    """400 for an expression or a zone that cannot run (or fires too often); else its next fire time."""
    try:
        cron.check(expr, zone_name, now, current_app.config["SCHEDULE_MIN_INTERVAL_SECONDS"])
        return cron.fires_after(expr, zone_name, now, 1)[0]
    except cron.CronProblem as exc:
        raise invalid(f"{'timeZone' if 'time zone' in str(exc) else 'cron'}: {exc}") from None


def _check_task(api_key_id, task):
    """What a submit checks beyond its schema and can check now: the replayed script, the previous request."""
    data = SubmitSchema().load(task)
    scripts.replay_for(api_key_id, data)
    previous = data.get("previousRequestId")
    if previous and db.session.execute(select(Task.id).where(
            Task.id == previous, Task.api_key_id == api_key_id)).first() is None:
        raise invalid(f"task: previousRequestId '{previous}' is not a request made with this API key.")


def create(api_key_id, data, cap, now=None):
    """Store a schedule (201 body); 403 once the key has `cap` schedules (its plan's "schedules")."""
    now = now or cron.utcnow()
    count = db.session.execute(select(func.count()).select_from(Schedule)
                               .where(Schedule.api_key_id == api_key_id)).scalar_one()
    if count >= cap:
        raise ApiError(403, "Schedule Limit Reached",
                       f"This key's plan allows {cap} schedule{'s' if cap != 1 else ''}; delete one first, or use "
                       "a key of a plan with more (RATE_LIMIT_PLANS \"schedules\").")
    first = _timing(data["cron"], data["timeZone"], now)
    _check_task(api_key_id, data["task"])
    schedule = Schedule(id=new_id(), api_key_id=api_key_id, name=data["name"], cron=data["cron"],
                        time_zone=data["timeZone"], task_sealed=seal(data["task"]), overlap=data["overlap"],
                        catch_up=data["catchUp"], status="active", next_fire_at=first, failures_in_row=0)
    db.session.add(schedule)
    db.session.commit()
    return view(schedule, now)


def update_schedule(api_key_id, schedule_id, data, now=None):
    """Change what is given; a new cron or zone starts counting from now."""
    now = now or cron.utcnow()
    schedule = get_schedule(api_key_id, schedule_id)
    expr, zone_name = data.get("cron", schedule.cron), data.get("timeZone", schedule.time_zone)
    nxt = _timing(expr, zone_name, now)
    if "task" in data:
        _check_task(api_key_id, data["task"])
        schedule.task_sealed = seal(data["task"])
    if expr != schedule.cron or zone_name != schedule.time_zone:
        schedule.next_fire_at, schedule.queued_fire_at = nxt, None
    schedule.cron, schedule.time_zone = expr, zone_name
    for field, column in (("name", "name"), ("overlap", "overlap"), ("catchUp", "catch_up")):
        if field in data:
            setattr(schedule, column, data[field])
    db.session.commit()
    return view(schedule, now)


def delete_schedule(api_key_id, schedule_id):
    """Delete it; its runs stay tasks of the key (still listable by scheduleId)."""
    db.session.delete(get_schedule(api_key_id, schedule_id))
    db.session.commit()


def pause(api_key_id, schedule_id, reason="Paused through the API.", now=None):
    schedule = get_schedule(api_key_id, schedule_id)
    schedule.status, schedule.paused_reason, schedule.queued_fire_at = "paused", reason, None
    db.session.commit()
    return view(schedule, now)


def resume(api_key_id, schedule_id, now=None):
    """Active again from now on: the fires that passed while paused are not runs owed (nor counted failures)."""
    now = now or cron.utcnow()
    schedule = get_schedule(api_key_id, schedule_id)
    schedule.next_fire_at = _timing(schedule.cron, schedule.time_zone, now)
    schedule.status, schedule.paused_reason, schedule.failures_in_row = "active", None, 0
    db.session.commit()
    return view(schedule, now)


def list_schedules(api_key_id, limit=20, cursor=None, now=None):
    query = select(Schedule).where(Schedule.api_key_id == api_key_id)
    if cursor:
        query = query.where(older_than(*cursor, model=Schedule))
    rows = db.session.execute(query.order_by(Schedule.created_at.desc(), Schedule.id.desc())
                              .limit(limit + 1)).scalars().all()
    more = len(rows) > limit
    rows = rows[:limit]
    return {"schedules": [view(row, now) for row in rows],
            "nextCursor": (rows[-1].created_at, rows[-1].id) if more else None}


def _shown_task(task):
    """The stored submit body without its secrets (they stay sealed; each run gets them): secret variables, the
    callback's secret and headers, the proxy, MCP servers' credentials."""
    shown = dict(task)
    for name in ("secretVariables", "callbackHeaders"):
        if isinstance(shown.get(name), dict):
            shown[name] = {key: HIDDEN for key in shown[name]}
    for name in ("callbackSecret", "proxy"):
        if shown.get(name):
            shown[name] = HIDDEN
    if isinstance(shown.get("mcpServers"), list):
        shown["mcpServers"] = [{**server, "authentication": {"type": (server.get("authentication") or {}).get(
            "type", "none")}} if isinstance(server, dict) else server for server in shown["mcpServers"]]
    return shown


def last_run(schedule_id):
    task = db.session.execute(select(Task).where(Task.schedule_id == schedule_id)
                              .order_by(Task.fire_at.desc()).limit(1)).scalar_one_or_none()
    if task is None:
        return None
    return {"requestId": task.id, "fireTime": isoformat(task.fire_at), "status": task.status,
            "completedAt": isoformat(task.completed_at), "text": (task.response or {}).get("text")
            if task.status in lifecycle.TERMINAL else None}


def next_runs(schedule, now=None, count=NEXT_RUNS):
    if schedule.status != "active":
        return []
    now = now or cron.utcnow()
    start = schedule.next_fire_at
    if start is None or start <= now:  # due (beat fires it on its next sweep): shown from now on
        return [isoformat(t) for t in cron.fires_after(schedule.cron, schedule.time_zone, now, count)]
    return [isoformat(start)] + [isoformat(t) for t in
                                 cron.fires_after(schedule.cron, schedule.time_zone, start, count - 1)]


def view(schedule, now=None):
    return {
        "scheduleId": schedule.id, "name": schedule.name, "cron": schedule.cron, "timeZone": schedule.time_zone,
        "task": _shown_task(unseal(schedule.task_sealed)), "overlap": schedule.overlap,
        "catchUp": schedule.catch_up, "status": schedule.status, "pausedReason": schedule.paused_reason,
        "failuresInRow": schedule.failures_in_row, "nextRuns": next_runs(schedule, now),
        "lastRun": last_run(schedule.id), "lastSkipped": schedule.last_skip,
        "createdAt": isoformat(schedule.created_at),
    }


# --- beat -------------------------------------------------------------------------------------------------------

def fire_due(now=None):
    """Submit a task for each active schedule whose fire time has come (or whose queued fire may run now); returns
    how many tasks it made. `now` is injectable: tests drive the clock."""
    now = now or cron.utcnow()
    ids = db.session.execute(
        select(Schedule.id).join(ApiKey, ApiKey.id == Schedule.api_key_id)
        .where(Schedule.status == "active", ApiKey.revoked_at.is_(None),
               or_(Schedule.next_fire_at <= now, Schedule.queued_fire_at.is_not(None)))
        .order_by(Schedule.next_fire_at).limit(BATCH)
    ).scalars().all()
    db.session.commit()
    made = sum(1 for schedule_id in ids if _fire(schedule_id, now))
    if made:
        log.info("schedules: %d runs submitted", made)
    return made


def _due_fires(schedule, now):
    """The fire times from the cursor up to now, oldest first (the last one is what a catch-up runs)."""
    if schedule.next_fire_at > now:
        return []
    fires = [schedule.next_fire_at]
    for moment in cron.fires_after(schedule.cron, schedule.time_zone, schedule.next_fire_at):
        if moment > now:
            break
        fires.append(moment)
        if len(fires) > 10_000:  # years of minutes missed: only the last one matters
            fires = fires[-1:]
    return fires


def _running(schedule_id):
    return db.session.execute(select(Task.id).where(Task.schedule_id == schedule_id, Task.status.in_(RUNNING))
                              .limit(1)).scalar_one_or_none()


def _fire(schedule_id, now):
    """Handle one schedule's due fires in one transaction; True if it made a task."""
    schedule = db.session.get(Schedule, schedule_id, populate_existing=True)
    if schedule is None or schedule.status != "active":
        db.session.rollback()
        return False
    due = _due_fires(schedule, now)
    running = _running(schedule.id)
    queued, fire, skip = schedule.queued_fire_at, None, None
    late = timedelta(seconds=current_app.config["SCHEDULE_LATE_SECONDS"])
    if queued is not None and running is None:
        fire, queued = queued, None  # the queued fire runs now; the fires since fold into it
    elif due and running is not None and schedule.overlap == "skip":
        skip = f"The fire of {isoformat(due[-1])} was skipped: run {running} was still going (overlap: skip)."
    elif due and running is not None and schedule.overlap == "queue":
        queued = queued or due[-1]
    elif due and schedule.catch_up == "none" and now - due[-1] > late:
        skip = (f"{len(due)} fire{'s' if len(due) != 1 else ''} up to {isoformat(due[-1])} missed (beat was not "
                f"running); catchUp: none skips them.")
    elif due:
        fire = due[-1]  # on time, or (catchUp: once) one run for all that were missed
    if not due and fire is None:
        db.session.rollback()
        return False
    next_fire = cron.fires_after(schedule.cron, schedule.time_zone, now, 1)[0] if due else schedule.next_fire_at
    move = (
        update(Schedule).where(Schedule.id == schedule.id, Schedule.status == "active",
                               _same(Schedule.next_fire_at, schedule.next_fire_at),
                               _same(Schedule.queued_fire_at, schedule.queued_fire_at))
        .values(next_fire_at=next_fire, queued_fire_at=queued,
                last_fire_at=fire or schedule.last_fire_at, last_skip=skip if fire is None and skip else None))
    if not db.session.execute(move).rowcount:  # another beat handled it meanwhile
        db.session.rollback()
        return False
    if fire is None:
        db.session.commit()
        return False
    return _submit_run(schedule, fire, move)


def _same(column, value):
    return column.is_(None) if value is None else column == value


def _submit_run(schedule, fire, move):
    """The run of `fire`, in the transaction that moved the cursor; a submit the task is refused at (its window is
    offline, its script gone) is a failed run, kept as a task that says why."""
    data = SubmitSchema().load(unseal(schedule.task_sealed))
    data["wait"] = False
    try:
        dispatch.submit(schedule.api_key_id, data, schedule=(schedule.id, fire))
        return True
    except IntegrityError:  # this fire time has its task already
        db.session.rollback()
        return False
    except ApiError as exc:
        db.session.rollback()
        message = f"The scheduled run could not start: {exc.message}"
    task_id = new_id()
    try:
        if not db.session.execute(move).rowcount:
            db.session.rollback()
            return False
        db.session.add(Task(id=task_id, api_key_id=schedule.api_key_id, status="pending",
                            agent=dispatch.agent_for(data.get("prompt")), execution_mode=data["executionMode"],
                            prompt=data.get("prompt") or "", options={}, schedule_id=schedule.id, fire_at=fire))
        db.session.commit()
    except IntegrityError:
        db.session.rollback()
        return False
    lifecycle.finish(task_id, "error", lifecycle.failure_response(message), None, error=message)
    return True
