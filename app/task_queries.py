"""The read side of tasks: lookup, the poll-shaped view, pages of a key's tasks, the GIF."""
import re
from datetime import timezone

from flask import current_app
from sqlalchemy import String, Text, and_, cast, func, or_, select, type_coerce
from sqlalchemy.orm import load_only

from .errors import ApiError
from .extensions import db
from .models import Task, TaskGif


def _owns_task(api_key_id, task_id):
    return db.session.execute(
        select(Task.id).where(Task.id == task_id, Task.api_key_id == api_key_id)
    ).first() is not None


# Every id this service makes (a UUID) matches; anything else (NUL, other text Postgres refuses)
# is unknown without asking the database.
TASK_ID = re.compile(r"[A-Za-z0-9_.-]{1,36}")


def is_task_id(value):
    return isinstance(value, str) and TASK_ID.fullmatch(value) is not None


def get_task(api_key_id, task_id, fresh=False):
    """The caller's task, or 404 (unknown and foreign ids look the same)."""
    task = db.session.get(Task, task_id, populate_existing=fresh) if is_task_id(task_id) else None
    if task is None or task.api_key_id != api_key_id:
        raise ApiError(404, "Request Not Found", f"No request '{task_id}' for this API key.")
    return task


NO_USAGE = {"actions": 0, "credits": 0.0}  # a task that ended before any action ran (the SDK refuses null)


def isoformat(ts):
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z") if ts else None


def result(task):
    """The poll-shaped view of a task."""
    body = {
        "requestId": task.id,
        "status": task.status,
        "browserWindowId": task.browser_window_id,
        "executionMode": task.execution_mode,
        "response": task.response if task.status != "pending" else None,
        "createdAt": isoformat(task.created_at),
        "completedAt": isoformat(task.completed_at),
        # A row finished before every ending wrote usage (app/lifecycle.py) still answers with one.
        "usage": task.usage or (NO_USAGE if task.completed_at else None),
        "hitlInputMetadata": task.hitl if task.status == "input-required" else None,
        "trigger": "schedule" if task.schedule_id else "api",
        "scheduleId": task.schedule_id,
    }
    if task.status == "pending":
        body["progress"] = {"actionTrace": task.trace or []}
    replay = (task.options or {}).get("replay")
    if replay:
        script = task.script or {}
        body["replay"] = {k: replay[k] for k in ("replayOf", "scriptId") if replay.get(k)}
        body["replay"].update(version=replay["script"].get("version", 1), healed=script.get("healed", []),
                              newVersion=script.get("version") if script.get("healed") else None)
    if (task.options or {}).get("generateGif"):
        body["gifUrl"] = f"/fast/v2/remote-dispatch/responses/{task.id}/gif" if _has_gif(task.id) else None
    return body


def _has_gif(task_id):
    return db.session.execute(select(TaskGif.task_id).where(TaskGif.task_id == task_id)).first() is not None


def task_gif(api_key_id, task_id):
    """The GIF recording of the caller's task (bytes), or None when it has none; 404 for another key's task."""
    get_task(api_key_id, task_id)
    return db.session.execute(select(TaskGif.data).where(TaskGif.task_id == task_id)).scalar_one_or_none()


def list_tasks(api_key_id, status=None, limit=20, cursor=None, scheduleId=None):
    """The key's tasks, newest first, `limit` at a time; `cursor` continues after a page.

    A page also ends before LIST_PAGE_MAX_BYTES of stored results (it holds at least one task),
    so one request never loads more than that, however large the tasks.
    """
    page = task_page(api_key_id, status=status, limit=limit, cursor=cursor, schedule=scheduleId,
                     max_bytes=current_app.config["LIST_PAGE_MAX_BYTES"], columns=_RESULT_COLUMNS)
    return {"responses": [result(task) for task in page["tasks"]], "nextCursor": page["nextCursor"]}


# What result() reads: a list page loads these columns only (not the prompt, options or conversation).
_RESULT_COLUMNS = (Task.id, Task.status, Task.browser_window_id, Task.execution_mode, Task.response,
                   Task.created_at, Task.completed_at, Task.usage, Task.hitl, Task.trace, Task.schedule_id)


def _stored_size(column):
    return func.coalesce(func.length(cast(column, Text)), 0)


# The text of what a result carries, measured by the database before any row is loaded.
_RESULT_SIZE = (_stored_size(Task.response) + _stored_size(Task.trace) + _stored_size(Task.hitl)
                + _stored_size(Task.usage)).label("size")


def task_page(api_key_id, status=None, mode=None, search=None, window=None, limit=20, cursor=None,
              max_bytes=None, columns=None, schedule=None):
    """One page of the key's Task rows, newest first: {"tasks", "nextCursor"}.

    `mode` filters by executionMode, `search` by prompt text (case-insensitive substring),
    `window` by browserWindowId, `schedule` by scheduleId. `max_bytes` ends the page early (after at least one task) once
    the stored results would exceed it; `columns` loads only those columns of each row.
    """
    query = select(Task.id, Task.created_at, _RESULT_SIZE).where(Task.api_key_id == api_key_id)
    if window:
        query = query.where(Task.browser_window_id == window)
    if schedule:
        query = query.where(Task.schedule_id == schedule)
    if status:
        query = query.where(Task.status == status)
    if mode:
        query = query.where(Task.execution_mode == mode)
    if search:
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        query = query.where(Task.prompt.ilike(pattern, escape="\\"))
    if cursor:
        query = query.where(older_than(*cursor))
    rows = db.session.execute(
        query.order_by(Task.created_at.desc(), Task.id.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    if max_bytes is not None:
        used = 0
        for index, row in enumerate(rows):
            used += row.size
            if index and used > max_bytes:
                rows, more = rows[:index], True
                break
    tasks = _load_tasks([row.id for row in rows], columns)
    return {"tasks": tasks, "nextCursor": (rows[-1].created_at, rows[-1].id) if more else None}


def _load_tasks(ids, columns=None):
    """The Task rows of `ids`, in that order."""
    if not ids:
        return []
    query = select(Task).where(Task.id.in_(ids))
    if columns:
        query = query.options(load_only(*columns))
    by_id = {task.id: task for task in db.session.execute(query).scalars()}
    return [by_id[task_id] for task_id in ids if task_id in by_id]


def older_than(created_at, last_id, model=Task, id_column="id"):
    """The tasks (or other rows of `model` with created_at) after a page whose last row is (created_at,
    last_id), in the page order (created_at, id).

    SQLite keeps created_at as the text the database clock wrote: '…21.254' (milliseconds), or '…21' in rows
    from before milliseconds, and text compares as text: the cursor's time is written in that same form (a
    bound datetime, '…21.254000', would not equal it, and a page's last task came again on the next page). The
    column itself is compared, so the (api_key_id, created_at) index still serves every page.
    """
    column, row_id = model.created_at, getattr(model, id_column)
    if db.session.get_bind().dialect.name != "sqlite":
        return or_(column < created_at, and_(column == created_at, row_id < last_id))
    created_at = created_at.astimezone(timezone.utc)
    second = created_at.strftime("%Y-%m-%d %H:%M:%S")
    if created_at.microsecond // 1000:
        stored = type_coerce(f"{second}.{created_at.microsecond // 1000:03d}", String)
        return or_(column < stored, and_(column == stored, row_id < last_id))
    # A whole second: '…21.000' from the clock, or '…21' from an older row (a second never holds both).
    whole, clock = type_coerce(second, String), type_coerce(second + ".000", String)
    return or_(column < whole, and_(column.in_([whole, clock]), row_id < last_id))
