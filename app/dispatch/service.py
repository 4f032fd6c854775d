"""Task submission and results: these functions own the transaction and enqueue after commit."""
import logging

from flask import current_app
from sqlalchemy import select, update

from ..crypto import seal
from ..errors import ApiError, invalid
from ..extensions import TASKS_QUEUE, db
from ..models import BrowserWindow, Task, now

log = logging.getLogger(__name__)

OPERATOR_PREFIX = "/Operator"
# Submitted options kept with the task, under their API names.
OPTION_FIELDS = (
    "clearChat", "generateGif", "responseFormat", "attachments", "timeZone", "mcpServers",
    "inputVariables", "chatHistory", "additionalContext", "reasoningMode",
    "cloudBrowserSessionName",
)


def agent_for(prompt):
    """`/Operator` selects the web agent; anything else the general agent (never an error)."""
    return "web" if prompt.lstrip().startswith(OPERATOR_PREFIX) else "general"


def submit(api_key_id, data):
    """Store a task, commit, then publish it; returns the new requestId."""
    mode = data["executionMode"]
    window_id = data.get("browserWindowId") if mode == "client" else None
    if mode == "client":
        _require_window(api_key_id, window_id)
    previous = data.get("previousRequestId")
    if previous and not _owns_task(api_key_id, previous):
        raise invalid(f"previousRequestId '{previous}' is not a request made with this API key.")

    callback = None
    if data.get("callbackUrl"):
        callback = {"secret": data.get("callbackSecret"), "headers": data.get("callbackHeaders") or {}}
    task = Task(
        api_key_id=api_key_id,
        status="pending",
        agent=agent_for(data["prompt"]),
        execution_mode=mode,
        browser_window_id=window_id,
        prompt=data["prompt"],
        options={name: data[name] for name in OPTION_FIELDS if data.get(name) is not None},
        previous_request_id=previous,
        callback_url=data.get("callbackUrl"),
        callback_sealed=seal(callback),
        secrets_sealed=seal(data.get("secretVariables") or None),
    )
    db.session.add(task)
    db.session.commit()
    dispatch(task.id)
    return task.id


def dispatch(task_id):
    """Publish "look at task X"; on failure the task stays undispatched and beat re-publishes it."""
    try:
        current_app.extensions["celery"].send_task(
            "workers.run_task", args=[task_id], queue=TASKS_QUEUE,
            retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.2},
        )
    except Exception as exc:  # broker down: the row is the outbox
        log.warning("publish of task %s failed, beat will retry: %s", task_id, exc)
        return False
    db.session.execute(update(Task).where(Task.id == task_id).values(dispatched_at=now()))
    db.session.commit()
    return True


def answer_input(api_key_id, task_id, data):
    """Resume a task paused on a question (`input-required`) with the user's answer."""
    task = get_task(api_key_id, task_id)
    hitl = task.hitl or {}
    if task.status != "input-required" or not hitl.get("inputId"):
        raise ApiError(409, "Conflict", f"Request '{task_id}' is not waiting for input (status: {task.status}).")
    if data.get("inputId") and data["inputId"] != hitl["inputId"]:
        raise ApiError(409, "Conflict", f"inputId '{data['inputId']}' is not the question request "
                                        f"'{task_id}' is waiting on ('{hitl['inputId']}').")
    # The answer rides in `hitl` until the worker puts it into the conversation.
    resumed = db.session.execute(
        update(Task).where(Task.id == task_id, Task.status == "input-required", Task.lease_owner.is_(None))
        .values(status="pending", hitl={**hitl, "answer": data["answer"]}, response=None,
                input_deadline_at=None, dispatched_at=None)
        .returning(Task.id)
    ).first() is not None
    db.session.commit()
    if not resumed:  # answered twice at once, or the input timeout ended it meanwhile
        raise ApiError(409, "Conflict", f"Request '{task_id}' is no longer waiting for input.")
    dispatch(task_id)
    return task_id


def _require_window(api_key_id, window_id):
    window = db.session.get(BrowserWindow, window_id)
    if window is None or window.api_key_id != api_key_id or window.closed_at is not None:
        raise ApiError(404, "Browser Window Not Found",
                       f"Browser window '{window_id}' is not available to this API key.")


def _owns_task(api_key_id, task_id):
    return db.session.execute(
        select(Task.id).where(Task.id == task_id, Task.api_key_id == api_key_id)
    ).first() is not None


def get_task(api_key_id, task_id):
    """The caller's task, or 404 (unknown and foreign ids look the same)."""
    task = db.session.get(Task, task_id) if len(task_id) <= 36 else None
    if task is None or task.api_key_id != api_key_id:
        raise ApiError(404, "Request Not Found", f"No request '{task_id}' for this API key.")
    return task


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
        "usage": task.usage,
        "hitlInputMetadata": task.hitl if task.status == "input-required" else None,
    }
    if task.status == "pending":
        body["progress"] = {"actionTrace": task.trace or []}
    return body
