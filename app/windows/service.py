"""The window channel: windows register, long-poll for commands (a heartbeat), post results; workers send.

Commands and results are rows (`window_commands`): a web restart or a stopped extension service worker loses
nothing. Both directions wake through the process's one Postgres LISTEN connection (`app.waiting`), the one
`wait: true` uses: `window:<id>` when a command is queued, `command:<id>` when its result is in.
"""
import json
import re
import time

from flask import current_app
from sqlalchemy import delete, or_, select, text, update

from ..crypto import seal, unseal
from ..task_queries import result, task_page
from ..egress.policy import UnsafeUrl, check_navigation
from ..errors import ApiError
from ..extensions import db
from ..models import BrowserWindow, WindowCommand, now, now_plus
from ..models import clock as db_clock
from ..sessions import service as sessions
from . import workbooks

# Commands the extension understands: the driver's (browser interface) and the SDK's extension actions.
SDK_ACTIONS = ("go_to_url", "get_url", "get_screenshot", "get_full_html", "get_simplified_html",
               "execute_javascript_on_page", "press_key", "close_tab", "close_window", "print_message",
               "wait_for_element", "agentic_selector", "agentic_mouse_action", "agentic_matching_selectors_finder",
               "save_pdf_file", "user_approval", "prompt_for_user_input", "prompt_for_user_file",
               "read_excel_sheet", "write_excel_sheet", "read_google_sheet", "write_google_sheet",
               "append_google_sheet_row")
# Never sent to the window: the Excel actions work on the key's uploads (app/windows/workbooks), checked here
# and run by a worker, which claims their command row by its id (the window's own server never takes it).
WORKBOOK_ACTIONS = ("read_excel_sheet", "write_excel_sheet")
WORKBOOK_TASK = "workers.answer_workbook_action"
# Need an outside account this service has no way to reach: a clear error the SDK raises as NaradaError.
GOOGLE_SHEETS_ACTIONS = ("read_google_sheet", "write_google_sheet", "append_google_sheet_row")
# The actions whose fallback (no element matched, or nothing to match) is the model's.
MODEL_ACTIONS = ("agentic_selector", "agentic_mouse_action", "agentic_matching_selectors_finder")
NO_MATCH = "No element matches the selectors"
MAX_POLL_SECONDS = 25  # below the ~30 s after which Chromium stops a service worker awaiting a fetch
ANY = object()
# What a successful result's `data` holds, per command: the keys its readers (the extension driver, the SDK)
# take out of it, with their types. Commands not listed return an object or null.
RESULT_SHAPES = {
    "current_url": {"url": str}, "title": {"title": str}, "html": {"html": str}, "screenshot": {"base64": str},
    "read": {"url": str, "title": str, "text": str}, "extract": {"texts": list}, "wait_for": {"found": bool},
    "run_js": {"result": ANY}, "tabs": [{"index": int}],
    "get_url": {"url": str}, "get_full_html": {"html": str}, "get_simplified_html": {"html": str},
    "get_screenshot": {"base64_content": str}, "execute_javascript_on_page": {"result": ANY},
    "wait_for_element": {"found": bool}, "agentic_selector": {"value": ANY}, "user_approval": {"approved": bool},
    "prompt_for_user_input": {"values_by_name": dict}, "prompt_for_user_file": {"file": dict},
    "save_pdf_file": {"base64_content": str, "name": str, "mime_type": str},
}
_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", list: "an array", dict: "an object"}


class CommandTimeout(Exception):
    """The window did not answer in time."""


def window_state(window, offline_seconds, clock):
    if window.closed_at is not None:
        return "closed"
    if window.last_seen_at is None or (clock - window.last_seen_at).total_seconds() > offline_seconds:
        return "offline"
    return "online"


def describe(window, clock=None):
    clock = clock or db_clock()
    return {"browserWindowId": window.id, "label": window.label,
            "state": window_state(window, current_app.config["WINDOW_OFFLINE_SECONDS"], clock),
            "createdAt": window.created_at, "lastSeenAt": window.last_seen_at, "closedAt": window.closed_at}


def register(api_key_id, label=None, user_agent=None):
    window = BrowserWindow(api_key_id=api_key_id, label=label, user_agent=(user_agent or "")[:300] or None)
    db.session.add(window)
    db.session.flush()
    described = describe(window)  # before the commit: a failure leaves no half-made window behind
    db.session.commit()
    return described


def list_windows(api_key_id, include_closed=False):
    query = select(BrowserWindow).where(BrowserWindow.api_key_id == api_key_id)
    if not include_closed:
        query = query.where(BrowserWindow.closed_at.is_(None))
    windows = db.session.execute(query.order_by(BrowserWindow.created_at.desc())).scalars().all()
    clock = db_clock()
    return {"windows": [describe(w, clock) for w in windows]}


def owned_window(api_key_id, window_id):
    """The key's window (open), or 404 — also for another key's window, which must look unknown."""
    window = db.session.get(BrowserWindow, window_id) if window_id else None
    if window is None or window.api_key_id != api_key_id or window.closed_at is not None:
        raise not_found(window_id)
    return window


def online_window(api_key_id, window_id):
    """The key's window heard from within WINDOW_OFFLINE_SECONDS, or 404 (submit, extension actions)."""
    window = owned_window(api_key_id, window_id)
    clock = db_clock()
    if window_state(window, current_app.config["WINDOW_OFFLINE_SECONDS"], clock) != "online":
        raise ApiError(404, "Browser Window Not Found",
                       f"Browser window '{window_id}' is offline: its extension has not been heard from for "
                       f"{current_app.config['WINDOW_OFFLINE_SECONDS']:g} s (is the browser open and the "
                       "extension connected?).")
    return window


def not_found(window_id):
    return ApiError(404, "Browser Window Not Found",
                    f"Browser window '{window_id}' is not available to this API key.")


def close(api_key_id, window_id):
    """The window was closed in the browser: it takes no more tasks; its waiting commands fail at once."""
    owned_window(api_key_id, window_id)
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id == window_id).values(closed_at=now()))
    failed = db.session.execute(
        update(WindowCommand).where(WindowCommand.window_id == window_id, WindowCommand.state != "done")
        .values(state="done", completed_at=now(),
                result=seal({"status": "error", "data": None, "error": "The browser window was closed."}))
        .returning(WindowCommand.id)).scalars().all()
    for command_id in failed:
        _notify(f"command:{command_id}")
    db.session.commit()


def poll(api_key_id, window_ids, wait_seconds, running=()):
    """The extension's long poll: marks its windows seen, returns their commands without a result (marked
    delivered), waiting up to `wait_seconds` for one. Windows unknown to this key come back in `unknown`.

    A delivered command the extension does not list in `running` is handed out again: the answer to an
    earlier poll can be lost (Chromium stopped the service worker while it waited); a command must not be."""
    owned = set(db.session.execute(select(BrowserWindow.id).where(
        BrowserWindow.id.in_(window_ids), BrowserWindow.api_key_id == api_key_id,
        BrowserWindow.closed_at.is_(None))).scalars())
    unknown = [w for w in window_ids if w not in owned]
    if not owned:
        return {"commands": [], "unknown": unknown}
    waiters = current_app.extensions["task_waiters"]
    deadline = time.monotonic() + min(wait_seconds, MAX_POLL_SECONDS)
    # A held poll takes a thread like a `wait: true` request: it counts against the same limit (503 beyond).
    with waiters.slot(), waiters.watch_many([f"window:{w}" for w in owned]) as woken:
        while True:
            woken.clear()
            commands = _deliver(owned, set(running))
            remaining = deadline - time.monotonic()
            if commands or remaining <= 0:
                return {"commands": commands, "unknown": unknown}
            waiters.wait(woken, remaining)


def _deliver(window_ids, running):
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id.in_(window_ids))
                       .values(last_seen_at=now()))
    rows = db.session.execute(
        update(WindowCommand)
        .where(WindowCommand.window_id.in_(window_ids), WindowCommand.state.in_(("pending", "delivered")),
               WindowCommand.id.not_in(running), WindowCommand.expires_at > now(),
               WindowCommand.name.not_in(WORKBOOK_ACTIONS))
        .values(state="delivered", delivered_at=now())
        .returning(WindowCommand.id, WindowCommand.window_id, WindowCommand.task_id, WindowCommand.name,
                   WindowCommand.args, WindowCommand.expires_at, WindowCommand.created_at)).all()
    db.session.commit()  # also gives the connection back while the request waits
    rows.sort(key=lambda r: r.created_at)
    return [{"commandId": r.id, "browserWindowId": r.window_id, "requestId": r.task_id, "name": r.name,
             "args": _opened(r.args), "expiresAt": r.expires_at.isoformat()} for r in rows]


def claim_next(window_id):
    """The window's oldest pending command, handed to the caller alone (a worker serving a kept session):
    `FOR UPDATE SKIP LOCKED` then pending → delivered, so a command another server took is never run again."""
    oldest = (select(WindowCommand.id)
              .where(WindowCommand.window_id == window_id, WindowCommand.state == "pending",
                     WindowCommand.expires_at > now(), WindowCommand.name.not_in(WORKBOOK_ACTIONS))
              .order_by(WindowCommand.created_at).limit(1).with_for_update(skip_locked=True).scalar_subquery())
    row = db.session.execute(
        update(WindowCommand).where(WindowCommand.id == oldest, WindowCommand.state == "pending")
        .values(state="delivered", delivered_at=now())
        .returning(WindowCommand.id, WindowCommand.name, WindowCommand.args)).first()
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id == window_id).values(last_seen_at=now()))
    db.session.commit()
    return None if row is None else {"commandId": row.id, "name": row.name, "args": _opened(row.args)}


def has_pending(window_id):
    found = db.session.execute(select(WindowCommand.id).where(
        WindowCommand.window_id == window_id, WindowCommand.state == "pending",
        WindowCommand.expires_at > now(), WindowCommand.name.not_in(WORKBOOK_ACTIONS)).limit(1)).first() is not None
    db.session.commit()
    return found


def _opened(value):
    """Arguments and results are sealed at rest: a `type` command holds a secret's value, a result can hold
    a page that shows one."""
    return unseal(value) if isinstance(value, str) else value


def post_result(api_key_id, command_id, result):
    """The extension's answer to a command; the first answer wins, later ones are ignored."""
    command = db.session.get(WindowCommand, command_id)
    if command is None or db.session.get(BrowserWindow, command.window_id).api_key_id != api_key_id:
        raise ApiError(404, "Not Found", f"No command '{command_id}' for this API key.")
    if result["status"] == "success":  # refused before it is stored: the command waits for a good answer
        problem = _shape_problem(RESULT_SHAPES.get(command.name), result["data"])
        if problem:
            raise ApiError(400, "Invalid Request", f"data: a '{command.name}' result {problem}.")
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id == command.window_id)
                       .values(last_seen_at=now()))
    return {"accepted": _finish(command_id, result)}


def _finish(command_id, result):
    """Store a command's first answer and wake its sender; True if this answer was the first."""
    done = db.session.execute(
        update(WindowCommand).where(WindowCommand.id == command_id,
                                    WindowCommand.state.in_(("pending", "delivered")))
        .values(state="done", result=seal(result), completed_at=now())).rowcount
    if done:
        _notify(f"command:{command_id}")
    db.session.commit()
    return bool(done)


def answer_workbook_command(command_id):
    """A worker's part of an Excel action: claim its command (unless it was withdrawn or expired), run it, answer.
    Returns the action's name, or None when there was nothing to run."""
    row = db.session.execute(
        update(WindowCommand).where(WindowCommand.id == command_id, WindowCommand.state == "pending",
                                    WindowCommand.name.in_(WORKBOOK_ACTIONS), WindowCommand.expires_at > now())
        .values(state="delivered", delivered_at=now())
        .returning(WindowCommand.name, WindowCommand.args, WindowCommand.window_id)).first()
    if row is None:
        db.session.commit()
        return None
    api_key_id = db.session.get(BrowserWindow, row.window_id).api_key_id
    db.session.commit()  # no transaction while the workbook is worked on
    _finish(command_id, workbooks.answer(api_key_id, row.name, _opened(row.args) or {}))
    return row.name


def _shape_problem(shape, data):
    """What is wrong with `data` for `shape` (None if nothing): no walk deeper than the shape."""
    if shape is None:
        return None if data is None or isinstance(data, dict) else "must be an object or null"
    if isinstance(shape, list):
        if not isinstance(data, list):
            return "must be an array"
        return next((f"item {i} {problem}" for i, item in enumerate(data)
                     if (problem := _shape_problem(shape[0], item))), None)
    if not isinstance(data, dict):
        return "must be an object"
    for key, kind in shape.items():
        if key not in data:
            return f"must have '{key}'"
        value = data[key]
        if kind is not ANY and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            return f"must have '{key}' as {_TYPE_NAMES[kind]}"
    return None


class CommandStopped(Exception):
    """`should_stop` turned true (the task was cancelled) while the command waited."""


STOP_CHECK_SECONDS = 0.5  # how soon a cancel is noticed while a long command (a wait) runs


def send_command(window_id, name, args, timeout, task_id=None, action_execution_id=None, should_stop=None,
                 on_queued=None):
    """Queue a command for a window and block until its result (`{"status", "data", "error"}`).

    Raises CommandTimeout when no result came within `timeout` seconds, CommandStopped when `should_stop()`
    turned true; the command is then withdrawn so a late extension never runs it. The result wakes this
    thread through NOTIFY; `should_stop` is read between slices of the wait. `on_queued(command_id)` runs once
    the command is committed (who serves it then finds it)."""
    # created_at given, not left to the column default: SQLite databases made before 0013 was fixed have
    # DEFAULT now(), a function SQLite does not have.
    command = WindowCommand(window_id=window_id, name=name, args=seal(args or {}), task_id=task_id,
                            action_execution_id=action_execution_id, expires_at=now_plus(timeout),
                            created_at=now())
    db.session.add(command)
    db.session.flush()
    command_id = command.id
    _notify(f"window:{window_id}")
    waiters = current_app.extensions["task_waiters"]
    deadline = time.monotonic() + timeout
    with waiters.watch(f"command:{command_id}") as woken:
        db.session.commit()
        if on_queued is not None:
            try:
                on_queued(command_id)
            except Exception:
                # Whoever was asked to serve it was not reached (the queue is down). A server still running may
                # have taken it already, and then its result is awaited; else it is withdrawn, never run late.
                if _withdraw(command_id, only_pending=True):
                    raise
        while True:
            woken.clear()
            row = db.session.execute(select(WindowCommand.state, WindowCommand.result)
                                     .where(WindowCommand.id == command_id)).one_or_none()
            db.session.rollback()
            if row is None:  # its window was deleted
                return {"status": "error", "data": None, "error": "The browser window was closed."}
            if row.state == "done":
                # Consumed: the row goes, and with it the sealed arguments and result.
                db.session.execute(delete(WindowCommand).where(WindowCommand.id == command_id))
                db.session.commit()
                return _opened(row.result)
            remaining = deadline - time.monotonic()
            stopped = should_stop is not None and should_stop()
            if remaining <= 0 or stopped:
                _withdraw(command_id)
                if stopped:
                    raise CommandStopped(f"Stopped while the browser window ran '{name}'.")
                raise CommandTimeout(f"The browser window did not answer '{name}' within {timeout:g} s.")
            waiters.wait(woken, remaining if should_stop is None else min(remaining, STOP_CHECK_SECONDS))


def _withdraw(command_id, only_pending=False):
    """Expire a command not yet done (not yet taken: `only_pending`), so a late extension or worker never runs
    it; True if it was."""
    withdrawn = db.session.execute(
        update(WindowCommand).where(WindowCommand.id == command_id,
                                    WindowCommand.state == "pending" if only_pending else WindowCommand.state != "done")
        .values(state="expired", completed_at=now(), args=seal({}))).rowcount == 1
    db.session.commit()
    return withdrawn


def _notify(key):
    """Delivered when the transaction commits; SQLite (embedded) has no NOTIFY and waiters poll."""
    if db.session.get_bind().dialect.name == "postgresql":
        db.session.execute(text("SELECT pg_notify('task_finished', :key)"), {"key": key})


def run_extension_action(api_key_id, body):
    """POST /extension-actions: run one SDK action in the key's window; (`{status, data, error}`) or 504."""
    window_id = body["browserWindowId"]
    action = dict(body["action"])
    name = action.pop("name")
    if name == "go_to_url":  # the window opens it: the same check as a client-mode task's navigation
        try:
            check_navigation(current_app.config, action.get("url"))
        except UnsafeUrl as exc:
            raise ApiError(400, "Invalid Request", f"action.url: refused: {exc}.") from None

    # A kept cloud session's window has no extension: a worker runs the action in the session's browser.
    session = sessions.serving_window(api_key_id, window_id)
    if session is None:
        online_window(api_key_id, window_id)
    answered = _answered_here(api_key_id, name, action)  # after the window's check: the same 404s for every action
    if answered is not None:
        return answered
    config = current_app.config
    ceiling = config["EXTENSION_ACTION_MAX_SECONDS"]
    timeout = min(body.get("timeout") or config["WINDOW_COMMAND_TIMEOUT_SECONDS"], ceiling)
    try:
        result = send_command(window_id, name, action, timeout, action_execution_id=body["actionExecutionId"],
                              on_queued=_server(name, None if session is None else session.id))
    except CommandTimeout as exc:
        raise ApiError(504, "Gateway Timeout", f"{exc} The action was withdrawn.") from None
    if result.get("refused"):  # the worker found what only the parsed workbook shows (an open range too wide)
        raise ApiError(400, "Invalid Request", f"action: {result.get('error')}")
    data, error = result.get("data"), result.get("error")
    if name == "save_pdf_file" and isinstance(data, dict) and "name" in data:
        data = {**data, "name": base_name(data["name"], "document.pdf")}
    if name in MODEL_ACTIONS and error and error.startswith(NO_MATCH) and not model_configured():
        error = f"{error} {_no_model(action)}"
    return {"status": result.get("status", "error"),
            "data": None if data is None else json.dumps(data),
            "error": error}


def _server(name, session_id):
    """Who is asked to answer a committed command (`on_queued`): a worker for the Excel actions (the web process
    only waits for them) and for a kept session's; an extension polls for its own."""
    if name in WORKBOOK_ACTIONS:
        return lambda command_id: sessions.publish_action(WORKBOOK_TASK, [command_id])
    if session_id is not None:
        return lambda _: sessions.serve_actions(session_id)
    return None


def base_name(name, default):
    """A file name the caller can save under as it is: the page chose it, so `../../../tmp/x.pdf` is `x.pdf`."""
    last = re.split(r"[\\/]", str(name))[-1]
    last = "".join(c for c in last if c.isprintable()).strip().lstrip(".")
    return last[:200] or default


def model_configured():
    """The planners' test (workers/planners): a model is named."""
    return bool(current_app.config.get("LLM_MODEL"))


def _no_model(action):
    query = action.get("fallback_operator_query") or action.get("prompt") or ""
    return (f"The model fallback for \"{query}\" needs a language model, and this service has none configured: "
            "set LLM_BASE_URL and LLM_MODEL (and LLM_API_KEY if the server wants one) and restart the service.")


def _answered_here(api_key_id, name, action):
    """The result of an action that needs no browser (or no browser can do), else None."""
    if name in WORKBOOK_ACTIONS:  # checked here, before a worker is asked: bad input is an immediate 400
        try:
            workbooks.check(api_key_id, name, action)
        except workbooks.WorkbookRefused as exc:
            raise ApiError(400, "Invalid Request", f"action: {exc}") from None
        except workbooks.WorkbookError as exc:
            return {"status": "error", "data": None, "error": str(exc)}
        return None
    if name in GOOGLE_SHEETS_ACTIONS:
        return {"status": "error", "data": None,
                "error": f"'{name}' needs a Google account reached over the internet, which this service does not "
                         "have: Google Sheets are not available here. Use read_excel_sheet / write_excel_sheet "
                         "on an uploaded .xlsx file instead."}
    if name == "agentic_matching_selectors_finder" and not model_configured():
        return {"status": "error", "data": None, "error": _no_model(action)}
    return None


def window_tasks(api_key_id, window_id, limit=10):
    """The window's recent tasks (side panel): poll-shaped, with their prompts."""
    owned_window(api_key_id, window_id)
    page = task_page(api_key_id, window=window_id, limit=limit)
    return {"tasks": [{**result(task), "prompt": task.prompt} for task in page["tasks"]]}


def purge_old_commands(keep_seconds=86400):
    """Delete commands finished or expired more than `keep_seconds` ago (beat, hourly); returns how many."""
    deleted = db.session.execute(delete(WindowCommand).where(or_(
        WindowCommand.completed_at < now_plus(-keep_seconds),
        WindowCommand.expires_at < now_plus(-keep_seconds)))).rowcount
    db.session.commit()
    return deleted
